"""Write a live run's finished actions as a JSONL trace that ``tangram_sim.trace`` replays."""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from apps.actions.selectors import action_trace
from apps.core.exceptions import ApplicationError
from tangram_sim.trace import write_trace


def iso_time(raw: str) -> datetime:
    try:
        at = datetime.fromisoformat(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an ISO 8601 time such as 2026-01-31T12:00:00+00:00, got {raw!r}"
        ) from None
    return at if timezone.is_aware(at) else timezone.make_aware(at)


class Command(BaseCommand):
    help = (
        "Write finished actions (succeeded, failed, timed out) as a JSONL trace for "
        "`python -m tangram_sim.trace replay`. Types become <task>.<type>, the task "
        "being each action's job unless --task names one."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("out", help="the file to write, or - for standard output")
        parser.add_argument("--job", action="append", default=[], help="only this job (repeatable)")
        parser.add_argument(
            "--tenant", action="append", default=[], help="only this tenant (repeatable)"
        )
        parser.add_argument(
            "--since",
            type=iso_time,
            help="only actions submitted at or after this time (ISO 8601; without an offset, "
            "the server's time zone)",
        )
        parser.add_argument(
            "--task", help="the workload task every action belongs to (default: its job)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            records = action_trace(
                tenants=options["tenant"],
                jobs=options["job"],
                since=options["since"],
                task=options["task"],
            )
        except ApplicationError as exc:
            raise CommandError(
                f"--{exc.field}: {exc.message}" if exc.field else exc.message
            ) from None
        if not records:
            raise CommandError(f"No finished actions {self._describe(options)}.")
        if options["out"] == "-":
            write_trace(records, self.stdout)
            return
        with open(options["out"], "w", encoding="utf-8") as out:
            count = write_trace(records, out)
        self.stdout.write(f"{count} actions written to {options['out']}")

    @staticmethod
    def _describe(options: dict[str, Any]) -> str:
        parts = [
            f"{flag} {', '.join(options[flag])}" for flag in ("tenant", "job") if options[flag]
        ]
        if options["since"] is not None:
            parts.append(f"since {options['since'].isoformat()}")
        return "for " + "; ".join(parts) if parts else "at all"

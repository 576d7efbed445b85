"""Issue an agent token and print it once."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from apps.inventory.services import agent_token_issue


class Command(BaseCommand):
    help = "Issue a token that agents use to connect; prints it once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", default="agents")
        parser.add_argument("--token", help="Use this value instead of a random one.")

    def handle(self, *args: Any, **options: Any) -> None:
        _, raw = agent_token_issue(name=options["name"], raw=options["token"])
        self.stdout.write(raw)

"""Issue a tenant API token (creating the tenant if needed) and print it once."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from apps.core.exceptions import ApplicationError
from apps.tenants import services
from apps.tenants.models import Tenant

QUOTA_FORMAT = "KIND=GUARANTEED:LIMIT[:WEIGHT[:LENDING_LIMIT]]"


class Command(BaseCommand):
    help = "Issue an API token for a tenant (created if missing); prints the token once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("tenant")
        parser.add_argument("--name", default="cli")
        parser.add_argument("--token", help="Use this value instead of a random one.")
        parser.add_argument(
            "--quota",
            action="append",
            default=[],
            metavar=QUOTA_FORMAT,
            help="Set a quota, e.g. cpu=2:8, memory=1024:8192:2 or cpu=32:64:1:8 "
            "(lends at most 8 idle guaranteed cores). Repeatable.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        quotas = []
        for spec in options["quota"]:
            kind, _, numbers = spec.partition("=")
            try:
                parts = [float(x) for x in numbers.split(":")]
            except ValueError:
                parts = []
            if not kind or len(parts) not in (2, 3, 4):
                raise CommandError(f"--quota {spec!r}: expected {QUOTA_FORMAT}")
            quotas.append((spec, kind, parts))
        with transaction.atomic():
            tenant = Tenant.objects.filter(name=options["tenant"]).first()
            if tenant is None:
                tenant = services.tenant_create(name=options["tenant"])
            for spec, kind, parts in quotas:
                try:
                    services.quota_set(
                        tenant=tenant,
                        resource=kind,
                        guaranteed=parts[0],
                        limit=parts[1],
                        weight=parts[2] if len(parts) >= 3 else 1.0,
                        lending_limit=parts[3] if len(parts) == 4 else None,
                    )
                except ApplicationError as error:
                    raise CommandError(f"--quota {spec!r}: {error.message}") from error
            _, raw = services.token_issue(tenant=tenant, name=options["name"], raw=options["token"])
        self.stdout.write(raw)

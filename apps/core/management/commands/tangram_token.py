"""Issue a tenant API token (creating the tenant if needed) and print it once."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from apps.tenants import services
from apps.tenants.models import Tenant


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
            metavar="KIND=GUARANTEED:LIMIT[:WEIGHT]",
            help="Set a quota, e.g. cpu=2:8 or memory=1024:8192:2. Repeatable.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(name=options["tenant"]).first()
        if tenant is None:
            tenant = services.tenant_create(name=options["tenant"])
        for spec in options["quota"]:
            kind, _, numbers = spec.partition("=")
            parts = [float(x) for x in numbers.split(":")]
            if len(parts) not in (2, 3):
                raise ValueError(f"--quota {spec!r}: expected KIND=GUARANTEED:LIMIT[:WEIGHT]")
            services.quota_set(
                tenant=tenant,
                resource=kind,
                guaranteed=parts[0],
                limit=parts[1],
                weight=parts[2] if len(parts) == 3 else 1.0,
            )
        _, raw = services.token_issue(tenant=tenant, name=options["name"], raw=options["token"])
        self.stdout.write(raw)

"""The embedded mode's demo seed: a tenant with a token, an admin, an agent token."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db import transaction

from apps.inventory.services import agent_token_issue
from apps.tenants import services as tenant_services
from apps.tenants.models import ApiToken, Tenant

DEMO_TENANT = "demo"
DEMO_ADMIN = "admin"


@dataclass(frozen=True)
class DemoCredentials:
    tenant_token: str
    admin_username: str
    admin_password: str
    agent_token: str


@transaction.atomic
def demo_seed(*, tenant_token: str = "", admin_password: str = "") -> DemoCredentials:
    """Idempotent: reuses the demo tenant and admin; a fixed token is issued only once."""
    tenant = Tenant.objects.filter(name=DEMO_TENANT).first() or tenant_services.tenant_create(
        name=DEMO_TENANT
    )
    if tenant_token:
        digest = tenant_services.token_digest(tenant_token)
        if not ApiToken.objects.filter(digest=digest, revoked_at__isnull=True).exists():
            tenant_services.token_issue(tenant=tenant, name="demo", raw=tenant_token)
    else:
        _, tenant_token = tenant_services.token_issue(tenant=tenant, name="demo")
    admin_password = admin_password or secrets.token_urlsafe(9)
    admin = User.objects.filter(username=DEMO_ADMIN).first() or User(username=DEMO_ADMIN)
    admin.is_staff = admin.is_superuser = True
    admin.set_password(admin_password)
    admin.save()
    tenant_services.membership_add(tenant=tenant, user=admin)
    _, agent_token = agent_token_issue(name="embedded local agent")
    return DemoCredentials(tenant_token, DEMO_ADMIN, admin_password, agent_token)

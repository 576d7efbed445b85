"""Reads for tenants and the one place where tenant scoping is decided."""

from __future__ import annotations

from dataclasses import dataclass

from django.utils import timezone

from apps.tenants.models import ApiToken, Quota, Tenant
from apps.tenants.services import token_digest


@dataclass(frozen=True)
class Principal:
    """Who is calling: a tenant's token, a member (session) or staff."""

    tenant_ids: frozenset[int]
    acting_tenant: Tenant | None
    is_staff: bool = False
    is_authenticated: bool = True
    is_active: bool = True

    def can_see_tenant(self, tenant_id: int) -> bool:
        return self.is_staff or tenant_id in self.tenant_ids


def token_authenticate(*, raw: str) -> ApiToken | None:
    token = (
        ApiToken.objects.select_related("tenant")
        .filter(digest=token_digest(raw), revoked_at__isnull=True)
        .first()
    )
    if token is not None:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
    return token


def principal_for_token(*, token: ApiToken) -> Principal:
    return Principal(tenant_ids=frozenset({token.tenant_id}), acting_tenant=token.tenant)


def principal_for_user(*, user) -> Principal:  # type: ignore[no-untyped-def]
    tenants = list(Tenant.objects.filter(members=user))
    return Principal(
        tenant_ids=frozenset(t.id for t in tenants),
        acting_tenant=tenants[0] if len(tenants) == 1 else None,
        is_staff=bool(user.is_staff),
    )


def quota_list(*, tenant: Tenant) -> list[Quota]:
    return list(Quota.objects.filter(tenant=tenant).order_by("resource"))


def principal_of(*, user) -> Principal:  # type: ignore[no-untyped-def]
    """The principal behind ``request.user``: a token's, or a session user's."""
    if isinstance(user, Principal):
        return user
    return principal_for_user(user=user)


def tenant_usage(*, tenant: Tenant) -> dict[str, object]:
    """Resources held by the tenant's placed actions, and its queue lengths."""
    from apps.actions.models import Action, ActionState
    from apps.actions.selectors import placed_usage

    placed = placed_usage(tenant_id=tenant.id)
    return {
        "usage": placed.by_tenant.get(tenant.id, {}),
        "queued": Action.objects.filter(tenant=tenant, state=ActionState.QUEUED).count(),
        "running": placed.actions_by_tenant.get(tenant.id, 0),
    }

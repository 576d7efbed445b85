"""Writes for tenants, members, tokens and quotas."""

from __future__ import annotations

import hashlib
import secrets

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from apps.core.exceptions import ApplicationError
from apps.tenants.models import ApiToken, Membership, Quota, Tenant

TOKEN_PREFIX = "tgm_"


def token_digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


@transaction.atomic
def tenant_create(*, name: str) -> Tenant:
    return Tenant.objects.create(name=name)


@transaction.atomic
def membership_add(*, tenant: Tenant, user: User) -> Membership:
    membership, _ = Membership.objects.get_or_create(tenant=tenant, user=user)
    return membership


@transaction.atomic
def token_issue(*, tenant: Tenant, name: str = "", raw: str | None = None) -> tuple[ApiToken, str]:
    """Create a token and return it with its raw value, which is never stored."""
    raw = raw or TOKEN_PREFIX + secrets.token_urlsafe(32)
    if len(raw) < 16:
        raise ApplicationError("A token needs at least 16 characters.", field="token")
    token = ApiToken.objects.create(
        tenant=tenant, name=name, prefix=raw[:12], digest=token_digest(raw)
    )
    return token, raw


@transaction.atomic
def token_revoke(*, token: ApiToken) -> ApiToken:
    ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    token.refresh_from_db()
    return token


@transaction.atomic
def quota_set(
    *,
    tenant: Tenant,
    resource: str,
    guaranteed: float,
    limit: float,
    weight: float = 1.0,
    lending_limit: float | None = None,
) -> Quota:
    if guaranteed < 0:
        raise ApplicationError("guaranteed must be >= 0.", field="guaranteed")
    if limit < guaranteed:
        raise ApplicationError("limit must be >= guaranteed.", field="limit")
    if weight <= 0:
        raise ApplicationError("weight must be > 0.", field="weight")
    if lending_limit is not None and not 0 <= lending_limit <= guaranteed:
        raise ApplicationError(
            "lending_limit must be between 0 and guaranteed (or null: all of it).",
            field="lending_limit",
        )
    quota, _ = Quota.objects.update_or_create(
        tenant=tenant,
        resource=resource,
        defaults={
            "guaranteed": guaranteed,
            "limit": limit,
            "weight": weight,
            "lending_limit": lending_limit,
        },
    )
    return quota

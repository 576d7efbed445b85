"""Reads for actions, always through ``access_actions`` so a tenant sees only its own."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import Http404

from apps.actions.models import Action
from apps.tenants.selectors import Principal


def add_resources(into: dict[str, float], amounts: dict[str, Any]) -> None:
    """Add one allocation (or demand) into running totals per resource kind."""
    for kind, amount in amounts.items():
        into[kind] = into.get(kind, 0.0) + float(amount)


def access_actions(*, principal: Principal) -> QuerySet[Action]:
    actions = Action.objects.select_related("node")
    if principal.is_staff:
        return actions
    return actions.filter(tenant_id__in=principal.tenant_ids)


def access_action(*, principal: Principal, action_id: Any) -> Action:
    """The action if the principal may see it; 404 otherwise, whether it exists or not."""
    try:
        return access_actions(principal=principal).get(pk=action_id)
    except (Action.DoesNotExist, ValidationError):
        raise Http404("No such action.") from None


def action_list(*, principal: Principal, filters: dict[str, str]) -> QuerySet[Action]:
    actions = access_actions(principal=principal)
    for field in ("job", "trajectory", "state", "type"):
        if filters.get(field):
            actions = actions.filter(**{field: filters[field]})
    return actions.order_by("-submitted_at", "id")


def action_state(*, action_id: str) -> str | None:
    """Unscoped: callers check access first (the long-poll re-reads it often)."""
    return Action.objects.filter(pk=action_id).values_list("state", flat=True).first()

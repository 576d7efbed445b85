from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from apps.inventory import services
from apps.inventory.models import AgentToken, Node


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["name", "state", "capacity", "executors", "last_seen_at"]
    list_filter = ["state"]
    readonly_fields = [
        "capacity",
        "gpu_groups",
        "executors",
        "warm",
        "labels",
        "registered_at",
        "last_seen_at",
    ]


class AgentTokenForm(forms.ModelForm):
    class Meta:
        model = AgentToken
        fields = ["name"]


@admin.register(AgentToken)
class AgentTokenAdmin(admin.ModelAdmin):
    form = AgentTokenForm
    list_display = ["name", "prefix", "created_at", "revoked_at"]
    actions = ["revoke"]

    def save_model(self, request: HttpRequest, obj: AgentToken, form: Any, change: bool) -> None:
        token, raw = services.agent_token_issue(name=obj.name)
        obj.pk = token.pk
        messages.warning(request, f"New agent token (shown once): {raw}")

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[AgentToken]) -> None:
        revoked = services.agent_tokens_revoke(tokens=queryset)
        messages.success(request, f"Revoked {revoked} token(s).")

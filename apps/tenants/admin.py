from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from apps.tenants import services
from apps.tenants.models import ApiToken, Membership, Quota, Tenant


class QuotaInline(admin.TabularInline):
    model = Quota
    extra = 1


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["name", "created_at"]
    search_fields = ["name"]
    inlines = [QuotaInline, MembershipInline]


class ApiTokenForm(forms.ModelForm):
    class Meta:
        model = ApiToken
        fields = ["tenant", "name"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens are issued here and shown once; only their digest is stored."""

    form = ApiTokenForm
    list_display = ["prefix", "tenant", "name", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["tenant"]
    readonly_fields = ["prefix", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None and super().has_change_permission(request, obj)

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        token, raw = services.token_issue(tenant=obj.tenant, name=obj.name)
        obj.pk = token.pk
        messages.warning(request, f"New token for {token.tenant.name} (shown once): {raw}")

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        for token in queryset:
            services.token_revoke(token=token)
        messages.success(request, f"Revoked {queryset.count()} token(s).")

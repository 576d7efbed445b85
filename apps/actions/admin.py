from django.contrib import admin

from apps.actions.models import Action, ActionEvent


class ActionEventInline(admin.TabularInline):
    model = ActionEvent
    extra = 0
    can_delete = False
    readonly_fields = ["state", "attempt", "node", "at", "detail"]


@admin.register(Action)
class ActionAdmin(admin.ModelAdmin):
    """Read-only: actions change state through the API and the scheduler only."""

    list_display = ["id", "tenant", "type", "state", "node", "attempt", "submitted_at"]
    list_filter = ["state", "type", "tenant"]
    search_fields = ["id", "job", "trajectory"]
    inlines = [ActionEventInline]

    def has_add_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False

    def has_change_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False

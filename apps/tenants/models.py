from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import F, Q


class Tenant(models.Model):
    name = models.SlugField(max_length=64, unique=True)
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="Membership", related_name="tenants", blank=True
    )
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "user"], name="membership_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant}"


class ApiToken(models.Model):
    """A tenant's bearer token; only its SHA-256 digest is stored."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="tokens")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=16, help_text="First characters, to recognise it.")
    digest = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.tenant.name}: {self.prefix}… ({self.name or 'unnamed'})"


class Quota(models.Model):
    """A tenant's share of one resource kind (``cpu``, ``memory``, ``gpu``, ``api:<name>`` ...)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="quotas")
    resource = models.CharField(max_length=64)
    guaranteed = models.FloatField(default=0)
    limit = models.FloatField()
    weight = models.FloatField(default=1.0)
    lending_limit = models.FloatField(
        null=True,
        blank=True,
        help_text="The most of this tenant's idle guarantee others may borrow "
        "(empty: all of it; 0: none).",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "resource"], name="quota_unique_resource"),
            models.CheckConstraint(condition=Q(guaranteed__gte=0), name="quota_guaranteed_gte_0"),
            models.CheckConstraint(
                condition=Q(limit__gte=F("guaranteed")), name="quota_limit_gte_guaranteed"
            ),
            models.CheckConstraint(condition=Q(weight__gt=0), name="quota_weight_gt_0"),
            models.CheckConstraint(
                condition=Q(lending_limit__isnull=True)
                | Q(lending_limit__gte=0, lending_limit__lte=F("guaranteed")),
                name="quota_lending_limit_within_guaranteed",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant.name} {self.resource}: {self.guaranteed}/{self.limit}"

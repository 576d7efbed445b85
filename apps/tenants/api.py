from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.exceptions import ApplicationError
from apps.scheduling.selectors import queue_heads_waiting
from apps.tenants.selectors import principal_of, quota_list, tenant_usage


class TenantMeApi(APIView):
    @extend_schema_serializer(component_name="TenantMe")
    class OutputSerializer(serializers.Serializer):
        class QuotaSerializer(serializers.Serializer):
            resource = serializers.CharField()
            guaranteed = serializers.FloatField()
            limit = serializers.FloatField()
            weight = serializers.FloatField()
            lending_limit = serializers.FloatField(
                allow_null=True,
                help_text="The most of the idle guarantee others may borrow; null: all of it.",
            )

        name = serializers.CharField()
        quotas = QuotaSerializer(many=True)
        usage = serializers.DictField(child=serializers.FloatField())
        queued = serializers.IntegerField()
        running = serializers.IntegerField()
        waiting = serializers.CharField(
            allow_null=True,
            help_text="Why the next queued action (highest priority, oldest) waits; "
            "null with none queued.",
        )

    @extend_schema(responses=OutputSerializer)
    def get(self, request: Request) -> Response:
        tenant = principal_of(user=request.user).acting_tenant
        if tenant is None:
            raise ApplicationError(
                "Call with a tenant's API token.", field="authorization", status_code=403
            )
        data = {
            "name": tenant.name,
            "quotas": quota_list(tenant=tenant),
            **tenant_usage(tenant=tenant),
            "waiting": queue_heads_waiting(tenant_id=tenant.id).get(tenant.id),
        }
        return Response(self.OutputSerializer(data).data)

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import permissions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.inventory.selectors import node_list_with_usage


class IsStaff(permissions.BasePermission):
    def has_permission(self, request: Request, view: APIView) -> bool:
        return bool(request.user and getattr(request.user, "is_staff", False))


class NodeListApi(APIView):
    permission_classes = [permissions.IsAuthenticated, IsStaff]

    @extend_schema_serializer(component_name="Node")
    class OutputSerializer(serializers.Serializer):
        id = serializers.UUIDField(source="node.id")
        name = serializers.CharField(source="node.name")
        state = serializers.CharField(source="node.state")
        capacity = serializers.DictField(source="node.capacity", child=serializers.FloatField())
        used = serializers.DictField(child=serializers.FloatField())
        free = serializers.DictField(child=serializers.FloatField())
        executors = serializers.ListField(source="node.executors", child=serializers.CharField())
        warm = serializers.ListField(
            source="node.warm",
            child=serializers.CharField(),
            help_text="Warm-state keys it holds (resident scorers: scorer:<digest>); the "
            "scheduler prefers it for actions whose affinity they cover.",
        )
        warm_slots = serializers.IntegerField(
            source="node.warm_slots",
            help_text="Warm keys it keeps at most (its agent's idle resident scorers); 0: no "
            "bound known. An action with a setup_hint_s is set up cold where one is free.",
        )
        gpu_groups = serializers.ListField(
            source="node.gpu_groups",
            child=serializers.ListField(child=serializers.CharField()),
            help_text="GPU ids per interconnect group.",
        )
        actions = serializers.IntegerField(help_text="Assigned and running actions.")
        protocol = serializers.IntegerField(
            source="node.protocol",
            help_text=(
                "The protocol its agent registered with; from 3 it can shrink elastic runs, "
                "from 5 also grow them."
            ),
        )
        last_seen_at = serializers.DateTimeField(source="node.last_seen_at")

    @extend_schema(responses=OutputSerializer(many=True))
    def get(self, request: Request) -> Response:
        return Response(self.OutputSerializer(node_list_with_usage(), many=True).data)

"""Thin API views: validate, call one service or selector, serialize."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from apps.actions import selectors, services
from apps.actions.models import TERMINAL_STATES, ActionState
from apps.actions.serializers import ActionInputSerializer, ActionOutputSerializer
from apps.core.events import action_group
from apps.core.exceptions import ApplicationError
from apps.scheduling.selectors import waiting_reasons
from apps.tenants.selectors import principal_of


class ActionListCreateApi(APIView):
    class FilterSerializer(serializers.Serializer):
        job = serializers.CharField(required=False)
        trajectory = serializers.CharField(required=False)
        state = serializers.ChoiceField(choices=ActionState.choices, required=False)
        type = serializers.CharField(required=False)

    @extend_schema(
        request=ActionInputSerializer(many=True),
        responses={201: ActionOutputSerializer(many=True)},
        description="Submit one action (an object) or up to 1,000 (a list).",
    )
    def post(self, request: Request) -> Response:
        principal = principal_of(user=request.user)
        if principal.acting_tenant is None:
            raise ApplicationError(
                "Submit with a tenant's API token (or as a member of exactly one tenant).",
                field="authorization",
                status_code=status.HTTP_403_FORBIDDEN,
            )
        bulk = isinstance(request.data, list)
        if not bulk and not isinstance(request.data, dict):
            raise ApplicationError("Send an action object or a list of them.", field="body")
        serializer = (
            ActionInputSerializer(
                data=request.data,
                many=True,
                allow_empty=False,
                max_length=settings.TANGRAM_MAX_BULK,
            )
            if bulk
            else ActionInputSerializer(data=request.data)
        )
        serializer.is_valid(raise_exception=True)
        specs = serializer.validated_data if bulk else [serializer.validated_data]
        actions = services.actions_submit(tenant=principal.acting_tenant, specs=specs, bulk=bulk)
        out = ActionOutputSerializer(actions, many=True).data
        return Response(out if bulk else out[0], status=status.HTTP_201_CREATED)

    @extend_schema(parameters=[FilterSerializer], responses=ActionOutputSerializer(many=True))
    def get(self, request: Request) -> Response:
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        actions = selectors.action_list(
            principal=principal_of(user=request.user), filters=filters.validated_data
        )
        paginator = LimitOffsetPagination()
        page = paginator.paginate_queryset(actions, request, view=self) or []
        context = {"waiting": waiting_reasons(actions=page)}
        return paginator.get_paginated_response(
            ActionOutputSerializer(page, many=True, context=context).data
        )


class ActionCancelApi(APIView):
    @extend_schema(request=None, responses=ActionOutputSerializer)
    def post(self, request: Request, action_id: str) -> Response:
        action = selectors.access_action(
            principal=principal_of(user=request.user), action_id=action_id
        )
        action = services.action_cancel(action=action)
        return Response(ActionOutputSerializer(action).data)


class ActionDetailApi(APIView):
    class ParamsSerializer(serializers.Serializer):
        wait = serializers.FloatField(
            required=False, min_value=0, help_text="Seconds to wait for a terminal state."
        )

        def validate_wait(self, value: float) -> float:
            return min(value, settings.TANGRAM_MAX_WAIT_S)

    @extend_schema(
        parameters=[ParamsSerializer],
        responses=ActionOutputSerializer,
        description="An action and its result. With ?wait=N (at most 60), the answer comes "
        "when the action is terminal or after N seconds, whichever is first.",
    )
    def get(self, request: Request, action_id: str) -> Response:
        self.ParamsSerializer(data=request.query_params).is_valid(raise_exception=True)
        action = selectors.access_action(
            principal=principal_of(user=request.user), action_id=action_id
        )
        context = {"waiting": waiting_reasons(actions=[action])}
        return Response(ActionOutputSerializer(action, context=context).data)


def _visible_state(request: HttpRequest, action_id: str) -> str | None:
    """The action's state if the caller may see it; None lets the DRF view answer the 4xx."""
    drf_request = Request(
        request, authenticators=[cls() for cls in api_settings.DEFAULT_AUTHENTICATION_CLASSES]
    )
    try:
        user = drf_request.user
        if user is None:
            return None
        return selectors.access_action(principal=principal_of(user=user), action_id=action_id).state
    except (exceptions.APIException, Http404):
        return None


def _in_pool(func: Any) -> Any:
    """Run a short read on the shared thread pool, not the request's own thread: a
    waiting request then holds neither a thread nor a database connection."""
    return database_sync_to_async(func, thread_sensitive=False)


async def _wait_until_terminal(action_id: str, seconds: float) -> None:
    """Sleep until the action finishes, woken by the channel layer, polling as a fallback."""
    layer = get_channel_layer()
    channel = await layer.new_channel()
    group = action_group(action_id)
    await layer.group_add(group, channel)
    deadline = time.monotonic() + seconds
    state = _in_pool(selectors.action_state)
    try:
        while await state(action_id=action_id) not in TERMINAL_STATES:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(layer.receive(channel), timeout=min(remaining, 2.0))
    finally:
        await layer.group_discard(group, channel)


_detail_view = ActionDetailApi.as_view()


async def action_detail_view(request: HttpRequest, action_id: str) -> HttpResponse:
    """``GET /actions/{id}``: waits without holding a thread, then answers through DRF."""
    try:
        wait = min(float(request.GET.get("wait", 0)), settings.TANGRAM_MAX_WAIT_S)
    except ValueError:
        wait = 0.0
    if wait > 0:
        state = await _in_pool(_visible_state)(request, action_id)
        if state is not None and state not in TERMINAL_STATES:
            await _wait_until_terminal(action_id, wait)
    return await sync_to_async(_detail_view)(request, action_id=action_id)


# drf-spectacular documents the endpoint from the DRF view behind the async wrapper.
action_detail_view.cls = ActionDetailApi  # type: ignore[attr-defined]
action_detail_view.initkwargs = {}  # type: ignore[attr-defined]

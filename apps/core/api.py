"""The DRF exception handler: every refusal as ``{"detail", "errors": {field: [...]}}``."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from apps.core.exceptions import ApplicationError


def flatten_errors(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested error structure as ``{"dotted.path": [messages]}``."""
    out: dict[str, list[str]] = {}
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = "" if key == "non_field_errors" else str(key)
            path = f"{prefix}.{name}" if prefix and name else prefix or name
            for field, messages in flatten_errors(value, path).items():
                out.setdefault(field, []).extend(messages)
    elif isinstance(detail, list) and detail and all(isinstance(d, (dict, list)) for d in detail):
        for index, value in enumerate(detail):
            path = f"{prefix}.{index}" if prefix else str(index)
            for field, messages in flatten_errors(value, path).items():
                out.setdefault(field, []).extend(messages)
    elif isinstance(detail, list):
        out[prefix or "non_field_errors"] = [str(d) for d in detail]
    else:
        out[prefix or "non_field_errors"] = [str(detail)]
    return out


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, RequestDataTooBig):
        exc = ApplicationError(
            f"The request body is over {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes.",
            field="body",
            status_code=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    if isinstance(exc, ApplicationError):
        errors = {exc.field: [exc.message]} if exc.field else {}
        return Response({"detail": exc.message, "errors": errors}, status=exc.status_code)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    response = exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        errors = flatten_errors(exc.detail)
        first = next(iter(errors.items()), None)
        detail = f"{first[0]}: {first[1][0]}" if first else "Invalid input."
        response.data = {"detail": detail, "errors": errors}
    elif isinstance(exc, exceptions.ParseError):
        response.data = {"detail": str(exc.detail), "errors": {"body": [str(exc.detail)]}}
    elif isinstance(response.data, dict) and "detail" in response.data:
        response.data = {"detail": str(response.data["detail"]), "errors": {}}
    return response

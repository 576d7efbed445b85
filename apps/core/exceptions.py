"""The one domain error type; ``apps.core.api`` turns it into a 4xx."""

from __future__ import annotations

from rest_framework import status


class ApplicationError(Exception):
    """A refused request: ``field`` names the input at fault, if any."""

    status_code = status.HTTP_400_BAD_REQUEST

    def __init__(self, message: str, *, field: str | None = None, status_code: int | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        if status_code is not None:
            self.status_code = status_code


class ConflictError(ApplicationError):
    status_code = status.HTTP_409_CONFLICT

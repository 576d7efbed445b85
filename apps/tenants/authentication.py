"""``Authorization: Bearer <token>`` for tenants' API tokens."""

from __future__ import annotations

from rest_framework import authentication, exceptions
from rest_framework.request import Request

from apps.tenants.models import ApiToken
from apps.tenants.selectors import Principal, principal_for_token, token_authenticate


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Principal, ApiToken] | None:
        header = authentication.get_authorization_header(request).decode(errors="replace")
        if not header:
            return None
        keyword, _, raw = header.partition(" ")
        if keyword != self.keyword or not raw.strip():
            raise exceptions.AuthenticationFailed("Authorization must be 'Bearer <token>'.")
        token = token_authenticate(raw=raw.strip())
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked token.")
        return principal_for_token(token=token), token

    def authenticate_header(self, request: Request) -> str:
        return self.keyword

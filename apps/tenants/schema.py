"""How the OpenAPI schema documents ``BearerTokenAuthentication`` (loaded in ``ready``)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "apps.tenants.authentication.BearerTokenAuthentication"
    name = "tenantToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A tenant's API token: Authorization: Bearer <token>.",
        }

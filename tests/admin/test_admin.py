"""The operator's admin: quotas and tokens are managed there; tokens are shown once."""

from __future__ import annotations

import pytest

from apps.inventory.models import AgentToken
from apps.tenants.models import ApiToken
from tests.factories import ActionFactory, NodeFactory, TenantFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client):
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    return client


@pytest.mark.parametrize(
    "url",
    [
        "/admin/tenants/tenant/",
        "/admin/tenants/apitoken/",
        "/admin/inventory/node/",
        "/admin/inventory/agenttoken/",
        "/admin/actions/action/",
    ],
)
def test_admin_pages_load(admin_client, url):
    TenantFactory()
    NodeFactory()
    ActionFactory()
    assert admin_client.get(url).status_code == 200


def test_issuing_a_token_in_the_admin_shows_it_once_and_stores_a_digest(admin_client):
    tenant = TenantFactory()
    response = admin_client.post(
        "/admin/tenants/apitoken/add/", {"tenant": tenant.pk, "name": "ci"}, follow=True
    )
    assert response.status_code == 200
    shown = [str(m) for m in response.context["messages"] if "shown once" in str(m)]
    raw = shown[0].rsplit(" ", 1)[-1]
    token = ApiToken.objects.get(tenant=tenant)
    assert raw.startswith("tgm_") and raw not in (token.digest, token.prefix)


def test_agent_token_revoke_action(admin_client):
    admin_client.post("/admin/inventory/agenttoken/add/", {"name": "rack-1"})
    token = AgentToken.objects.get(name="rack-1")
    admin_client.post(
        "/admin/inventory/agenttoken/",
        {"action": "revoke", "_selected_action": [token.pk]},
    )
    token.refresh_from_db()
    assert token.revoked_at is not None


def test_quota_constraints_hold_in_the_database():
    from django.db import IntegrityError, transaction

    from apps.tenants.models import Quota

    tenant = TenantFactory()
    with pytest.raises(IntegrityError), transaction.atomic():
        Quota.objects.create(tenant=tenant, resource="cpu", guaranteed=4, limit=2)
    with pytest.raises(IntegrityError), transaction.atomic():
        Quota.objects.create(tenant=tenant, resource="cpu", guaranteed=-1, limit=2)
    with pytest.raises(IntegrityError), transaction.atomic():
        Quota.objects.create(tenant=tenant, resource="cpu", guaranteed=2, limit=4, lending_limit=3)


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"guaranteed": -1, "limit": 2}, "guaranteed"),
        ({"guaranteed": 4, "limit": 2}, "limit"),
        ({"guaranteed": 2, "limit": 4, "weight": 0}, "weight"),
        ({"guaranteed": 2, "limit": 4, "lending_limit": 3}, "lending_limit"),
        ({"guaranteed": 2, "limit": 4, "lending_limit": -1}, "lending_limit"),
    ],
)
def test_quota_set_names_the_field_at_fault_and_changes_nothing(values, field):
    from apps.core.exceptions import ApplicationError
    from apps.tenants.models import Quota
    from apps.tenants.services import quota_set

    tenant = TenantFactory()
    with pytest.raises(ApplicationError) as raised:
        quota_set(tenant=tenant, resource="cpu", **values)
    assert raised.value.field == field
    assert not Quota.objects.filter(tenant=tenant).exists()

"""The operator's command that issues a tenant token and sets its quotas."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from apps.tenants.models import ApiToken, Quota, Tenant

pytestmark = pytest.mark.django_db


def test_it_sets_quotas_with_a_lending_limit_and_prints_a_token() -> None:
    out = io.StringIO()
    call_command(
        "tangram_token", "team", "--quota", "cpu=32:64:1:8", "--quota", "gpu=2:4", stdout=out
    )
    quotas = {q.resource: q for q in Quota.objects.filter(tenant__name="team")}
    assert (quotas["cpu"].guaranteed, quotas["cpu"].limit, quotas["cpu"].lending_limit) == (
        32,
        64,
        8,
    )
    assert quotas["gpu"].lending_limit is None  # lends all of it
    assert ApiToken.objects.filter(tenant__name="team").count() == 1
    assert out.getvalue().strip()


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("cpu=4", "expected KIND=GUARANTEED:LIMIT"),
        ("cpu=four:8", "expected KIND=GUARANTEED:LIMIT"),
        ("cpu=4:8:1:5", "lending_limit must be between 0 and guaranteed"),
        ("cpu=8:4", "limit must be >= guaranteed"),
    ],
)
def test_a_bad_quota_is_refused_by_name_and_changes_nothing(spec: str, says: str) -> None:
    with pytest.raises(CommandError, match=says):
        call_command("tangram_token", "team", "--quota", "cpu=1:2", "--quota", spec)
    assert not Tenant.objects.filter(name="team").exists()
    assert not ApiToken.objects.exists()

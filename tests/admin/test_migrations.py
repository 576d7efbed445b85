"""Data migrations keep what operators set."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("tenants", "0001_initial")]
AFTER = [("tenants", "0002_lending_limit")]


@pytest.mark.django_db(transaction=True)
def test_a_guarantee_that_was_not_lent_gets_a_lending_limit_of_zero() -> None:
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    tenant = old.get_model("tenants", "Tenant").objects.create(name="keeps")
    quota = old.get_model("tenants", "Quota")
    quota.objects.create(tenant=tenant, resource="cpu", guaranteed=4, limit=8, lend_guarantee=False)
    quota.objects.create(tenant=tenant, resource="gpu", guaranteed=2, limit=2, lend_guarantee=True)

    executor = MigrationExecutor(connection)
    executor.migrate(AFTER)
    new = executor.loader.project_state(AFTER).apps.get_model("tenants", "Quota")
    limits = dict(new.objects.values_list("resource", "lending_limit"))
    assert limits == {"cpu": 0.0, "gpu": None}

    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)  # and back
    lent = old.get_model("tenants", "Quota").objects.values_list("resource", "lend_guarantee")
    assert dict(lent) == {"cpu": False, "gpu": True}
    MigrationExecutor(connection).migrate(executor.loader.graph.leaf_nodes())

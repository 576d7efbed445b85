"""Any JSON body sent to ``POST /actions`` is stored whole or refused whole with a 4xx
naming the field at fault; none makes the server fail (hypothesis)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.actions.models import Action
from tests.conftest import Caller, _caller
from tests.factories import NodeFactory

pytestmark = pytest.mark.django_db

LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=5),
)
ANY_JSON = st.recursive(
    LEAF,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
NUMBERISH = st.one_of(
    st.integers(-5, 300), st.floats(-1, 1e6), st.text(max_size=3), st.none(), st.booleans()
)
PAYLOAD = st.one_of(
    st.fixed_dictionaries(
        {"code": st.text(max_size=5)},
        optional={
            "sample": ANY_JSON,
            "files": st.dictionaries(st.text(max_size=6), ANY_JSON, max_size=2),
            "stdin": ANY_JSON,
            "args": ANY_JSON,
            "seconds": NUMBERISH,
        },
    ),
    ANY_JSON,
)
KINDS = st.sampled_from(["cpu", "memory", "gpu", "gpu_memory", "api:x", "api:", "bananas", ""])
BODY = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["sandbox.python", "sandbox.bash", "reward.python", "sleep", "x"]),
        "payload": PAYLOAD,
    },
    optional={
        "demand": st.dictionaries(KINDS, NUMBERISH, max_size=4),
        "priority": NUMBERISH,
        "timeout_s": NUMBERISH,
        "duration_hint_s": NUMBERISH,
        "elasticity": st.dictionaries(
            st.sampled_from(["min_units", "max_units", "parallel_fraction", "unit_kind", "x"]),
            st.one_of(NUMBERISH, KINDS),
            max_size=4,
        ),
        "affinity": st.one_of(st.lists(st.text(max_size=4), max_size=3), ANY_JSON),
        "batch_key": st.one_of(st.text(max_size=5), ANY_JSON),
        "batch_limit": NUMBERISH,
        "job": ANY_JSON,
        "trajectory": ANY_JSON,
    },
)


@pytest.fixture
def submitter(db: Any) -> Caller:
    NodeFactory(capacity={"cpu": 64, "memory": 65536, "gpu": 8})
    return _caller("fuzzed")


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=st.one_of(BODY, st.lists(BODY, max_size=3), ANY_JSON))
def test_a_body_is_stored_whole_or_refused_naming_a_field(submitter: Caller, body: Any) -> None:
    before = Action.objects.count()
    response = submitter.client.post(
        "/api/v1/actions", data=json.dumps(body), content_type="application/json"
    )
    stored = Action.objects.count() - before
    if response.status_code == 201:
        assert stored == (len(body) if isinstance(body, list) else 1)
        return
    assert response.status_code == 400, (response.status_code, body, response.content[:300])
    assert response.json()["errors"], response.json()
    assert stored == 0

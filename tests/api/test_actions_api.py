"""The action API's contract, its refusals, and tenant isolation."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from apps.actions.models import Action, ActionEvent
from apps.tenants.models import ApiToken
from apps.tenants.services import quota_set, token_revoke
from tangram_agent.protocol import scorer_warm_key
from tests.factories import ActionFactory, NodeFactory, TenantFactory

pytestmark = pytest.mark.django_db

URL = "/api/v1/actions"
PY = {"type": "sandbox.python", "payload": {"code": "print(1)"}}


def test_submit_one_returns_201_with_id_and_state(owner, node):
    response = owner.client.post(URL, {**PY, "job": "j1", "trajectory": "t1"}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["state"] == "queued"
    assert body["demand"] == {"cpu": 1.0, "memory": 512.0}
    action = Action.objects.get(pk=body["id"])
    assert action.tenant == owner.tenant and action.job == "j1"
    assert ActionEvent.objects.filter(action=action, state="queued").count() == 1


def test_a_reward_call_gets_its_type_default_demand(owner, node):
    body = {"type": "reward.python", "payload": {"code": "def score(s): return s", "sample": [1]}}
    response = owner.client.post(URL, body, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["demand"] == {"cpu": 1.0, "memory": 1024.0}
    assert Action.objects.get().payload["sample"] == [1]


def test_submit_many_keeps_order(owner, node):
    specs = [{"type": "sleep", "payload": {"seconds": i}} for i in range(5)]
    response = owner.client.post(URL, specs, format="json")
    assert response.status_code == 201
    ids = [a["id"] for a in response.json()]
    seconds = [Action.objects.get(pk=i).payload["seconds"] for i in ids]
    assert seconds == [0, 1, 2, 3, 4]


def test_submit_1000_at_once(owner, node):
    specs = [{"type": "sleep", "payload": {"seconds": 0}}] * 1000
    assert owner.client.post(URL, specs, format="json").status_code == 201
    assert Action.objects.count() == 1000


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"type": "nope", "payload": {}}, "type"),
        ({"payload": {"code": "x"}}, "type"),
        ({"type": "sandbox.python", "payload": {}}, "payload.code"),
        ({"type": "sandbox.python", "payload": {"code": 3}}, "payload.code"),
        ({"type": "sandbox.python", "payload": "code"}, "payload"),
        ({**PY, "demand": {"cpu": -1}}, "demand.cpu"),
        ({**PY, "demand": {"cpu": "lots"}}, "demand.cpu"),
        ({**PY, "demand": {"bananas": 1}}, "demand.bananas"),
        ({**PY, "demand": {"gpu": 0.5}}, "demand.gpu"),
        ({**PY, "demand": {"cpu": 64}}, "demand.cpu"),
        ({**PY, "demand": {"memory": 10**9}}, "demand.memory"),
        ({**PY, "timeout_s": 0}, "timeout_s"),
        ({**PY, "timeout_s": 10**9}, "timeout_s"),
        ({**PY, "priority": 10**6}, "priority"),
        ({**PY, "setup_hint_s": -1}, "setup_hint_s"),
        ({**PY, "setup_hint_s": "slow"}, "setup_hint_s"),
        ({**PY, "duration_hint_s": -1}, "duration_hint_s"),
        ({**PY, "remaining_hint_s": -1}, "remaining_hint_s"),
        ({**PY, "remaining_hint_s": "soon"}, "remaining_hint_s"),
        ({"type": "sandbox.python", "payload": {"code": "x" * (2 * 1024 * 1024)}}, "payload"),
        (
            {"type": "sandbox.python", "payload": {"code": "x", "files": {"../a": "b"}}},
            "payload.files",
        ),
        ({"type": "sleep", "payload": {"seconds": -1}}, "payload.seconds"),
        ({"type": "sandbox.python", "payload": {"code": "print(1)\x00"}}, "payload.code"),
        (
            {"type": "sandbox.python", "payload": {"code": "x", "files": {"a.txt": "\x00"}}},
            "payload.files.a.txt",
        ),
        (
            {"type": "sandbox.python", "payload": {"code": "x", "args": ["", "\x00"]}},
            "payload.args.1",
        ),
        ({"type": "sandbox.python", "payload": {"code": "x", "\x00": 1}}, "payload"),
        ({**PY, "demand": {"api:\x00": 1}}, "demand"),
        ({"type": "reward.python", "payload": {"code": "x"}}, "payload.sample"),
        ({"type": "reward.python", "payload": {"sample": 1}}, "payload.code"),
        (
            {"type": "reward.python", "payload": {"code": "x", "sample": 1, "stdin": ""}},
            "payload.stdin",
        ),
        (
            {
                "type": "reward.python",
                "payload": {"code": "x", "sample": 1, "files": {"scorer.py": ""}},
            },
            "payload.files",
        ),
    ],
)
def test_bad_input_is_refused_naming_the_field(owner, node, body, field):
    response = owner.client.post(URL, body, format="json")
    assert response.status_code == 400, response.json()
    assert field in response.json()["errors"], response.json()
    assert Action.objects.count() == 0


def test_hints_are_stored_and_shown(owner, node):
    body = {**PY, "duration_hint_s": 2.5, "setup_hint_s": 30, "remaining_hint_s": 0}
    response = owner.client.post(URL, body, format="json")
    assert response.status_code == 201
    shown = response.json()
    hints = ("duration_hint_s", "setup_hint_s", "remaining_hint_s")
    assert tuple(shown[name] for name in hints) == (2.5, 30.0, 0.0)
    action = Action.objects.get(pk=shown["id"])
    assert tuple(getattr(action, name) for name in hints) == (2.5, 30.0, 0.0)
    plain = owner.client.post(URL, PY, format="json").json()
    assert tuple(plain[name] for name in hints) == (None, None, None)


def test_an_action_is_numbered_within_its_trajectory(owner, stranger, node):
    """Its position counts the actions its trajectory (tenant, job and name)
    submitted before it, earlier ones in the same bulk included: what the policy
    learns what a trajectory has left by."""

    def positions(client, specs):
        response = client.post(URL, specs, format="json")
        assert response.status_code == 201, response.json()
        return [shown["position"] for shown in response.json()]

    t1 = {**PY, "job": "swe", "trajectory": "t1"}
    assert positions(owner.client, [t1]) == [0]
    assert positions(owner.client, [t1, {**t1, "trajectory": "t2"}, t1]) == [1, 0, 2]
    assert positions(owner.client, [{**t1, "job": "math"}, PY]) == [0, None]
    assert positions(stranger.client, [t1]) == [0]
    assert owner.client.post(URL, t1, format="json").json()["position"] == 3


def test_bulk_error_names_the_item_and_stores_nothing(owner, node):
    specs = [PY, PY, {**PY, "demand": {"cpu": -2}}]
    response = owner.client.post(URL, specs, format="json")
    assert response.status_code == 400
    assert "2.demand.cpu" in response.json()["errors"]
    assert Action.objects.count() == 0


@pytest.mark.parametrize("count", [0, 1001])
def test_bulk_of_none_or_over_1000_is_refused(owner, node, count):
    response = owner.client.post(URL, [PY] * count, format="json")
    assert response.status_code == 400
    assert Action.objects.count() == 0


def test_body_over_the_upload_limit_is_a_413(owner, settings):
    body = [{**PY, "payload": {"code": "x" * 900_000}}] * 10
    response = owner.client.post(URL, body, format="json")
    assert response.status_code == 413
    assert "body" in response.json()["errors"]
    assert Action.objects.count() == 0


def test_demand_beyond_tenant_limit_is_refused(owner, node):
    quota_set(tenant=owner.tenant, resource="cpu", guaranteed=1, limit=2)
    response = owner.client.post(URL, {**PY, "demand": {"cpu": 3}}, format="json")
    assert response.status_code == 400
    assert "demand.cpu" in response.json()["errors"]
    assert "limit" in response.json()["detail"]


def test_malformed_json_is_a_400(owner):
    response = owner.client.post(URL, "{not json", content_type="application/json")
    assert response.status_code == 400
    assert "JSON parse error" in response.json()["errors"]["body"][0]


@pytest.mark.parametrize("header", ["Bearer wrong-token-000000", "Token abc", "Bearer "])
def test_wrong_token_is_a_401(db, header):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    response = client.post(URL, PY, format="json")
    assert response.status_code == 401
    assert Action.objects.count() == 0


def test_no_token_is_refused(db):
    assert APIClient().get(URL).status_code in (401, 403)


def test_revoked_token_is_refused(owner):
    token_revoke(token=ApiToken.objects.get(tenant=owner.tenant))
    assert owner.client.get(URL).status_code == 401


def test_tokens_are_stored_hashed(owner):
    token = ApiToken.objects.get(tenant=owner.tenant)
    assert owner.token not in (token.digest, token.prefix)
    assert len(token.digest) == 64


def test_get_list_filter_and_cancel(owner, node):
    a = owner.client.post(URL, {**PY, "job": "j1"}, format="json").json()
    owner.client.post(URL, {**PY, "job": "j2"}, format="json")
    listed = owner.client.get(URL, {"job": "j1"}).json()
    assert [r["id"] for r in listed["results"]] == [a["id"]]
    assert owner.client.get(URL, {"state": "bogus"}).status_code == 400
    cancelled = owner.client.post(f"{URL}/{a['id']}/cancel").json()
    assert cancelled["state"] == "cancelled"
    again = owner.client.post(f"{URL}/{a['id']}/cancel")
    assert again.status_code == 409
    assert owner.client.get(f"{URL}/{a['id']}").json()["state"] == "cancelled"


def test_stranger_cannot_see_list_or_cancel(owner, stranger, node):
    a = owner.client.post(URL, PY, format="json").json()
    assert stranger.client.get(f"{URL}/{a['id']}").status_code == 404
    assert stranger.client.get(f"{URL}/{a['id']}?wait=1").status_code == 404
    assert stranger.client.post(f"{URL}/{a['id']}/cancel").status_code == 404
    assert stranger.client.get(URL).json()["count"] == 0
    assert Action.objects.get(pk=a["id"]).state == "queued"


def test_unknown_id_is_a_404(owner):
    assert owner.client.get(f"{URL}/not-a-uuid").status_code == 404
    assert owner.client.get(f"{URL}/00000000-0000-0000-0000-000000000000").status_code == 404


def test_staff_sees_every_tenant(owner, stranger, staff_client, node):
    ActionFactory(tenant=owner.tenant)
    ActionFactory(tenant=stranger.tenant)
    assert staff_client.get(URL).json()["count"] == 2


def test_tenants_me_reports_quotas_and_usage(owner, node):
    quota_set(tenant=owner.tenant, resource="cpu", guaranteed=2, limit=4)
    quota_set(tenant=owner.tenant, resource="gpu", guaranteed=2, limit=2, lending_limit=1)
    ActionFactory(tenant=owner.tenant, state="running", node=node, allocation={"cpu": 1})
    ActionFactory(tenant=owner.tenant)
    body = owner.client.get("/api/v1/tenants/me").json()
    assert body["name"] == "owner"
    cpu, gpu = body["quotas"]
    assert (cpu["resource"], cpu["limit"], cpu["lending_limit"]) == ("cpu", 4, None)
    assert (gpu["resource"], gpu["lending_limit"]) == ("gpu", 1)
    assert body["usage"] == {"cpu": 1.0}
    assert (body["queued"], body["running"]) == (1, 1)
    assert body["waiting"].startswith("room is free now")
    ActionFactory(tenant=owner.tenant, state="running", node=node, allocation={"cpu": 3})
    body = owner.client.get("/api/v1/tenants/me").json()
    assert body["waiting"] == (
        "its tenant is at its cpu limit: it holds 4 of 4, and this asks 1 more"
    )


def test_nodes_is_staff_only(owner, staff_client, node):
    assert owner.client.get("/api/v1/nodes").status_code == 403
    nodes = staff_client.get("/api/v1/nodes").json()
    assert nodes[0]["name"] == "node-a" and nodes[0]["free"] == {"cpu": 4.0, "memory": 8192.0}


def test_schema_and_docs_are_served(staff_client):
    schema = staff_client.get("/api/v1/schema", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    document = schema.json()
    assert "/api/v1/actions/{action_id}" in document["paths"]
    assert document["components"]["securitySchemes"]["tenantToken"]["scheme"] == "bearer"
    assert {"ActionOutput", "Node", "TenantMe"} <= set(document["components"]["schemas"])
    assert {"tenantToken": []} in document["paths"]["/api/v1/actions"]["post"]["security"]
    docs = staff_client.get("/api/v1/docs")
    assert docs.status_code == 200
    assert b"cdn" not in docs.content.lower()  # served locally: no network needed


@pytest.mark.parametrize(
    ("elasticity", "field"),
    [
        ({"min_units": 2, "max_units": 1}, "elasticity.max_units"),
        ({"max_units": 4, "parallel_fraction": 2}, "elasticity.parallel_fraction"),
        ({"max_units": 4, "unit_kind": "gpu"}, "elasticity.unit_kind"),
        ({"min_units": 0}, "elasticity.min_units"),
    ],
)
def test_bad_elasticity_is_refused_naming_the_field(owner, node, elasticity, field):
    response = owner.client.post(URL, {**PY, "elasticity": elasticity}, format="json")
    assert response.status_code == 400
    assert field in response.json()["errors"], response.json()
    assert Action.objects.count() == 0


def test_elasticity_and_affinity_are_stored_and_returned(owner, node):
    body = {
        **PY,
        "elasticity": {"max_units": 4, "parallel_fraction": 0.9},
        "affinity": ["image:python3.11"],
    }
    out = owner.client.post(URL, body, format="json").json()
    assert out["elasticity"] == {
        "min_units": 1,
        "max_units": 4,
        "parallel_fraction": 0.9,
        "unit_kind": "cpu",
    }
    assert out["affinity"] == ["image:python3.11"]


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"batch_limit": 4}, "batch_limit"),
        ({"batch_key": None, "batch_limit": 2}, "batch_limit"),
        ({"batch_key": "rm", "batch_limit": 0}, "batch_limit"),
        ({"batch_key": "rm", "batch_limit": 257}, "batch_limit"),
        ({"batch_key": "rm", "batch_limit": "many"}, "batch_limit"),
        ({"batch_key": "x" * 201, "batch_limit": 2}, "batch_key"),
        ({"batch_key": "", "batch_limit": 2}, "batch_key"),
        ({"batch_key": ["rm"]}, "batch_key"),
    ],
)
def test_bad_batch_fields_are_refused_naming_the_field(owner, node, extra, field):
    response = owner.client.post(URL, {**PY, **extra}, format="json")
    assert response.status_code == 400, response.json()
    assert field in response.json()["errors"], response.json()
    assert Action.objects.count() == 0


def test_may_split_gpus_is_stored_and_returned_and_a_bad_one_refused(owner, node):
    kept = owner.client.post(URL, PY, format="json").json()
    split = owner.client.post(URL, {**PY, "may_split_gpus": True}, format="json").json()
    assert (kept["may_split_gpus"], split["may_split_gpus"]) == (False, True)
    assert Action.objects.get(pk=split["id"]).may_split_gpus
    response = owner.client.post(URL, {**PY, "may_split_gpus": "sometimes"}, format="json")
    assert response.status_code == 400
    assert "may_split_gpus" in response.json()["errors"], response.json()
    assert Action.objects.count() == 2


def test_may_shrink_gpus_is_only_for_sandbox_runs_elastic_in_single_gpus(owner, node):
    NodeFactory(capacity={"cpu": 8, "memory": 8192, "gpu": 4}, gpu_groups=[["0", "1", "2", "3"]])
    elastic = {"min_units": 1, "max_units": 4, "unit_kind": "gpu", "parallel_fraction": 0.9}
    sweep = {**PY, "demand": {"gpu": 1, "cpu": 1}, "elasticity": elastic, "may_shrink_gpus": True}
    created = owner.client.post(URL, sweep, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["may_shrink_gpus"] is True
    assert Action.objects.get(pk=created.json()["id"]).may_shrink_gpus
    assert owner.client.post(URL, PY, format="json").json()["may_shrink_gpus"] is False
    for bad in (
        {**sweep, "elasticity": {**elastic, "unit_kind": "cpu"}},  # elastic in cores
        {**sweep, "demand": {"gpu": 2, "cpu": 1}},  # two GPUs a unit
        {key: value for key, value in sweep.items() if key != "elasticity"},  # not elastic
        {**sweep, "type": "reward.python", "payload": {"code": "x", "sample": 1}},
        {**sweep, "may_shrink_gpus": "sometimes"},
    ):
        response = owner.client.post(URL, bad, format="json")
        assert response.status_code == 400, bad
        assert "may_shrink_gpus" in response.json()["errors"], response.json()
    assert Action.objects.count() == 2


def test_a_bad_batch_field_in_a_list_names_the_item(owner, node):
    specs = [{**PY, "batch_key": "rm", "batch_limit": 8}, {**PY, "batch_limit": 8}]
    response = owner.client.post(URL, specs, format="json")
    assert response.status_code == 400
    assert "1.batch_limit" in response.json()["errors"], response.json()
    assert Action.objects.count() == 0


def test_batch_fields_are_stored_and_shown_with_the_placement(owner, node):
    batched = owner.client.post(URL, {**PY, "batch_key": "rm-7b", "batch_limit": 16}, format="json")
    assert batched.status_code == 201, batched.json()
    body = batched.json()
    assert (body["batch_key"], body["batch_limit"], body["batch_id"]) == ("rm-7b", 16, None)
    assert body["gpus"] == []
    stored = Action.objects.get(pk=body["id"])
    assert (stored.batch_key, stored.batch_limit) == ("rm-7b", 16)

    alone = owner.client.post(URL, PY, format="json").json()
    assert (alone["batch_key"], alone["batch_limit"]) == (None, 1)

    Action.objects.filter(pk=body["id"]).update(
        state="running", node=node, gpus=["4", "5"], batch_id="batch:x"
    )
    shown = owner.client.get(f"{URL}/{body['id']}").json()
    assert (shown["gpus"], shown["batch_id"]) == (["4", "5"], "batch:x")


def test_nodes_show_their_gpu_groups_and_protocol(staff_client):
    NodeFactory(capacity={"cpu": 4, "gpu": 2}, gpu_groups=[["0"], ["1"]], protocol=2)
    (shown,) = staff_client.get("/api/v1/nodes").json()
    assert (shown["gpu_groups"], shown["protocol"]) == ([["0"], ["1"]], 2)


SCORER = "def score(samples):\n    return [1.0 for _ in samples]\n"
REWARD = {
    "type": "reward.python",
    "payload": {"code": SCORER, "sample": 1, "files": {"rm/config.json": "{}"}},
}


def test_a_reward_action_is_affine_to_its_tenants_scorer(owner, stranger, node):
    key = scorer_warm_key(str(owner.tenant.pk), SCORER, {"rm/config.json": "{}"})
    body = {**REWARD, "affinity": ["image:py", "model:rm"]}
    response = owner.client.post(URL, body, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["affinity"] == ["image:py", "model:rm", key]
    assert Action.objects.get().affinity == ["image:py", "model:rm", key]

    # Another tenant's scorer of the same code and files has a key of its own;
    # other files make another scorer.
    others = [
        (stranger.client, REWARD),
        (owner.client, {**REWARD, "payload": {**REWARD["payload"], "files": {}}}),
    ]
    for client, other in others:
        (other_key,) = client.post(URL, other, format="json").json()["affinity"]
        assert other_key.startswith("scorer:") and other_key != key
    stranger_key = scorer_warm_key(str(stranger.tenant.pk), SCORER, {"rm/config.json": "{}"})
    assert Action.objects.filter(tenant=stranger.tenant).get().affinity == [stranger_key]
    # Other types get no scorer key.
    assert owner.client.post(URL, PY, format="json").json()["affinity"] == []


@pytest.mark.parametrize("body", [REWARD, PY])
def test_a_clients_scorer_key_is_refused_naming_affinity(owner, node, body):
    taken = scorer_warm_key(str(TenantFactory().pk), SCORER, {"rm/config.json": "{}"})
    response = owner.client.post(URL, {**body, "affinity": ["image:py", taken]}, format="json")
    assert response.status_code == 400, response.json()
    assert response.json()["errors"] == {
        "affinity": [
            "Keys starting with 'scorer:' are reserved: the server adds a reward.python "
            "action's own."
        ]
    }
    specs = [REWARD, {**REWARD, "affinity": [taken]}]
    response = owner.client.post(URL, specs, format="json")
    assert response.status_code == 400, response.json()
    assert list(response.json()["errors"]) == ["1.affinity"]
    assert Action.objects.count() == 0


def test_nodes_show_their_warm_keys_and_slots(staff_client):
    key = scorer_warm_key("1", SCORER, {})
    NodeFactory(name="warm", warm=["image:py", key], warm_slots=2)
    NodeFactory(name="cold")
    shown = {
        node["name"]: (node["warm"], node["warm_slots"])
        for node in staff_client.get("/api/v1/nodes").json()
    }
    assert shown == {"cold": ([], 0), "warm": (["image:py", key], 2)}


def _waiting(owner, action_id):
    response = owner.client.get(f"{URL}/{action_id}")
    assert response.status_code == 200, response.json()
    return response.json()["waiting"]


def test_a_queued_action_says_why_it_waits(owner, stranger, node):
    """Each reason in turn, as the state that causes it comes and goes."""
    quota_set(tenant=owner.tenant, resource="cpu", guaranteed=1, limit=2)
    queued = owner.client.post(URL, PY, format="json").json()["id"]
    assert _waiting(owner, queued).startswith("room is free now: the next scheduling round")

    held = ActionFactory(
        tenant=owner.tenant, state="running", node=node, allocation={"cpu": 2, "memory": 16}
    )
    assert _waiting(owner, queued) == (
        "its tenant is at its cpu limit: it holds 2 of 2, and this asks 1 more"
    )

    held.allocation = {"cpu": 1, "memory": 16}
    held.save()
    ActionFactory(
        tenant=stranger.tenant, state="running", node=node, allocation={"cpu": 3, "memory": 16}
    )
    assert _waiting(owner, queued) == (
        "no room now: none of the 1 online node(s) running sandbox.python has "
        "1 cpu, 512 memory free; it starts as placed actions finish"
    )

    big = ActionFactory(tenant=owner.tenant, type="sandbox.python", demand={"cpu": 8})
    assert _waiting(owner, big.id) == (
        "no online node running sandbox.python is large enough for 8 cpu"
    )

    node.executors = ["sleep"]
    node.save()
    assert _waiting(owner, queued) == "no online node runs sandbox.python"
    listed = owner.client.get(URL, {"state": "queued"}).json()["results"]
    assert {a["id"]: a["waiting"] for a in listed} == {
        str(queued): "no online node runs sandbox.python",
        str(big.id): "no online node runs sandbox.python",
    }
    assert _waiting(owner, held.id) is None  # running: nothing to explain

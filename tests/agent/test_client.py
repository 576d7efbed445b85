"""The Python client's HTTP behaviour against a small real HTTP server.

Parsing, error mapping, retries, long-poll looping and pagination; the client
against the real API is covered by the end-to-end suite.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tangram_client import Action, AsyncClient, Client, ScoringError, TangramError

TOKEN = "tenant-token"


def action_json(action_id: str, state: str = "queued", **extra: Any) -> dict[str, Any]:
    return {
        "id": action_id,
        "type": "sandbox.python",
        "job": "j",
        "trajectory": "t",
        "position": 4,
        "state": state,
        "priority": 0,
        "demand": {"cpu": 1},
        "timeout_s": 30,
        "attempt": 1,
        "node": None,
        "exit_code": None,
        "stdout": "",
        "stderr": "",
        "stdout_truncated": False,
        "stderr_truncated": False,
        "error": "",
        "submitted_at": "2026-01-01T00:00:00Z",
        "assigned_at": None,
        "started_at": None,
        "finished_at": None,
        "act_s": None,
        **extra,
    }


class FakeApi:
    """In-memory stand-in: actions finish after ``polls_to_finish`` GETs."""

    def __init__(self) -> None:
        self.actions: dict[str, dict[str, Any]] = {}
        self.polls: dict[str, int] = {}
        self.polls_to_finish = 2
        self.fail_next: list[int] = []
        self.requests: list[tuple[str, str, dict[str, Any] | list[Any] | None]] = []
        self.reject_bulk_after = 10**9
        #: Actions that finish failed rather than succeeded.
        self.failing: set[str] = set()

    def handle(
        self, method: str, path: str, query: dict[str, list[str]], body: Any
    ) -> tuple[int, Any]:
        if self.fail_next:
            return self.fail_next.pop(0), {"detail": "try later"}
        if method == "POST" and path == "/api/v1/actions":
            items = body if isinstance(body, list) else [body]
            if len(self.actions) + len(items) > self.reject_bulk_after:
                return 400, {"detail": "invalid", "errors": {"0.demand.cpu": ["must be > 0"]}}
            created = []
            for item in items:
                action_id = f"a{len(self.actions)}"
                self.actions[action_id] = action_json(action_id, type=item["type"])
                if item.get("payload", {}).get("sample") == "bad":
                    self.failing.add(action_id)
                created.append(self.actions[action_id])
            return 201, created if isinstance(body, list) else created[0]
        if method == "GET" and path == "/api/v1/actions":
            offset = int(query.get("offset", ["0"])[0])
            limit = int(query.get("limit", ["2"])[0])
            rows = list(self.actions.values())
            nxt = None
            if offset + limit < len(rows):
                nxt = f"{self.base_url}/api/v1/actions?limit={limit}&offset={offset + limit}"
            return 200, {
                "count": len(rows),
                "next": nxt,
                "previous": None,
                "results": rows[offset : offset + limit],
            }
        if method == "GET" and path == "/api/v1/tenants/me":
            return 200, {
                "name": "owner",
                "quotas": [{"resource": "cpu", "guaranteed": 4, "limit": 8, "weight": 1}],
                "usage": {"cpu": 1.5},
                "queued": 2,
                "running": 1,
                "waiting": "no room now",
            }
        parts = path.split("/")
        if len(parts) >= 5 and parts[4] in self.actions:
            action = self.actions[parts[4]]
            if method == "POST" and parts[-1] == "cancel":
                if action["state"] in ("succeeded", "cancelled"):
                    return 409, {"detail": "action already finished"}
                action.update(state="cancelled")
                return 200, action
            if method == "GET":
                self.polls[parts[4]] = self.polls.get(parts[4], 0) + 1
                if self.polls[parts[4]] >= self.polls_to_finish and action["state"] == "queued":
                    action.update(
                        state="succeeded",
                        exit_code=0,
                        stdout="42\n",
                        finished_at="2026-01-01T00:00:01.500000+00:00",
                        act_s=1.5,
                    )
                    if parts[4] in self.failing:
                        action.update(state="failed", exit_code=1, stdout="", error="bad sample")
                return 200, action
        return 404, {"detail": "not found"}

    base_url = ""


@pytest.fixture
def api() -> Iterator[FakeApi]:
    fake = FakeApi()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            url = urlsplit(self.path)
            fake.requests.append((self.command, self.path, body))
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                status, reply = 401, {"detail": "bad token"}
            else:
                status, reply = fake.handle(self.command, url.path, parse_qs(url.query), body)
            data = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    fake.base_url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield fake
    server.shutdown()
    server.server_close()


def test_run_submits_long_polls_and_parses_the_result(api: FakeApi) -> None:
    with Client(api.base_url, TOKEN) as client:
        action = client.run("sandbox.python", {"code": "print(42)"}, job="j", demand={"cpu": 1})
    assert isinstance(action, Action)
    assert action.ok and action.done
    assert (action.job, action.trajectory, action.position) == ("j", "t", 4)
    assert action.stdout == "42\n"
    assert action.act_s == 1.5
    assert action.submitted_at is not None and action.finished_at is not None
    assert (action.finished_at - action.submitted_at).total_seconds() == 1.5
    method, path, body = api.requests[0]
    assert (method, path) == ("POST", "/api/v1/actions")
    assert body == {
        "type": "sandbox.python",
        "payload": {"code": "print(42)"},
        "job": "j",
        "demand": {"cpu": 1},
    }
    assert all("wait=" in p for m, p, _ in api.requests[1:])


def test_wait_times_out_with_timeout_error(api: FakeApi) -> None:
    api.polls_to_finish = 10**6
    with Client(api.base_url, TOKEN) as client:
        action = client.submit("sleep", {"seconds": 100})
        with pytest.raises(TimeoutError, match="still queued"):
            client.wait(action.id, timeout=1.2)


def test_api_errors_carry_status_detail_and_field_errors(api: FakeApi) -> None:
    with Client(api.base_url, "wrong") as client, pytest.raises(TangramError) as bad_token:
        client.me()
    assert bad_token.value.status == 401
    assert bad_token.value.detail == "bad token"
    with Client(api.base_url, TOKEN) as client:
        action = client.submit("sleep")
        client.cancel(action.id)
        with pytest.raises(TangramError) as conflict:
            client.cancel(action.id)
        assert conflict.value.status == 409


def test_bulk_submit_chunks_and_reports_errors_by_index_in_the_whole_list(api: FakeApi) -> None:
    api.reject_bulk_after = 1000
    items = [{"type": "sleep", "payload": {"seconds": 0}} for _ in range(1500)]
    with Client(api.base_url, TOKEN) as client, pytest.raises(TangramError) as error:
        client.submit_many(items)
    assert error.value.status == 400
    assert error.value.errors == {"1000.demand.cpu": ["must be > 0"]}
    assert len(error.value.submitted) == 1000
    assert [len(body) for m, _, body in api.requests if m == "POST"] == [1000, 500]  # type: ignore[arg-type]


def test_reads_are_retried_but_writes_are_not(api: FakeApi) -> None:
    with Client(api.base_url, TOKEN) as client:
        api.fail_next = [503, 502]
        assert client.me().name == "owner"
        api.fail_next = [503]
        with pytest.raises(TangramError) as error:
            client.submit("sleep")
        assert error.value.status == 503
        assert api.actions == {}


def test_unreachable_server_raises_tangram_error_without_status() -> None:
    with (
        Client("http://127.0.0.1:9", TOKEN, retries=1) as client,
        pytest.raises(TangramError) as error,
    ):
        client.get("a0")
    assert error.value.status is None


def test_list_follows_pages_and_me_parses_quotas(api: FakeApi) -> None:
    with Client(api.base_url, TOKEN) as client:
        client.submit_many([{"type": "sleep"} for _ in range(5)])
        assert [a.id for a in client.list(limit=2)] == ["a0", "a1", "a2", "a3", "a4"]
        me = client.me()
    assert me.quotas[0].resource == "cpu" and me.quotas[0].limit == 8
    assert me.usage == {"cpu": 1.5}
    assert (me.queued, me.running, me.waiting) == (2, 1, "no room now")


def test_async_client_waits_for_many_concurrently(api: FakeApi) -> None:
    async def scenario() -> None:
        async with AsyncClient(api.base_url, TOKEN) as client:
            batch = await client.submit_many([{"type": "sleep"} for _ in range(4)])
            done = await client.wait_all([a.id for a in batch], timeout=30)
            assert [a.id for a in done] == ["a0", "a1", "a2", "a3"]
            assert all(a.ok for a in done)
            assert [a.id async for a in client.list(limit=3)] == ["a0", "a1", "a2", "a3"]
            one = await client.run("sandbox.bash", {"code": "echo"})
            assert one.ok
            api.fail_next = [500]
            assert (await client.me()).name == "owner"

    asyncio.run(scenario())


def test_score_submits_one_batched_reward_call_per_sample_and_parses_the_scores(
    api: FakeApi,
) -> None:
    scorer = "def score(samples):\n    return [42 for s in samples]\n"
    with Client(api.base_url, TOKEN) as client:
        assert client.score(scorer, ["a", {"b": 1}], demand={"cpu": 2}) == [42, 42]
        other = client.score(scorer + "# v2\n", ["c"], files={"rm.json": "{}"})
        assert other == [42]
        with pytest.raises(ScoringError, match="1 of 3 samples not scored; first, a4: fail") as err:
            client.score(scorer, ["x", "bad", "y"], batch_key="mine", batch_limit=8)
    assert [a.id for a in err.value.failed] == ["a4"]
    posts = [body for method, _, body in api.requests if method == "POST"]
    first, second, third = (body for body in posts if isinstance(body, list))
    assert [item["payload"]["sample"] for item in first] == ["a", {"b": 1}]
    assert {item["type"] for item in first} == {"reward.python"}
    assert first[0]["demand"] == {"cpu": 2} and first[0]["batch_limit"] == 64
    assert first[0]["batch_key"] == first[1]["batch_key"]
    assert first[0]["batch_key"].startswith("reward.python:")
    assert second[0]["batch_key"] != first[0]["batch_key"]  # another scorer, another batch
    assert second[0]["payload"]["files"] == {"rm.json": "{}"}
    assert {(item["batch_key"], item["batch_limit"]) for item in third} == {("mine", 8)}

    async def scenario() -> list[Any]:
        async with AsyncClient(api.base_url, TOKEN) as client:
            return await client.score(scorer, ["z"])

    assert asyncio.run(scenario()) == [42]

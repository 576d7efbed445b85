"""End to end with real processes: daphne, a Celery worker, two agents, Postgres, Redis."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from pathlib import Path

import pytest

from tangram_client import AsyncClient, Client
from tests.agent.test_resize import GPU_WATCHER
from tests.e2e.cluster import running_cluster, sampled_cpu_quota, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


@pytest.fixture
def cluster(tmp_path):
    with running_cluster(tmp_path, agents=["agent-1", "agent-2"]) as cluster:
        yield cluster


def _terminal_events(cluster) -> Counter[str]:
    rows = cluster.sql(
        "SELECT action_id::text FROM actions_actionevent "
        "WHERE state IN ('succeeded', 'failed', 'cancelled', 'timed_out')"
    )
    return Counter(r[0] for r in rows)


def test_200_sandbox_actions_through_the_client(cluster):
    async def main():
        async with AsyncClient(cluster.base_url, cluster.tenant_token) as client:
            submitted = await client.submit_many(
                [
                    {
                        "type": "sandbox.python",
                        "payload": {"code": f"print({i} * {i})"},
                        "job": "e2e-200",
                        "demand": {"cpu": 1, "memory": 256},
                    }
                    for i in range(200)
                ]
            )
            return await client.wait_all([a.id for a in submitted], timeout=180)

    done = asyncio.run(main())
    assert [a.state for a in done] == ["succeeded"] * 200, Counter(a.state for a in done)
    assert [a.stdout for a in done] == [f"{i * i}\n" for i in range(200)]
    assert {a.node for a in done} == {"agent-1", "agent-2"}
    events = _terminal_events(cluster)
    assert len(events) == 200 and set(events.values()) == {1}


def test_kill_9_an_agent_loses_nothing(cluster):
    with Client(cluster.base_url, cluster.tenant_token) as client:
        submitted = client.submit_many(
            [
                {
                    "type": "sandbox.python",
                    "payload": {"code": f"import time; time.sleep(1.5); print({i})"},
                    "demand": {"cpu": 1, "memory": 256},
                }
                for i in range(16)
            ]
        )

        def agent_1_running() -> bool:
            rows = cluster.sql(
                "SELECT count(*) FROM actions_action a JOIN inventory_node n ON a.node_id = n.id "
                "WHERE n.name = 'agent-1' AND a.state = 'running'"
            )
            return rows[0][0] > 0

        wait_for(agent_1_running, 60, "agent-1 to hold running actions")
        cluster.kill("agent-1")
        done = client.wait_all([a.id for a in submitted], timeout=180)

    assert [a.state for a in done] == ["succeeded"] * 16, [(a.state, a.error) for a in done]
    assert [a.stdout for a in done] == [f"{i}\n" for i in range(16)]
    assert any(a.attempt > 1 and a.node == "agent-2" for a in done)
    events = _terminal_events(cluster)
    assert len(events) == 16 and set(events.values()) == {1}
    wait_for(lambda: "agent-1" not in cluster.online_nodes(), 30, "agent-1 to go offline")


def test_redis_gone_for_a_while_loses_nothing(cluster):
    """Redis carries only wake-ups and fan-out: without it work waits, and none is lost."""
    with Client(cluster.base_url, cluster.tenant_token) as client:
        before = client.submit_many(
            [{"type": "sleep", "payload": {"seconds": 1, "stdout": f"a{i}"}} for i in range(8)]
        )
        cluster.kill("redis")
        during = client.submit_many(
            [{"type": "sleep", "payload": {"seconds": 0.2, "stdout": f"b{i}"}} for i in range(8)]
        )
        time.sleep(4)  # an outage longer than the agents' lease renewal interval
        cluster.start_redis()
        done = client.wait_all([a.id for a in before + during], timeout=120)

    assert [a.state for a in done] == ["succeeded"] * 16, [(a.state, a.error) for a in done]
    assert [a.stdout for a in done] == [f"a{i}" for i in range(8)] + [f"b{i}" for i in range(8)]
    events = _terminal_events(cluster)
    assert len(events) == 16 and set(events.values()) == {1}


#: What a sandbox run prints of what it was given.
PROBE = (
    "import os; print(os.environ['TANGRAM_GPUS'], os.environ['CUDA_VISIBLE_DEVICES'],"
    " os.environ['TANGRAM_BATCH_ID'] or '-')"
)


def test_gpu_ids_and_batches_from_the_api_to_the_sandbox(tmp_path):
    """An agent with two GPU groups: 2-GPU actions get a group each, a batch shares one node."""
    with running_cluster(tmp_path, agents=[]) as cluster:
        cluster.start_agent("gpu-node", "--gpus", "0,1/2,3")
        wait_for(lambda: "gpu-node" in cluster.online_nodes(), 30, "gpu-node to register")
        with Client(cluster.base_url, cluster.tenant_token) as client:
            gpu = client.submit_many(
                [
                    {
                        "type": "sandbox.python",
                        "payload": {"code": f"import time; time.sleep(1); {PROBE}"},
                        "demand": {"cpu": 1, "memory": 256, "gpu": 2},
                    }
                    for _ in range(2)
                ]
            )
            batch = client.submit_many(
                [
                    {
                        "type": "sandbox.python",
                        "payload": {"code": PROBE},
                        "demand": {"cpu": 2, "memory": 600},
                        "batch_key": "rm",
                        "batch_limit": 8,
                    }
                    for _ in range(6)
                ]
            )
            done = client.wait_all([a.id for a in gpu + batch], timeout=120)

    assert [a.state for a in done] == ["succeeded"] * 8, [(a.state, a.error) for a in done]
    held = [list(a.gpus) for a in done[:2]]
    assert sorted(sorted(gpus) for gpus in held) == [["0", "1"], ["2", "3"]]
    for action, gpus in zip(done[:2], held, strict=True):
        ids = ",".join(gpus)
        assert action.stdout == f"{ids} {ids} -\n"
    members = done[2:]
    batch_ids = {a.batch_id for a in members}
    assert len(batch_ids) == 1 and None not in batch_ids
    assert {a.node for a in members} == {"gpu-node"}
    assert [a.stdout for a in members] == [f"  {batch_ids.pop()}\n"] * 6
    assert all(a.allocation["cpu"] == pytest.approx(2 / 6) for a in members)


def test_a_run_that_may_shrink_its_gpus_gives_some_back_to_calls_that_wait(tmp_path):
    """A sweep grows into the idle GPUs of a 4-GPU agent; one more 1-GPU call than
    GPUs are free arrives: the round takes GPUs back, the agent rewrites the run's
    ``TANGRAM_GPUS_FILE``, which the run sees, and the calls start while it runs."""
    with running_cluster(tmp_path, agents=[]) as cluster:
        cluster.start_agent("gpu-node", "--gpus", "0,1,2,3", cpu=8)
        wait_for(lambda: "gpu-node" in cluster.online_nodes(), 30, "gpu-node to register")
        with Client(cluster.base_url, cluster.tenant_token) as client:
            sweep = client.submit(
                "sandbox.python",
                {"code": GPU_WATCHER},
                demand={"cpu": 1, "memory": 256, "gpu": 1},
                elasticity={
                    "min_units": 1,
                    "max_units": 4,
                    "parallel_fraction": 0.9,
                    "unit_kind": "gpu",
                },
                duration_hint_s=600,
                may_shrink_gpus=True,
            )
            grown = wait_for(
                lambda: (a := client.get(sweep.id)).state == "running" and a, 30, "a start"
            )
            calls = client.submit_many(
                [
                    {
                        "type": "sleep",
                        "payload": {"seconds": 1},
                        "demand": {"cpu": 1, "memory": 16, "gpu": 1},
                        "duration_hint_s": 1,
                    }
                    for _ in range(4 - grown.units + 1)
                ]
            )
            done = client.wait_all([c.id for c in calls], timeout=60)
            sweep = client.wait(sweep.id, timeout=90)

    assert grown.units >= 2 and len(grown.gpus) == grown.units, grown
    assert sweep.ok and [c.state for c in done] == ["succeeded"] * len(done), sweep.stderr
    first, kept = (line.split(",") for line in sweep.stdout.split())
    assert sorted(first) == sorted(grown.gpus)
    assert set(kept) < set(first) and kept[0] == first[0]
    assert (sweep.units, sorted(sweep.gpus)) == (len(kept), sorted(kept))
    assert all(c.started_at < sweep.finished_at for c in done)


SCORER = """\
import uuid
RUN = uuid.uuid4().hex
def score(samples):
    return [{"length": len(text), "run": RUN, "of": len(samples)} for text in samples]
"""


def test_a_reward_batch_is_scored_in_one_run(tmp_path):
    """More reward calls than slots: coalesced into one batch, scored by one run of the scorer."""
    with (
        running_cluster(tmp_path, agents=["scorer-node"]) as cluster,
        Client(cluster.base_url, cluster.tenant_token) as client,
    ):
        texts = ["a", "bb", "ccc", "dddd", "eeeee", "ffffff"]

        def call(text: str) -> dict[str, object]:
            return {
                "type": "reward.python",
                "payload": {"code": SCORER, "sample": text},
                "demand": {"cpu": 2, "memory": 600},
                "batch_key": "length-rm",
                "batch_limit": 8,
            }

        # Until one call has run alone, the first of a burst runs alone (so that a
        # batch can be measured against it): one first, as a trainer's warm-up.
        (alone,) = client.submit_many([call("z")])
        assert client.wait_all([alone.id], timeout=60)[0].batch_id is None
        calls = client.submit_many([call(text) for text in texts])
        done = client.wait_all([a.id for a in calls], timeout=120)
        # The client's one-call way: scores in order.
        scored = client.score(SCORER, texts[:3], demand={"cpu": 2, "memory": 600})

    assert [s["length"] for s in scored] == [1, 2, 3]
    assert [a.state for a in done] == ["succeeded"] * 6, [(a.state, a.error) for a in done]
    assert len({a.batch_id for a in done} - {None}) == 1
    scores = [json.loads(a.stdout) for a in done]
    assert [s["length"] for s in scores] == [1, 2, 3, 4, 5, 6]
    assert {s["of"] for s in scores} == {6}
    assert len({s["run"] for s in scores}) == 1


LINEAR_SCORER = """\
import time
def score(samples):
    time.sleep(2.0 * len(samples))
    return [len(text) for text in samples]
"""


def test_batches_that_save_nothing_are_learned_and_then_not_formed(tmp_path):
    """A scorer whose batches take as long as their members one after another: from
    real batches the server learns what each extra member costs (about a whole run,
    against the runs seen alone); once that has held over many batches, the
    scheduler runs the calls one at a time."""
    call = {
        "type": "reward.python",
        "payload": {"code": LINEAR_SCORER, "sample": "x"},
        "demand": {"cpu": 2, "memory": 600},
        "batch_key": "linear-rm",
        "batch_limit": 3,
    }
    with (
        running_cluster(tmp_path, agents=["scorer-node"]) as cluster,
        Client(cluster.base_url, cluster.tenant_token) as client,
    ):
        for _ in range(2):  # alone: what one run takes
            (alone,) = client.submit_many([call])
            assert client.wait_all([alone.id], timeout=60)[0].batch_id is None
        burst = client.submit_many([call] * 6)  # two batches of three on the one slot
        batched = client.wait_all([a.id for a in burst], timeout=120)
        ((count, marginal),) = cluster.sql(
            "SELECT count, marginal FROM actions_actionbatchstat WHERE type = 'reward.python'"
        )
        # As if many more such batches had run: the estimate weighs a few lightly.
        cluster.sql("UPDATE actions_actionbatchstat SET count = 50 RETURNING id")
        last = client.submit_many([call] * 3)
        single = client.wait_all([a.id for a in last], timeout=120)
    assert [a.state for a in batched + single] == ["succeeded"] * 9
    assert len({a.batch_id for a in batched}) == 2 and None not in {a.batch_id for a in batched}
    assert count == 2 and 0.5 < marginal <= 1.0, marginal
    assert [a.batch_id for a in single] == [None] * 3


def test_a_reward_batch_on_a_killed_agent_is_scored_again_elsewhere(tmp_path):
    """kill -9 the agent mid-batch: every member comes back, is re-batched on the next
    agent and scored in one run there; each ends once."""
    slow = SCORER.replace("def score(samples):", "def score(samples):\n    time.sleep(4)")
    slow = "import time\n" + slow
    with (
        running_cluster(tmp_path, agents=["scorer-a"]) as cluster,
        Client(cluster.base_url, cluster.tenant_token) as client,
    ):

        def call(n: int) -> dict[str, object]:
            return {
                "type": "reward.python",
                "payload": {"code": slow, "sample": "x" * n},
                "demand": {"cpu": 2, "memory": 600},
                "batch_key": "slow-rm",
                "batch_limit": 8,
            }

        (alone,) = client.submit_many([call(0)])  # one alone first: the rest batch
        client.wait_all([alone.id], timeout=60)
        calls = client.submit_many([call(n) for n in range(1, 7)])

        def running_on_a() -> bool:
            rows = cluster.sql("SELECT count(*) FROM actions_action WHERE state = 'running'")
            return rows[0][0] == 6

        wait_for(running_on_a, 60, "the batch to run on scorer-a")
        cluster.kill("scorer-a")
        cluster.start_agent("scorer-b")
        done = client.wait_all([a.id for a in calls], timeout=180)
        events = _terminal_events(cluster)

    assert [a.state for a in done] == ["succeeded"] * 6, [(a.state, a.error) for a in done]
    assert {(a.node, a.attempt) for a in done} == {("scorer-b", 2)}
    scores = [json.loads(a.stdout) for a in done]
    assert [s["length"] for s in scores] == [1, 2, 3, 4, 5, 6]
    assert len({s["run"] for s in scores}) == 1 and {s["of"] for s in scores} == {6}
    assert len(events) == 7 and set(events.values()) == {1}


def _sandbox_processes() -> list[int]:
    """Host pids running as a sandbox slot uid (agents' blocks start at uid 60000)."""
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        uid = next(int(line.split()[1]) for line in text.splitlines() if line.startswith("Uid:"))
        if 60000 <= uid < 60000 + 64 * 1024 and "\nState:\tZ" not in text:
            found.append(int(status.parent.name))
    return found


def test_a_scorer_stays_loaded_for_its_tenants_next_calls(tmp_path):
    """Calls one after another, as a trainer's steps make them: the scorer loads once, its
    node reports it warm, the next calls go there and skip the load; a kill -9 of the
    agent takes the idle scorer with it."""
    with (
        running_cluster(tmp_path, agents=["small"]) as cluster,
        Client(cluster.base_url, cluster.tenant_token) as client,
    ):
        cluster.start_agent("large", cpu=4)
        wait_for(lambda: "large" in cluster.online_nodes(), 30, "the large agent to register")
        demand = {"cpu": 2, "memory": 600}
        # Best fit puts 2 cores on the small node: hold it, so the first call loads on the large.
        (hold,) = client.submit_many(
            [{"type": "sleep", "payload": {"seconds": 3}, "demand": demand}]
        )
        wait_for(lambda: client.get(hold.id).state == "running", 30, "the hold to run")
        first = client.run("reward.python", {"code": SCORER, "sample": "a"}, demand=demand)
        assert (first.ok, first.node, client.get(hold.id).node) == (True, "large", "small")
        ((affinity,),) = cluster.sql("SELECT affinity FROM actions_action WHERE id = %s", first.id)
        (key,) = [k for k in affinity if k.startswith("scorer:")]

        def warm_on() -> str | None:
            rows = cluster.sql(
                "SELECT name FROM inventory_node WHERE warm @> %s::jsonb", json.dumps([key])
            )
            return rows[0][0] if rows else None

        assert wait_for(warm_on, 30, "the scorer's node to report it warm") == "large"
        client.wait(hold.id, timeout=30)
        # Best fit alone would now pick the small node again; the warm scorer wins.
        later = [
            client.run("reward.python", {"code": SCORER, "sample": "b" * n}, demand=demand)
            for n in range(1, 5)
        ]
        assert all(a.ok for a in later), [(a.state, a.error) for a in later]
        assert {a.node for a in later} == {"large"}
        runs = {json.loads(a.stdout)["run"] for a in [first, *later]}
        assert len(runs) == 1, "every call was scored by the one loaded scorer"
        assert _sandbox_processes(), "the idle scorer is still loaded"
        cluster.kill("large")
        wait_for(lambda: not _sandbox_processes(), 10, "the idle scorer to die with its agent")


#: Three processes burn CPU for 14 s; prints the CPU seconds they got in each wall-clock second.
BURNER = """\
import json, os, time

def burn(until, out):
    seen, last = {}, time.process_time()
    while time.time() < until:
        for _ in range(20000):
            pass
        now = time.process_time()
        second = str(int(time.time()))
        seen[second] = seen.get(second, 0.0) + now - last
        last = now
    os.write(out, json.dumps(seen).encode())

until, readers = time.time() + 18, []
for _ in range(3):
    r, w = os.pipe()
    if os.fork() == 0:
        os.close(r)
        burn(until, w)
        os._exit(0)
    os.close(w)
    readers.append(r)
total = {}
for r in readers:
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    for second, cpu in json.loads(data).items():
        total[second] = total.get(second, 0.0) + cpu
for _ in readers:
    os.wait()
print(json.dumps(total))
"""


def test_a_grown_elastic_action_gives_cores_back_to_an_action_that_waits(tmp_path):
    """An elastic action grows on an idle 4-core node; a 3-core action arrives: the
    round takes three cores back, the agent lowers the running sandbox's CPU quota to
    one core, and the new action runs at once instead of waiting 18 s. When it ends,
    the elastic action gets the idle cores again."""
    with running_cluster(tmp_path, agents=[]) as cluster:
        cluster.start_agent("elastic-node", cpu=4)
        wait_for(lambda: "elastic-node" in cluster.online_nodes(), 30, "elastic-node to register")
        with Client(cluster.base_url, cluster.tenant_token) as client:
            elastic = client.submit(
                "sandbox.python",
                {"code": BURNER},
                demand={"cpu": 1, "memory": 256},
                elasticity={"min_units": 1, "max_units": 4, "parallel_fraction": 0.9},
                duration_hint_s=60,
            )
            agent_pid = cluster.processes["elastic-node"].pid
            with sampled_cpu_quota(agent_pid, str(elastic.id)) as quota:
                grown = wait_for(
                    lambda: (a := client.get(elastic.id)).state == "running" and a, 30, "a start"
                )
                time.sleep(4)  # some seconds at its grown quota
                rigid = client.submit("sleep", {"seconds": 5}, demand={"cpu": 3, "memory": 64})
                rigid = client.wait(rigid.id, timeout=60)
                elastic = client.wait(elastic.id, timeout=60)

    assert grown.units == 4 and grown.allocation["cpu"] == 4  # the idle node's every core
    assert rigid.ok and elastic.ok, (rigid.error, elastic.error, elastic.stderr)
    assert (elastic.units, elastic.allocation["cpu"]) == (4, 4)  # grown again
    assert rigid.started_at is not None and rigid.finished_at < elastic.finished_at
    shrunk_at, freed_at = rigid.started_at.timestamp(), rigid.finished_at.timestamp()
    # The cores the run's cgroup allowed: 4, then 1 while the rigid action ran, then 4.
    before = {cores for at, cores in quota if at + 1 < shrunk_at}
    held = {cores for at, cores in quota if shrunk_at + 1 < at < freed_at - 1}
    after = [cores for at, cores in quota if at > freed_at]
    assert before == {4.0} and held == {1.0} and after and after[-1] == 4.0, quota
    # The kernel held the run to its quota: three busy processes got at most one core.
    # (What they got outside that window depends on what else the machine runs.)
    cpu = {int(second): used for second, used in json.loads(elastic.stdout).items()}
    used_held = [used for second, used in cpu.items() if shrunk_at + 1 < second < freed_at - 1]
    assert used_held and max(used_held) <= 1.1, cpu

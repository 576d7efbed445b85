"""Python client for Tangram: submit actions from an RL loop, get their results.

An action is one use of an external resource (run this code in a sandbox,
score with that reward model); Tangram queues it, places it within your
tenant's quota and returns the result. Submit many and wait for them together
rather than one by one: the scheduler can only shorten completion times of
work it knows about.

    from tangram_client import Client

    with Client("http://127.0.0.1:8000", token="...") as tangram:
        action = tangram.run(
            "sandbox.python",
            {"code": "print(sum(range(10)))"},
            job="grpo-7b",
            trajectory="traj-42",
            demand={"cpu": 1, "memory": 512},
            timeout_s=30,
        )
        if action.ok:
            print(action.stdout, f"ACT {action.act_s:.2f}s")
        else:
            print(action.state, action.error, action.stderr)

        batch = tangram.submit_many(
            {"type": "sandbox.bash", "payload": {"code": f"echo {i}"}, "job": "grpo-7b"}
            for i in range(5000)
        )
        done = tangram.wait_all([a.id for a in batch], timeout=600)

        # A reward model: score(samples) runs once per batch of samples, not per sample.
        scorer = "def score(samples):\n    return [len(s) / 100 for s in samples]\n"
        rewards = tangram.score(scorer, completions, demand={"cpu": 2, "gpu": 1})

    # asyncio: the same methods, awaited; wait_all long-polls concurrently.
    from tangram_client import AsyncClient

    async with AsyncClient("http://127.0.0.1:8000", token="...") as tangram:
        action = await tangram.run("sandbox.python", {"code": "print(1)"})

A queued action's ``waiting`` says why it is not placed yet (no node runs its
type, its tenant is at a limit, no room now ...).

Errors from the API raise ``TangramError`` (``.status``, ``.detail``,
``.errors`` by field path); reads are retried on connection errors and 5xx.
"""

from tangram_client.client import AsyncClient, Client
from tangram_client.models import (
    STATES,
    TERMINAL_STATES,
    Action,
    Quota,
    ScoringError,
    TangramError,
    Tenant,
)

__all__ = [
    "STATES",
    "TERMINAL_STATES",
    "Action",
    "AsyncClient",
    "Client",
    "Quota",
    "ScoringError",
    "TangramError",
    "Tenant",
]

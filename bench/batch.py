"""What live reward batching saves: one burst of reward calls, three ways, end to end.

    python -m bench.batch                  # starts the embedded mode on a free port
    python -m bench.batch --calls 64 --load-s 1.0 --url URL --token TOKEN

Each call scores one sample with a scorer that loads a "model" (``--load-s``
seconds, a stand-in for loading reward-model weights) and then scores its
samples (a little real work each). The burst goes through the API, the policy
and an agent's sandboxes:

- ``reward.python`` with a ``batch_key``: the policy coalesces the calls that
  outnumber free slots into batches, and the agent scores each batch in one run
  (one load);
- ``sandbox.python`` with the same ``batch_key``: the same batches, but their
  members run in turn, one load each (how any non-batching executor runs a batch);
- ``reward.python`` without a key: every call on its own, as slots free up.

Prints the burst's wall time (submit to the last result), mean ACT and runs of
the scorer, and the ratios against the one-pass batches.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from bench.latency import target
from tangram_client import Client

SCORER = """\
import hashlib, time, uuid
time.sleep({load_s})  # loading the model
RUN = uuid.uuid4().hex
def score(samples):
    return [{{"score": hashlib.sha256(s.encode() * 2000).digest()[0], "run": RUN}} for s in samples]
"""
#: The same scorer as a plain sandbox run scoring its one sample.
ALONE = SCORER + "\nimport json, sys\nprint(json.dumps(score([sys.argv[1]])[0]))\n"


def calls(mode: str, count: int, load_s: float) -> list[dict[str, Any]]:
    scorer = SCORER.format(load_s=load_s)
    batch = {"batch_key": "bench-rm", "batch_limit": 64}
    specs = []
    for i in range(count):
        sample = f"completion {i}"
        if mode == "sandbox in turn":
            code = ALONE.format(load_s=load_s)
            spec = {"type": "sandbox.python", "payload": {"code": code, "args": [sample]}, **batch}
        else:
            spec = {"type": "reward.python", "payload": {"code": scorer, "sample": sample}}
            if mode == "reward one pass":
                spec.update(batch)
        specs.append({**spec, "demand": {"cpu": 1, "memory": 256}, "timeout_s": 600})
    return specs


def run_burst(url: str, token: str, specs: list[dict[str, Any]]) -> tuple[float, float, int]:
    with Client(url, token) as client:
        started = time.perf_counter()
        submitted = client.submit_many(specs)
        done = client.wait_all([a.id for a in submitted], timeout=1800)
        wall = time.perf_counter() - started
    failed = [(a.state, a.error) for a in done if not a.ok]
    assert not failed, failed[:3]
    runs = {json.loads(a.stdout)["run"] for a in done}
    return wall, statistics.mean(a.act_s or 0.0 for a in done), len(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url")
    parser.add_argument("--token")
    parser.add_argument("--calls", type=int, default=64)
    parser.add_argument("--load-s", type=float, default=1.0)
    args = parser.parse_args()

    modes = ("reward one pass", "sandbox in turn", "reward unbatched")
    with target(args.url, args.token) as (url, token):
        print(f"target {url}; a burst of {args.calls} calls, model load {args.load_s:g} s\n")
        print(f"{'mode':<20}{'wall s':>9}{'mean ACT s':>12}{'scorer runs':>13}{'x one pass':>12}")
        first = 0.0
        for mode in modes:
            wall, act, runs = run_burst(url, token, calls(mode, args.calls, args.load_s))
            first = first or wall
            print(f"{mode:<20}{wall:>9.2f}{act:>12.2f}{runs:>13}{wall / first:>12.2f}")


if __name__ == "__main__":
    main()

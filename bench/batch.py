"""What live reward batching and resident scorers save: bursts of reward calls, end to end.

    python -m bench.batch                  # starts the embedded mode on a free port
    python -m bench.batch --calls 64 --bursts 3 --load-s 1.0 [--url URL --token TOKEN]
    python -m bench.batch --agent-residents 0    # the embedded agent keeps no scorer loaded

Each call scores one sample with a scorer that loads a "model" (``--load-s``
seconds, a stand-in for loading reward-model weights) and then scores its
samples (a little real work each). ``--bursts`` bursts (RL steps) go one after
another through the API, the policy and an agent's sandboxes:

- ``reward.python`` with a ``batch_key``: the policy coalesces the calls that
  outnumber free slots into batches, and the agent scores each batch in one run
  of the scorer, which it keeps loaded for the next burst (``--agent-residents``);
- ``sandbox.python`` with the same ``batch_key``: the same batches, but their
  members run in turn, one load each (how any non-batching executor runs a batch);
- ``reward.python`` without a key: every call on its own, as slots free up, on
  a scorer kept loaded between calls.

Prints per mode the wall time of all bursts (submit to the last result), mean
ACT over all calls and over the bursts after the first (once a scorer could be
loaded), the scorer's loads, and the wall time against the one-pass batches.
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


def run_bursts(
    url: str, token: str, specs: list[dict[str, Any]], bursts: int
) -> tuple[float, list[list[float]], int]:
    """Wall time of the bursts, each burst's ACTs, and how many times the scorer loaded."""
    acts: list[list[float]] = []
    loads: set[str] = set()
    with Client(url, token) as client:
        started = time.perf_counter()
        for _ in range(bursts):
            submitted = client.submit_many(specs)
            done = client.wait_all([a.id for a in submitted], timeout=1800)
            failed = [(a.state, a.error) for a in done if not a.ok]
            assert not failed, failed[:3]
            acts.append([a.act_s or 0.0 for a in done])
            loads.update(json.loads(a.stdout)["run"] for a in done)
        wall = time.perf_counter() - started
    return wall, acts, len(loads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url")
    parser.add_argument("--token")
    parser.add_argument("--calls", type=int, default=64, help="calls per burst")
    parser.add_argument("--bursts", type=int, default=2)
    parser.add_argument("--load-s", type=float, default=1.0)
    parser.add_argument(
        "--agent-residents", type=int, help="the embedded agent's --residents (default 2)"
    )
    args = parser.parse_args()
    if args.url and args.agent_residents is not None:
        parser.error("--agent-residents sets up the embedded mode: not with --url")
    if args.calls < 1 or args.bursts < 1 or args.load_s < 0:
        parser.error("--calls and --bursts must be >= 1 and --load-s >= 0")
    serve_args = []
    if args.agent_residents is not None:
        serve_args = ["--agent-residents", str(args.agent_residents)]

    modes = ("reward one pass", "sandbox in turn", "reward unbatched")
    with target(args.url, args.token, *serve_args) as (url, token):
        print(
            f"target {url}; {args.bursts} bursts of {args.calls} calls, "
            f"model load {args.load_s:g} s\n"
        )
        print(
            f"{'mode':<20}{'wall s':>9}{'mean ACT s':>12}{'after 1st':>11}"
            f"{'loads':>7}{'x one pass':>12}"
        )
        first = 0.0
        for mode in modes:
            specs = calls(mode, args.calls, args.load_s)
            wall, acts, loads = run_bursts(url, token, specs, args.bursts)
            first = first or wall
            later = [act for burst in acts[1:] for act in burst]
            later_text = f"{statistics.mean(later):>11.2f}" if later else f"{'-':>11}"
            mean = statistics.mean(act for burst in acts for act in burst)
            print(f"{mode:<20}{wall:>9.2f}{mean:>12.2f}{later_text}{loads:>7}{wall / first:>12.2f}")


if __name__ == "__main__":
    main()

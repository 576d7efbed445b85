"""A reward model on a real GPU, scored through the agent's own sandbox: what keeping
the scorer loaded saves against loading it for every batch.

    python -m bench.gpu_scorer                       # needs an NVIDIA GPU and PyTorch with CUDA
    python -m bench.gpu_scorer --batches 6 --batch 64 --layers 12 --width 2048
    python -m bench.gpu_scorer --url URL --token T --models DIR   # live, through a deployment
    python -m bench.gpu_scorer --sizes 1,2,4,8,16,32,64   # what a batch of n costs: its marginal
    python -m bench.gpu_scorer --sizes 1,4,16,64 --decode 64   # a judge that writes 64 tokens

The model is a transformer encoder with a scalar head (``--layers``, ``--width``,
bf16), or with ``--decode N`` a decoder judge of the same size that writes N
tokens a sample, greedily, with a key/value cache (a generative judge, whose
decoding steps read every weight once per batch). Its weights are written once
to a directory every sandbox sees read-only at ``/models``
(``--sandbox-ro-bind``), run by this Python's environment
(``--sandbox-python``). Each batch is one ``reward.python`` run of ``--batch``
samples (token sequences of ``--tokens``) on GPU 0, as the agent runs a batch
the policy formed:

- ``resident``: the agent keeps the scorer loaded (``--residents 2``): the
  first batch loads the weights, the later ones only score;
- ``cold``: the agent keeps none (``--residents 0``): every batch starts
  Python, initialises CUDA and loads the weights again.

Both modes score the same samples; the scores must agree. Prints per mode the
first batch, the mean of the later ones and their ratio, and the model's size.

``--sizes``: instead of the two modes, batches of each size (and of one) on
the resident scorer, ``--batches`` of each after one that loads the weights,
with each size's first batch (the first to meet its shapes) and the
``marginal`` the policy would learn from the median batch of each
(``tangram_policy.estimate.batch_update``: each member past the first adds
that fraction of one run). The workloads' ``batch.marginal`` is this number
for their reward models.

``--url``: the same calls through a deployment's API, policy and a GPU agent,
one burst of ``--batch`` calls per ``--batches``, as ``Client.score`` sends
them (one call per sample, batched by the scheduler). The weights go to
``--models``, which that agent must bind at ``/models``
(``--sandbox-ro-bind DIR:/models``). Prints per burst its wall time, mean
ACT, the batches the policy formed, the scorer's loads and the GPUs used.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from tangram_agent.executors import Outcome, Sandbox, SandboxSettings, ScorerExecutor
from tangram_agent.executors.sandbox import environment_binds
from tangram_agent.protocol import Assignment
from tangram_client import Client
from tangram_policy.estimate import batch_update

#: The models, as code both the weights' writer and the scorer run: ``build`` the
#: modules, and ``rate`` a batch of token rows, one float each.
ENCODER = """\
import torch
def build(shape):
    layer = torch.nn.TransformerEncoderLayer(
        shape["width"], shape["heads"], 4 * shape["width"], batch_first=True
    )
    return torch.nn.ModuleDict({
        "embed": torch.nn.Embedding(shape["vocab"], shape["width"]),
        "encoder": torch.nn.TransformerEncoder(layer, shape["layers"], enable_nested_tensor=False),
        "head": torch.nn.Linear(shape["width"], 1),
    })
def rate(model, shape, tokens):
    hidden = model["encoder"](model["embed"](tokens))
    return model["head"](hidden[:, -1]).squeeze(-1).float().tolist()
"""

#: A judge that writes ``shape["decode"]`` tokens, greedily, with a key/value cache:
#: each step reads every weight once for the whole batch.
JUDGE = """\
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
#: Attention without cuDNN's: it builds a plan per new shape, and each decoding step
#: is one (on an H100, 3 to 4.6 s the first time a batch size runs, then 0.2 s).
UNPLANNED = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
def build(shape):
    width, vocab = shape["width"], shape["vocab"]
    def block():
        return torch.nn.ModuleDict({
            "ln1": torch.nn.LayerNorm(width), "qkv": torch.nn.Linear(width, 3 * width),
            "out": torch.nn.Linear(width, width), "ln2": torch.nn.LayerNorm(width),
            "up": torch.nn.Linear(width, 4 * width), "down": torch.nn.Linear(4 * width, width),
        })
    return torch.nn.ModuleDict({
        "embed": torch.nn.Embedding(vocab, width),
        "blocks": torch.nn.ModuleList(block() for _ in range(shape["layers"])),
        "norm": torch.nn.LayerNorm(width),
        "head": torch.nn.Linear(width, vocab, bias=False),
    })
def _layer(block, x, keys, values, at):
    batch, length, _ = x.shape
    q, k, v = block["qkv"](block["ln1"](x)).view(batch, length, 3, keys.shape[1], -1).permute(
        2, 0, 3, 1, 4
    )
    keys[:, :, at : at + length], values[:, :, at : at + length] = k, v
    a = F.scaled_dot_product_attention(
        q, keys[:, :, : at + length], values[:, :, : at + length], is_causal=length > 1
    )
    x = x + block["out"](a.transpose(1, 2).reshape(batch, length, -1))
    return x + block["down"](F.gelu(block["up"](block["ln2"](x))))
def rate(model, shape, tokens):
    batch, prompt = tokens.shape
    new, heads = shape["decode"], shape["heads"]
    size = (batch, heads, prompt + new, shape["width"] // heads)
    weight = model["head"].weight
    caches = [
        (weight.new_empty(size), weight.new_empty(size)) for _ in model["blocks"]
    ]
    x, at, written = model["embed"](tokens), 0, []
    with sdpa_kernel(UNPLANNED):
        for _ in range(new):
            for block, (keys, values) in zip(model["blocks"], caches):
                x = _layer(block, x, keys, values, at)
            at += x.shape[1]
            token = model["head"](model["norm"](x[:, -1])).argmax(-1)
            written.append(token)
            x = model["embed"](token)[:, None]
    verdict = torch.stack(written, 1)
    return (verdict % 2 == 0).float().mean(1).tolist()
"""


def scorer_code(model: str) -> str:
    """A ``reward.python`` scorer of ``model``: loads the weights at import, to the GPU."""
    return (
        """\
import json, time, uuid
began = time.monotonic()
"""
        + model
        + """\
SHAPE = json.load(open("/models/shape.json"))
with torch.device("meta"):
    MODEL = build(SHAPE)
weights = torch.load("/models/rm.pt", map_location="cuda", mmap=True, weights_only=True)
MODEL.load_state_dict(weights, assign=True)
MODEL.eval()
torch.cuda.synchronize()
LOAD_S = time.monotonic() - began
LOAD = uuid.uuid4().hex

def score(samples):
    tokens = torch.tensor(samples, device="cuda")
    with torch.no_grad():
        values = rate(MODEL, SHAPE, tokens)
    return [{"score": value, "load_s": LOAD_S, "load": LOAD} for value in values]
"""
    )


def writer_code(model: str) -> str:
    """Writes ``model``'s weights (seeded, bf16) and shape to the directory in argv[1]."""
    return (
        model
        + """\
import json, sys
shape = json.loads(sys.argv[2])
torch.manual_seed(0)
model = build(shape).to(torch.bfloat16)
torch.save(model.state_dict(), sys.argv[1] + "/rm.pt")
json.dump(shape, open(sys.argv[1] + "/shape.json", "w"))
print(sum(p.numel() for p in model.parameters()))
"""
    )


@dataclass
class ModeResult:
    batch_s: list[float]
    load_s: list[float]
    #: Which load of the scorer scored each batch.
    loads: list[str]
    scores: list[float]
    #: The sandbox's cgroups (None: rlimits only).
    cgroups: str | None


def samples(batch: int, tokens: int, vocab: int, seed: int) -> list[list[int]]:
    return [
        [(seed * 7919 + row * 104729 + col * 31) % vocab for col in range(tokens)]
        for row in range(batch)
    ]


def members(rows: list[list[int]], gpu: str, name: str, code: str) -> list[Assignment]:
    return [
        {
            "id": f"{name}-{i}",
            "attempt": 1,
            "type": "reward.python",
            "tenant": "bench",
            "payload": {"code": code, "sample": row},
            # Each member's share of the batch's 4 cores, 64 GiB and GPU.
            "allocation": {"cpu": 4 / len(rows), "memory": 65536 / len(rows), "gpu": 1 / len(rows)},
            "units": 1,
            "timeout_s": 600,
            "gpus": [gpu],
            "batch_id": f"batch:{name}",
            "batch_size": len(rows),
        }
        for i, row in enumerate(rows)
    ]


async def score_batch(
    scorer: ScorerExecutor, batch: list[Assignment]
) -> tuple[list[Outcome], float]:
    """Run one batch through the executor: its outcomes and wall seconds; exits if a
    member failed."""
    began = time.monotonic()
    outcomes = await scorer.execute_batch(batch)
    took = time.monotonic() - began
    failed = [o for o in outcomes if o.state != "succeeded"]
    if failed:
        first = failed[0]
        raise SystemExit(f"{batch[0].get('batch_id')} failed: {first.error}\n{first.stderr}")
    return outcomes, took


async def run_mode(
    settings: SandboxSettings, batches: list[list[list[int]]], gpu: str, name: str, code: str
) -> ModeResult:
    box = Sandbox(settings)
    scorer = ScorerExecutor(box)
    result = ModeResult([], [], [], [], box.isolation.cgroups)
    try:
        for index, rows in enumerate(batches):
            outcomes, took = await score_batch(scorer, members(rows, gpu, f"{name}{index}", code))
            result.batch_s.append(took)
            scored = [json.loads(o.stdout) for o in outcomes]
            result.load_s.append(scored[0]["load_s"])
            result.loads.append(scored[0]["load"])
            result.scores += [s["score"] for s in scored]
        await scorer.cool()
    finally:
        box.close()
    return result


async def run_sizes(
    settings: SandboxSettings, sizes: list[int], repeats: int, tokens: int, vocab: int, code: str
) -> tuple[dict[int, list[float]], str | None]:
    """Per batch size, the wall seconds of ``repeats`` batches on one resident scorer;
    and the sandbox's cgroups."""
    box = Sandbox(replace(settings, residents=2))
    scorer = ScorerExecutor(box)
    out: dict[int, list[float]] = {}
    try:
        runs = [(0, 1)] + [(size, seed) for size in sizes for seed in range(1, repeats + 1)]
        for size, seed in runs:  # the first one loads the weights: not timed
            rows = samples(max(size, 1), tokens, vocab, seed)
            _, took = await score_batch(scorer, members(rows, "0", f"size{size}-{seed}", code))
            if size:
                out.setdefault(size, []).append(took)
        await scorer.cool()
    finally:
        box.close()
    return out, box.isolation.cgroups


def print_sizes(times: dict[int, list[float]]) -> None:
    """Per size: its first batch (above one, the first to meet its shapes, where per-shape
    kernel plans are built), median batch, per member, and the marginal the policy
    would learn from the median against the median batch of one."""
    alone = statistics.median(times[1])
    print(f"{'size':>5} {'first ms':>9} {'batch ms':>9} {'per member ms':>14} {'marginal':>9}")
    for size, took in sorted(times.items()):
        batch = statistics.median(took)
        marginal = batch_update(None, batch, size, alone).marginal if size > 1 else float("nan")
        print(
            f"{size:>5} {took[0] * 1000:>9.1f} {batch * 1000:>9.1f} "
            f"{batch * 1000 / size:>14.2f} {marginal:>9.3f}"
        )


def write_weights(python: str, models: Path, shape: dict[str, int], model: str) -> int:
    """The model's weights and shape in ``models``, readable by the sandboxes; its parameters."""
    wrote = subprocess.run(
        [python, "-c", writer_code(model), str(models), json.dumps(shape)],
        capture_output=True,
        text=True,
        check=True,
    )
    (models / "rm.pt").chmod(0o644)
    (models / "shape.json").chmod(0o644)
    return int(wrote.stdout.strip())


def gpu_name() -> str:
    done = subprocess.run(
        ["nvidia-smi", "-i", "0", "--query-gpu=name", "--format=csv,noheader"],
        capture_output=True,
        text=True,
    )
    return done.stdout.strip()


def live(url: str, token: str, bursts: list[list[list[int]]], code: str) -> None:
    """Each burst as ``Client.score`` sends it, through the deployment at ``url``."""
    print(f"{'burst':>5} {'wall s':>7} {'mean ACT s':>10} {'batches':>7} {'loads':>5}  gpus")
    seen_loads: set[str] = set()
    with Client(url, token) as client:
        for index, rows in enumerate(bursts, start=1):
            began = time.monotonic()
            calls = client.submit_many(
                [
                    {
                        "type": "reward.python",
                        "payload": {"code": code, "sample": row},
                        "batch_key": "bench-gpu-rm",
                        "batch_limit": 64,
                        "demand": {"cpu": 4, "memory": 16384, "gpu": 1},
                        "timeout_s": 600,
                    }
                    for row in rows
                ]
            )
            done = client.wait_all([call.id for call in calls], 900)
            wall = time.monotonic() - began
            failed = [action for action in done if not action.ok]
            if failed:
                raise SystemExit(f"burst {index}: {failed[0].error}\n{failed[0].stderr}")
            loads = {json.loads(action.stdout)["load"] for action in done}
            new_loads, seen_loads = len(loads - seen_loads), seen_loads | loads
            batches = len({action.batch_id or action.id for action in done})
            gpus = sorted({f"{action.node}:{gpu}" for action in done for gpu in action.gpus})
            act = statistics.mean(action.act_s or 0.0 for action in done)
            print(f"{index:>5} {wall:>7.2f} {act:>10.2f} {batches:>7} {new_loads:>5}  {gpus}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--batch", type=int, default=64, help="samples per batch")
    parser.add_argument("--tokens", type=int, default=512, help="tokens per sample")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--python", default=sys.executable, help="the sandbox's Python (torch)")
    parser.add_argument("--cgroup-parent", help="a delegated cgroup v2 dir, as the agent's")
    parser.add_argument(
        "--sizes", help="batch sizes to time on the resident scorer, e.g. 1,2,4,8,16,32,64"
    )
    parser.add_argument(
        "--decode",
        type=int,
        default=0,
        help="score with a judge that writes this many tokens a sample (0: a one-pass scorer)",
    )
    parser.add_argument("--url", help="a deployment with a GPU agent: the calls go through it")
    parser.add_argument("--token", help="a tenant token for --url")
    parser.add_argument(
        "--models", type=Path, help="with --url: the dir the agent binds at /models"
    )
    args = parser.parse_args()
    if args.url and not (args.token and args.models):
        parser.error("--url needs --token and --models")
    try:
        # A batch of one is what the others are measured against.
        sizes = sorted({1, *(int(size) for size in args.sizes.split(","))}) if args.sizes else []
    except ValueError:
        parser.error(f"--sizes: expected comma-separated integers, got {args.sizes!r}")
    if any(size < 1 for size in sizes) or (args.sizes and args.url):
        parser.error("--sizes: sizes of at least 1, and not with --url")
    if args.decode < 0:
        parser.error(f"--decode: expected 0 or more tokens, got {args.decode}")
    model = JUDGE if args.decode else ENCODER
    code = scorer_code(model)
    # Live, this Python only writes the weights; here, its sandboxes run them on GPU 0.
    check = "import torch" if args.url else "import torch; assert torch.cuda.is_available()"
    probe = subprocess.run([args.python, "-c", check], capture_output=True)
    if probe.returncode != 0 or (not args.url and shutil.which("nvidia-smi") is None):
        need = "PyTorch" if args.url else "an NVIDIA GPU and PyTorch with CUDA"
        raise SystemExit(f"needs {need} for {args.python}")
    shape = {
        "layers": args.layers,
        "width": args.width,
        "heads": 16,
        "vocab": 32000,
        "decode": args.decode,
    }
    root = Path(tempfile.mkdtemp(prefix="tangram-gpu-bench-"))
    root.chmod(0o711)
    models = args.models or root / "models"
    models.mkdir(mode=0o755, exist_ok=True)
    try:
        params = write_weights(args.python, models, shape, model)
        batches = [
            samples(args.batch, args.tokens, shape["vocab"], seed) for seed in range(args.batches)
        ]
        batching = (
            f"{args.batches} batches of each size, {args.tokens} tokens a sample"
            if sizes
            else f"{args.batches} batches of {args.batch} x {args.tokens} tokens"
        )
        writes = f", writing {args.decode} tokens a sample" if args.decode else ""
        print(
            f"{params / 1e6:.0f} M parameters (bf16, {params * 2 / 2**30:.2f} GiB), "
            f"{batching}{writes}"
        )
        if args.url:
            live(args.url, args.token, batches, code)
            return
        base = SandboxSettings(
            work_root=root / "work",
            python=args.python,
            ro_binds=(*environment_binds(args.python), (str(models), "/models")),
            cgroup_parent=args.cgroup_parent,
        )
        if sizes:
            times, cgroups = asyncio.run(
                run_sizes(base, sizes, args.batches, args.tokens, shape["vocab"], code)
            )
            print(f"{gpu_name()}, sandbox cgroups {cgroups or 'none (rlimits only)'}")
            print_sizes(times)
            return
        results = {}
        for name, residents in (("resident", 2), ("cold", 0)):
            settings = replace(base, residents=residents)
            results[name] = asyncio.run(run_mode(settings, batches, "0", name, code))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    gap = max(
        abs(a - b) for a, b in zip(results["resident"].scores, results["cold"].scores, strict=True)
    )
    print(f"{gpu_name()}, sandbox cgroups {results['cold'].cgroups or 'none (rlimits only)'}")
    print(f"{'mode':<10} {'first s':>8} {'later s':>8} {'loads':>6} {'load s':>7}")
    for name, result in results.items():
        later = statistics.mean(result.batch_s[1:]) if len(result.batch_s) > 1 else float("nan")
        loads = len(set(result.loads))
        print(
            f"{name:<10} {result.batch_s[0]:>8.2f} {later:>8.3f} {loads:>6} "
            f"{statistics.mean(result.load_s):>7.2f}"
        )
    cold = statistics.mean(results["cold"].batch_s[1:])
    warm = statistics.mean(results["resident"].batch_s[1:])
    print(f"later batches, cold / resident: {cold / warm:.1f}x; largest score gap {gap:.2e}")


if __name__ == "__main__":
    main()

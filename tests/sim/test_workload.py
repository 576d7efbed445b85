"""Workload files: every shipped one loads, and a broken one is refused naming the field."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench import lending, perturb, scale, targets
from bench import policy as bench_policy
from tangram_sim.workload import WorkloadError, load_workload, workload_from_dict

WORKLOADS = Path(__file__).resolve().parents[2] / "fixtures" / "workloads"

BASE: dict[str, Any] = {
    "name": "tiny",
    "pool": [{"name": "cpu", "count": 2, "capacity": {"cpu": 4}, "executors": ["sandbox"]}],
    "tenants": [{"name": "team", "guaranteed": {"cpu": 4}, "limit": {"cpu": 8}}],
    "tasks": [
        {
            "name": "t",
            "tenant": "team",
            "steps": 2,
            "trajectories": 3,
            "turns": {"dist": "uniform", "low": 1, "high": 3},
            "think_s": {"dist": "lognormal", "mean": 2, "cv": 0.5},
            "actions": [
                {
                    "type": "run",
                    "executor": "sandbox",
                    "demand": {"cpu": 1},
                    "duration_s": {"dist": "exponential", "mean": 1},
                    "elasticity": {"min_units": 1, "max_units": 2, "parallel_fraction": 0.5},
                }
            ],
        }
    ],
}


def _task(raw: dict[str, Any]) -> dict[str, Any]:
    task: dict[str, Any] = raw["tasks"][0]
    return task


def _action(raw: dict[str, Any]) -> dict[str, Any]:
    action: dict[str, Any] = _task(raw)["actions"][0]
    return action


@pytest.mark.parametrize("path", sorted(WORKLOADS.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_workload_loads(path: Path) -> None:
    assert load_workload(path).tasks


def test_the_base_case_loads() -> None:
    assert workload_from_dict(copy.deepcopy(BASE)).tasks[0].actions[0].id == "t.run"


BROKEN: list[tuple[str, Callable[[dict[str, Any]], object], str]] = [
    (
        "a misspelt key",
        lambda raw: _action(raw).update(duraton_s=1),
        "tasks[0].actions[0]: Additional properties are not allowed ('duraton_s' was unexpected)",
    ),
    (
        "a word for a count",
        lambda raw: _task(raw).update(steps="two"),
        "tasks[0].steps: 'two' is not of type 'integer'",
    ),
    ("no steps", lambda raw: _task(raw).update(steps=0), "tasks[0].steps: 0 is less than"),
    (
        "an unknown distribution",
        lambda raw: _action(raw)["duration_s"].update(dist="gamma"),
        "tasks[0].actions[0].duration_s.dist: 'gamma' is not one of",
    ),
    (
        "a uniform without its bounds",
        lambda raw: _task(raw)["turns"].pop("high"),
        "tasks[0].turns: 'high' is a required property",
    ),
    (
        "a mean of 0",
        lambda raw: _action(raw)["duration_s"].update(mean=0),
        "tasks[0].actions[0].duration_s.mean: 0 is less than or equal to the minimum of 0",
    ),
    (
        "a negative demand",
        lambda raw: _action(raw)["demand"].update(cpu=-1),
        "tasks[0].actions[0].demand.cpu: -1 is less than the minimum of 0",
    ),
    (
        "an executor nobody runs",
        lambda raw: _action(raw).update(executor="sandbx"),
        "tasks[0].actions[0].executor: no node group runs 'sandbx'",
    ),
    (
        "a demand larger than every node",
        lambda raw: _action(raw)["demand"].update(cpu=5),
        "tasks[0].actions[0].demand: larger than every node running 'sandbox'",
    ),
    (
        "a tenant that is not declared",
        lambda raw: _task(raw).update(tenant="teem"),
        "tasks[0].tenant: 'teem' is not one of the tenants (team)",
    ),
    (
        "two tasks of one name",
        lambda raw: raw["tasks"].append(copy.deepcopy(_task(raw))),
        "tasks[1].name: 't' names another task too",
    ),
    (
        "fewer max units than min",
        lambda raw: _action(raw)["elasticity"].update(min_units=3),
        "tasks[0].actions[0].elasticity.max_units: below min_units",
    ),
    (
        "nothing to do",
        lambda raw: _task(raw).pop("actions"),
        "tasks[0]: has neither actions nor a reward",
    ),
    (
        "lending more than the guarantee",
        lambda raw: raw["tenants"][0].update(lending_limit={"cpu": 5}),
        "tenants[0].lending_limit.cpu: above its guaranteed 4",
    ),
    (
        "no turns and no reward",
        lambda raw: _task(raw).update(turns=0),
        "tasks[0].turns: none and no reward, so it runs no action",
    ),
    ("no pool", lambda raw: raw.pop("pool"), "workload: 'pool' is a required property"),
    (
        "a negative hint error",
        lambda raw: _action(raw).update(hint_cv=-0.5),
        "tasks[0].actions[0].hint_cv: -0.5 is less than the minimum of 0",
    ),
]


@pytest.mark.parametrize(("case", "breaks", "message"), BROKEN, ids=[b[0] for b in BROKEN])
def test_a_broken_workload_is_refused_naming_the_field(
    case: str, breaks: Callable[[dict[str, Any]], object], message: str
) -> None:
    raw = copy.deepcopy(BASE)
    breaks(raw)
    with pytest.raises(WorkloadError) as refused:
        workload_from_dict(raw)
    assert str(refused.value).startswith(message), str(refused.value)


def test_the_file_is_named_and_bad_yaml_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("pool: [\n")
    with pytest.raises(WorkloadError, match=f"^{path}: while parsing"):
        load_workload(path)
    path.write_text("just a string\n")
    with pytest.raises(WorkloadError, match=f"^{path}: workload: 'just a string' is not of type"):
        load_workload(path)


def test_the_benchmark_says_what_is_wrong_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text((WORKLOADS / "swe.yaml").read_text().replace("duration_s:", "duraton_s:", 1))
    swe = str(WORKLOADS / "swe.yaml")
    refusals = {
        "'duraton_s' was unexpected": [str(path)],
        "--policies: expected some of": [swe, "--policies", "tangram,fifoo"],
        "--seeds: expected comma-separated integers, got 'one'": [swe, "--seeds", "one"],
    }
    for message, argv in refusals.items():
        with pytest.raises(SystemExit) as exited:
            bench_policy.main(argv)
        assert exited.value.code == 2
        assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("main", "extra"),
    [
        (targets.main, []),
        (lending.main, ["--tenant", "team-code"]),
        (perturb.main, []),
        (scale.main, []),
    ],
    ids=["targets", "lending", "perturb", "scale"],
)
def test_every_bench_refuses_a_bad_workload_with_its_error(
    main: Callable[[list[str]], int],
    extra: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text((WORKLOADS / "swe.yaml").read_text().replace("duration_s:", "duraton_s:", 1))
    with pytest.raises(SystemExit) as exited:
        main([str(path), *extra])
    assert exited.value.code == 2
    assert "'duraton_s' was unexpected" in capsys.readouterr().err

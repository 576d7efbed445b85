"""How an agent learns its GPUs: the operator's list, or nvidia-smi's."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tangram_agent.__main__ import parse_args
from tangram_agent.gpus import discover_gpus, parse_gpu_groups, parse_nvidia_smi

SERVER = ["--server", "http://127.0.0.1:9", "--token", "t", "--name", "n"]


@pytest.mark.parametrize(
    ("text", "groups"),
    [
        ("0,1,2,3/4,5,6,7", (("0", "1", "2", "3"), ("4", "5", "6", "7"))),
        (" 0, 1 / 2 ", (("0", "1"), ("2",))),
        ("0", (("0",),)),
        ("none", ()),
        ("", ()),
    ],
)
def test_gpu_groups_parse(text: str, groups: tuple[tuple[str, ...], ...]) -> None:
    assert parse_gpu_groups(text) == groups


@pytest.mark.parametrize(
    ("text", "complaint"),
    [("0,1/1,2", "'1' is listed twice"), ("0,1/", "group 1 is empty"), ("/", "group 0 is empty")],
)
def test_bad_gpu_groups_say_what_is_wrong(text: str, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        parse_gpu_groups(text)


def test_cli_takes_gpus_from_the_option_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TANGRAM_GPUS", raising=False)
    assert parse_args(SERVER).gpu_groups == ()
    config = parse_args([*SERVER, "--gpus", "0,1/2,3", "--gpu-memory-mib", "80000"])
    assert config.gpu_groups == (("0", "1"), ("2", "3"))
    assert config.capacity["gpu"] == 4 and config.capacity["gpu_memory"] == 320_000
    monkeypatch.setenv("TANGRAM_GPUS", "6,7")
    assert parse_args(SERVER).gpu_groups == (("6", "7"),)
    assert parse_args([*SERVER, "--gpus", "none"]).gpu_groups == ()


@pytest.mark.parametrize(
    "argv", [["--gpus", "0,0"], ["--gpus", "none", "--gpu-memory-mib", "1024"]]
)
def test_cli_refuses_bad_gpus(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_args([*SERVER, *argv])
    assert exc.value.code == 2
    assert "gpu" in capsys.readouterr().err.lower()


def test_nvidia_smi_output_parses_into_one_group_and_the_smallest_memory() -> None:
    assert parse_nvidia_smi("0, 81559\n1, 81559\n2, 40960\n") == ((("0", "1", "2"),), 40960.0)
    assert parse_nvidia_smi("0, [N/A]\n") == ((("0",),), None)
    assert parse_nvidia_smi("") == ((), None)
    with pytest.raises(ValueError, match="unexpected nvidia-smi line"):
        parse_nvidia_smi("No devices were found\n")


@pytest.mark.skipif(
    shutil.which("nvidia-smi") is None, reason="needs an NVIDIA GPU and nvidia-smi on this host"
)
def test_discovery_finds_every_gpu_nvidia_smi_lists() -> None:
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True)
    groups, memory_mib = discover_gpus()
    assert sum(len(group) for group in groups) == len(listed.stdout.strip().splitlines())
    assert len(groups) == 1 and memory_mib is not None and memory_mib > 0

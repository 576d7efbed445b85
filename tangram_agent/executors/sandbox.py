"""``sandbox.python`` and ``sandbox.bash``: untrusted code under bubblewrap.

Layers, each covering what the others miss:

- bubblewrap namespaces: no network (loopback only), its own pids (when the
  command exits or bwrap is killed, the kernel kills everything left in the
  namespace), nothing of the host visible but ``/usr`` and the operator's
  ``ro_binds`` read-only, a fresh ``/sandbox`` work dir and a ``/tmp`` tmpfs;
  the agent's environment cleared.
- an unprivileged host uid per concurrent slot when the agent is root: the
  code never runs as root, even in its namespace, and RLIMIT_NPROC (per real
  uid, ignored for root) means something. Agents on one host claim disjoint
  uid blocks through lock files, so two agents never share a uid.
- a cgroup per run (:mod:`tangram_agent.cgroups`): memory (OOM kills are
  reported as such), process count, CPU cores; and a complete kill list.
- rlimits: CPU seconds, file size, open files, no core dumps; address space
  only when there is no memory cgroup.
- GPUs: only the device files of the GPUs assigned (``/dev/nvidiaN``, with
  ``nvidiactl`` and ``nvidia-uvm``) are bound into the sandbox, so the code
  cannot touch the others. The driver then numbers the visible GPUs from 0,
  so ``CUDA_VISIBLE_DEVICES`` is ``0..k-1`` there; ``TANGRAM_GPUS`` keeps the
  host's ids. Where nothing is bound (no device files, or no bwrap and so the
  host's ``/dev``), ``CUDA_VISIBLE_DEVICES`` is the host's ids.
  ``TANGRAM_GPUS_FILE`` lists the host ids the run holds; a resize that takes
  GPUs back from a run submitted with ``may_shrink_gpus`` rewrites it, and the
  run must stop using the others (their device files stay bound).

Without bwrap or cgroups it still runs, with what is left, and says so loudly
once at start-up: check ``Sandbox.isolation``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import math
import os
import re
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from tangram_agent.cgroups import CgroupManager, RunCgroup
from tangram_agent.executors.base import DEFAULT_OUTPUT_CAP, Outcome, PayloadError
from tangram_agent.executors.resident import (
    RESIDENT_RUNNER,
    BatchStderr,
    Resident,
    ResidentKey,
    ResidentPool,
)
from tangram_agent.protocol import Assignment

log = logging.getLogger("tangram.agent")

LAUNCHER = str(Path(__file__).with_name("_launch.py"))
SANDBOX_DIR = "/sandbox"
#: The file, in the run's ``/etc``, that lists the GPU ids it holds (``TANGRAM_GPUS_FILE``).
GPUS_FILE_NAME = "tangram-gpus"
SANDBOX_UID = 1000
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
Language = Literal["python", "bash"]
#: Exit code of the launcher when it could not set the sandbox up.
LAUNCH_FAILED = 125
#: uids per agent; also the most slots an agent may have.
UID_BLOCK = 1024
#: How long a killed run's launcher may take to be reaped before it is killed on its own.
REAP_WAIT_S = 5.0
#: The host's directories every sandbox sees, read-only (``/usr`` and the
#: top-level ones a distribution may keep beside it or link into it).
HOST_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: The dynamic loader's cache of library paths (``ldconfig``'s output).
HOST_LOADER_CACHE = Path("/etc/ld.so.cache")
#: Device files every CUDA process needs besides its GPUs' own ``nvidiaN``.
GPU_SHARED_DEVICES = ("nvidiactl", "nvidia-uvm")
#: A resident scorer's CPU-seconds limit, per core it holds: its batches are
#: bounded by their timeouts and its cgroup's CPU quota, its life by going idle.
RESIDENT_CPU_S_PER_CORE = 24 * 3600
#: The cores an idle scorer may use: it sits in room the server counts free.
IDLE_CPUS = 0.01
#: The longest reply line a resident scorer may write (the batch's own cap is checked after).
RESIDENT_REPLY_LIMIT = 256 * DEFAULT_OUTPUT_CAP + 65536


def environment_binds(python: str) -> tuple[tuple[str, str], ...]:
    """Read-only binds that show ``python``'s environment at the same paths in a
    sandbox: its prefix (a virtualenv's packages) and the interpreter it links to."""
    done = subprocess.run(
        [python, "-I", "-c", "import sys; print(sys.prefix); print(sys.base_prefix)"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    interpreter_home = os.path.dirname(os.path.dirname(os.path.realpath(python)))
    tops = {os.path.realpath(line) for line in done.stdout.split()} | {interpreter_home}
    return tuple((top, top) for top in sorted(tops) if not seen_by_every_sandbox(top))


def seen_by_every_sandbox(path: str) -> bool:
    """Whether ``path`` is under the host directories every sandbox sees."""
    return any(PurePosixPath(path).is_relative_to(top) for top in HOST_SYSTEM_DIRS)


def default_work_root() -> Path:
    if os.geteuid() == 0:
        return Path("/var/lib/tangram/work")
    return Path(tempfile.gettempdir()) / f"tangram-work-{os.geteuid()}"


@dataclass(frozen=True)
class SandboxSettings:
    work_root: Path = field(default_factory=default_work_root)
    output_cap: int = DEFAULT_OUTPUT_CAP
    #: Concurrent runs; each holds one slot (and, as root, its own uid).
    slots: int = 64
    #: First uid of the blocks of ``UID_BLOCK`` uids that agents claim.
    uid_base: int = 60000
    #: Where agents of one user on this host lock their blocks (uids and run dirs).
    lock_dir: Path = field(
        default_factory=lambda: Path(tempfile.gettempdir()) / f"tangram-agent-locks-{os.geteuid()}"
    )
    pids_max: int = 256
    default_memory_mib: float = 512.0
    default_cpus: float = 1.0
    default_timeout_s: float = 600.0
    file_size_mib: int = 1024
    open_files: int = 1024
    python: str = "/usr/bin/python3"
    bash: str = "/usr/bin/bash"
    bwrap: str | None = field(default_factory=lambda: shutil.which("bwrap"))
    #: False: rlimits only, never touch cgroups.
    use_cgroups: bool = True
    #: A delegated cgroup v2 directory; None probes the agent's own cgroups.
    cgroup_parent: str | None = None
    #: Host directories bound writable into every sandbox: (host path, sandbox path).
    extra_binds: tuple[tuple[str, str], ...] = ()
    #: Host paths bound read-only into every sandbox (a Python environment with
    #: the scorers' libraries, model weights): (host path, sandbox path).
    ro_binds: tuple[tuple[str, str], ...] = ()
    #: Where the host's ``nvidia*`` device files are (bound into sandboxes given GPUs).
    device_dir: Path = Path("/dev")
    #: The node's memory in MiB: idle resident scorers are ended before a run
    #: would take the runs and them past it. None: no such check.
    memory_mib: float | None = None
    #: Idle ``reward.python`` scorers kept loaded (:mod:`resident`); 0 keeps none.
    residents: int = 2
    #: How long a scorer is kept idle before it is ended.
    resident_idle_s: float = 300.0


@dataclass(frozen=True)
class SandboxPayload:
    code: str
    stdin: str
    files: dict[str, str]
    args: list[str]

    @classmethod
    def parse(cls, payload: dict[str, Any], main_name: str) -> SandboxPayload:
        code = payload.get("code")
        if not isinstance(code, str):
            raise PayloadError("code is required and must be a string")
        stdin = payload.get("stdin", "")
        if not isinstance(stdin, str):
            raise PayloadError("stdin must be a string")
        args = payload.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise PayloadError("args must be a list of strings")
        files = payload.get("files", {})
        if not isinstance(files, dict):
            raise PayloadError("files must be an object of relative path to text")
        for name, text in files.items():
            path = PurePosixPath(name)
            if not name or path.is_absolute() or ".." in path.parts or name.endswith("/"):
                raise PayloadError(f"files: {name!r} is not a relative file path")
            if str(path) == main_name:
                raise PayloadError(f"files: {name!r} would replace the code")
            if not isinstance(text, str):
                raise PayloadError(f"files: {name!r} must map to a string")
            if "\0" in name:
                raise PayloadError("files: a path contains a NUL byte")
        if any("\0" in a for a in args):
            raise PayloadError("args: an argument contains a NUL byte")
        texts = [code, stdin, *args, *files, *files.values()]
        try:
            for text in texts:
                text.encode()
        except UnicodeEncodeError as exc:
            raise PayloadError(f"text is not valid Unicode: {exc.reason}") from exc
        return cls(code=code, stdin=stdin, files=dict(files), args=list(args))


@dataclass(frozen=True)
class Isolation:
    """What this host gives the sandbox; logged at start-up, shown by the agent."""

    bwrap: bool
    cgroups: str | None
    uid_per_slot: bool
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class _Launch:
    """A run ready to start: its launcher spec and what it was given."""

    spec: dict[str, Any]
    cgroup: RunCgroup | None
    run_dir: Path
    memory_mib: float
    cpu_s: int
    timeout: float
    #: Where the run reads the GPU ids it holds (``TANGRAM_GPUS_FILE``), if it has any.
    gpus_file: Path | None = None


class _CappedReader:
    """Drain a pipe to the end, keeping only the first ``cap`` bytes.

    Draining past the cap matters: a child blocked on a full pipe would look
    like a hang and end as a timeout instead of a truncated success.
    """

    def __init__(self, stream: asyncio.StreamReader, cap: int) -> None:
        self.stream = stream
        self.cap = cap
        self.data = bytearray()
        self.truncated = False

    async def drain(self) -> None:
        while chunk := await self.stream.read(65536):
            room = self.cap - len(self.data)
            if len(chunk) > room:
                self.truncated = True
            if room > 0:
                self.data += chunk[:room]

    def text(self) -> str:
        return self.data.decode(errors="replace")


def _scores_for(reply: bytes, samples: list[Any]) -> bool:
    """Whether a scorer's reply is a JSON list with a score per sample (the runner
    checks; this is for a scorer that wrote to the reply pipe itself)."""
    try:
        scores = json.loads(reply)
    except ValueError:
        return False
    return isinstance(scores, list) and len(scores) == len(samples)


def _hold_to(cgroup: RunCgroup | None, cpus: float, what: str) -> None:
    """Throttle ``cgroup`` (a run's, if launched) to ``cpus`` cores from now on."""
    if cgroup is None:
        return
    try:
        cgroup.set_cpus(cpus)
    except OSError as exc:
        log.warning("could not throttle %s to %g cores: %s", what, cpus, exc)


def _write_gpus(path: Path, gpus: list[str]) -> None:
    """Tell a run the GPU ids it holds: replace ``path`` whole, so a read sees one list."""
    scratch = path.with_name(f".{path.name}.new")
    scratch.write_text(",".join(gpus) + "\n")
    scratch.chmod(0o644)
    os.replace(scratch, path)


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:64]


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _check_traversable(path: Path) -> None:
    """Fail at start-up, not per run, if slot uids cannot reach their work dirs."""
    for parent in [path, *path.parents]:
        if not os.stat(parent).st_mode & 0o001:
            raise ValueError(
                f"sandbox work root {path}: {parent} is not searchable by other users, "
                "so sandbox uids cannot reach their work dirs; choose another --work-root"
            )


class Sandbox:
    """Shared state of the sandbox executors of one agent: probes, slots, cgroups.

    Use from one event loop.
    """

    def __init__(self, settings: SandboxSettings | None = None) -> None:
        self.settings = settings or SandboxSettings()
        self._root = os.geteuid() == 0
        if not 1 <= self.settings.slots <= UID_BLOCK:
            raise ValueError(f"sandbox slots must be between 1 and {UID_BLOCK}")
        self._block_lock: int | None = None
        block = self._claim_block()
        self.uid_base = self.settings.uid_base + block * UID_BLOCK if self._root else None
        self.work_root = self.settings.work_root
        # Run dirs live under the claimed block: whatever is there was left by
        # a dead agent (we hold the lock), so it can be wiped safely.
        self.run_root = self.work_root / f"block-{block}"
        shutil.rmtree(self.run_root, ignore_errors=True)
        self.run_root.mkdir(parents=True)
        # Slot uids must traverse these to reach their run dir; nobody may list them.
        for path in (self.work_root, self.run_root):
            os.chmod(path, 0o711)
        if self._root:
            _check_traversable(self.run_root)
        self._cgroups = (
            CgroupManager.probe(parent=self.settings.cgroup_parent)
            if self.settings.use_cgroups
            else None
        )
        if self._cgroups is None or "cpu" not in self._cgroups.parents:
            log.debug("no cpu cgroup controller: a resize cannot change a running sandbox's cores")
        #: The cgroup of each launched run by (action, attempt): where a resize lands.
        self._run_cgroups: dict[tuple[str, int], RunCgroup] = {}
        #: Each launched run's ``TANGRAM_GPUS_FILE`` on the host: where a resize of
        #: its GPUs lands.
        self._run_gpu_files: dict[tuple[str, int], Path] = {}
        self._bwrap_modern = self._probe_bwrap()
        self.isolation = self._describe()
        for warning in self.isolation.warnings:
            log.warning("SANDBOX DEGRADED: %s", warning)
        log.info(
            "sandbox: bwrap=%s cgroups=%s uid_per_slot=%s run_root=%s",
            self.isolation.bwrap,
            self.isolation.cgroups,
            self.isolation.uid_per_slot,
            self.run_root,
        )
        self._free_slots: asyncio.Queue[int] = asyncio.Queue()
        for slot in range(self.settings.slots):
            self._free_slots.put_nowait(slot)
        self.residents = ResidentPool(
            residents=self.settings.residents, idle_s=self.settings.resident_idle_s
        )
        #: Memory (MiB) of the runs and busy scorers in flight.
        self._running_mib = 0.0
        #: Idle scorers being ended by their expiry.
        self._ending: set[asyncio.Task[None]] = set()

    def _claim_block(self) -> int:
        """Lock the first free block (of uids and run dirs) on this host, for our life."""
        self.settings.lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        for block in range(64):
            fd = os.open(self.settings.lock_dir / f"uids-{block}.lock", os.O_RDWR | os.O_CREAT)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self._block_lock = fd
            return block
        raise RuntimeError(f"all 64 sandbox blocks in {self.settings.lock_dir} are taken")

    def _probe_bwrap(self) -> bool | None:
        """Whether this bwrap takes the modern flags, or None if bwrap cannot run here."""
        if not self.settings.bwrap:
            return None
        uid = self.uid_base
        last_error = ""
        for modern in (True, False):
            argv = self._bwrap_argv(modern, etc=None, work=None, env={}) + ["/usr/bin/true"]
            spec = self._spec(argv, env={}, uid=uid, rlimits={}, cgroup=None, cwd="/")
            try:
                done = subprocess.run(
                    [sys.executable, "-I", "-S", LAUNCHER, json.dumps(spec)],
                    capture_output=True,
                    timeout=30,
                    env={},
                    cwd="/",
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                last_error = str(exc)
                continue
            if done.returncode == 0:
                return modern
            last_error = done.stderr.decode(errors="replace").strip()
        log.error("bwrap at %s does not work here: %s", self.settings.bwrap, last_error)
        return None

    def _describe(self) -> Isolation:
        warnings = []
        if self._bwrap_modern is None:
            warnings.append(
                "bubblewrap unavailable: sandboxed code runs as a plain process "
                "with NO filesystem or network isolation"
            )
        if self._cgroups is None:
            warnings.append(
                "no usable cgroups: memory via RLIMIT_AS only (none for runs with GPUs), "
                "process count via RLIMIT_NPROC only, no CPU-core limit"
            )
        if not self._root:
            warnings.append(
                "agent is not root: sandboxes share the agent's uid"
                + ("" if self._cgroups else ", so RLIMIT_NPROC is shared and not set")
            )
        cgroups = None
        if self._cgroups is not None:
            cgroups = f"v{self._cgroups.version}:{','.join(self._cgroups.controllers)}"
        return Isolation(
            bwrap=self._bwrap_modern is not None,
            cgroups=cgroups,
            uid_per_slot=self._root,
            warnings=tuple(warnings),
        )

    def close(self) -> None:
        # Idle scorers left by an event loop that did not end them (end_residents).
        for resident in self.residents.idle:
            self.residents.remove(resident)
            self._kill_tree(resident.proc.pid, resident.cgroup)
            self._cleanup(resident.run_dir, resident.cgroup)
        if self._cgroups is not None:
            self._cgroups.close()
        with contextlib.suppress(OSError):
            self.run_root.rmdir()
        if self._block_lock is not None:
            os.close(self._block_lock)
            self._block_lock = None

    # -- building the command -------------------------------------------------

    def _bwrap_argv(
        self,
        modern: bool,
        *,
        etc: Path | None,
        work: Path | None,
        env: dict[str, str],
        tmp_mib: float = 64,
        devices: tuple[str, ...] = (),
    ) -> list[str]:
        """bwrap's command line; ``modern`` uses flags of bwrap >= 0.8 (no nested
        user namespaces, a size-capped /tmp)."""
        assert self.settings.bwrap
        argv = [self.settings.bwrap, "--unshare-all", "--unshare-user"]
        if modern:
            argv.append("--disable-userns")
        argv += ["--die-with-parent", "--new-session", "--hostname", "sandbox"]
        argv += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
        for top in HOST_SYSTEM_DIRS:
            host = Path(top)
            if host.is_symlink():
                argv += ["--symlink", os.readlink(host), top]
            elif host.is_dir():
                argv += ["--ro-bind", top, top]
        argv += ["--proc", "/proc", "--dev", "/dev"]
        for name in devices:
            argv += ["--dev-bind", str(self.settings.device_dir / name), f"/dev/{name}"]
        if modern:
            # Without a memory cgroup nothing else would stop /tmp filling RAM.
            argv += ["--size", str(int(tmp_mib * 1024 * 1024))]
        argv += ["--tmpfs", "/tmp"]
        if etc is not None:
            argv += ["--ro-bind", str(etc), "/etc"]
        for host_path, sandbox_path in self.settings.ro_binds:
            argv += ["--ro-bind", host_path, sandbox_path]
        for host_path, sandbox_path in self.settings.extra_binds:
            argv += ["--bind", host_path, sandbox_path]
        if work is not None:
            argv += ["--bind", str(work), SANDBOX_DIR, "--chdir", SANDBOX_DIR]
        # The root is bwrap's own tmpfs: make it read-only too, so the only
        # writable places are /sandbox and /tmp.
        argv += ["--remount-ro", "/", "--clearenv"]
        for key, value in env.items():
            argv += ["--setenv", key, value]
        argv.append("--")
        return argv

    def _spec(
        self,
        argv: list[str],
        *,
        env: dict[str, str],
        uid: int | None,
        rlimits: dict[str, int],
        cgroup: RunCgroup | None,
        cwd: str | None,
    ) -> dict[str, Any]:
        return {
            "argv": argv,
            "env": env,
            "uid": uid,
            "gid": uid,
            "rlimits": rlimits,
            "cgroup_procs": cgroup.procs_files if cgroup else [],
            "cwd": cwd,
        }

    def _rlimits(self, *, cpu_s: int, memory_mib: float, gpus: bool) -> dict[str, int]:
        limits = {
            "RLIMIT_CPU": cpu_s,
            "RLIMIT_FSIZE": self.settings.file_size_mib * 1024 * 1024,
            "RLIMIT_NOFILE": self.settings.open_files,
            "RLIMIT_CORE": 0,
        }
        if self._cgroups is None and not gpus:
            # Not with GPUs: CUDA reserves far more address space than any
            # memory it uses, and would fail to start under this limit.
            limits["RLIMIT_AS"] = int(memory_mib * 1024 * 1024)
        if self._root or self._cgroups is None:
            # Per real uid: exact for a slot uid; for a shared uid still the
            # only fork-bomb guard left when there are no cgroups.
            limits["RLIMIT_NPROC"] = self.settings.pids_max + 8
        # Never raise a limit the agent itself runs under.
        for name, value in list(limits.items()):
            _, hard = resource.getrlimit(getattr(resource, name))
            if hard != resource.RLIM_INFINITY and value > hard:
                limits[name] = hard
        return limits

    def _gpu_devices(self, gpus: list[str]) -> tuple[tuple[str, ...], int]:
        """The device files to bind for ``gpus``, and how many of the GPUs they give.

        A GPU id is the ``N`` of ``/dev/nvidiaN``; an id without such a file
        (a name, or a host without the driver) gets nothing bound.
        """
        root = self.settings.device_dir
        own = [
            f"nvidia{gpu}"
            for gpu in gpus
            if re.fullmatch("[0-9]+", gpu) and (root / f"nvidia{gpu}").exists()
        ]
        if not own:
            return (), 0
        shared = [name for name in GPU_SHARED_DEVICES if (root / name).exists()]
        return (*own, *shared), len(own)

    # -- running ----------------------------------------------------------------

    def resize(self, assignment: Assignment) -> None:
        """Hold ``assignment``'s run to its allocation's (just changed) ``cpu``, and
        tell it the GPUs it keeps.

        A run not launched yet reads the new allocation and GPUs at its launch.
        """
        key = (str(assignment["id"]), int(assignment["attempt"]))
        _hold_to(self._run_cgroups.get(key), float(assignment["allocation"]["cpu"]), key[0])
        gpus_file = self._run_gpu_files.get(key)
        if gpus_file is not None:
            try:
                _write_gpus(gpus_file, [str(gpu) for gpu in assignment.get("gpus") or ()])
            except OSError as exc:
                log.warning("could not tell %s its GPUs: %s", key[0], exc)

    async def run(
        self, assignment: Assignment, language: Language, *, stdout_cap: int | None = None
    ) -> Outcome:
        """Run the assignment's payload; ``stdout_cap`` overrides the settings' cap for stdout."""
        main_name = "main.py" if language == "python" else "main.sh"
        try:
            payload = SandboxPayload.parse(assignment["payload"], main_name)
        except PayloadError as exc:
            return Outcome.invalid(f"invalid payload: {exc}")
        cap = stdout_cap or self.settings.output_cap
        async with self._holding(assignment, launch=True):
            slot = await self._take_slot()
            try:
                launch = self._launch(assignment, payload, language, main_name, slot)
                if isinstance(launch, Outcome):
                    return launch
                # No await since the allocation was read: a resize lands in it or in the cgroup.
                key = (str(assignment["id"]), int(assignment["attempt"]))
                if launch.cgroup is not None:
                    self._run_cgroups[key] = launch.cgroup
                if launch.gpus_file is not None:
                    self._run_gpu_files[key] = launch.gpus_file
                try:
                    return await self._execute(launch, payload.stdin, cap)
                finally:
                    self._run_cgroups.pop(key, None)
                    self._run_gpu_files.pop(key, None)
                    await asyncio.to_thread(self._cleanup, launch.run_dir, launch.cgroup)
            finally:
                self._free_slots.put_nowait(slot)

    async def score(
        self,
        assignment: Assignment,
        files: dict[str, str],
        samples: list[Any],
        *,
        warm_key: str | None,
        stdout_cap: int,
    ) -> Outcome:
        """Score ``samples`` with the scorer in ``files`` (:mod:`resident`): a succeeded
        outcome's ``stdout`` is the JSON list of scores.

        With a ``warm_key`` the scorer is taken from the idle ones when one
        matches, and kept idle after a batch that succeeded; without one it
        is launched for this batch alone.
        """
        allocation = assignment.get("allocation") or {}
        key = ResidentKey(
            warm_key or "",
            tuple(sorted((kind, float(amount)) for kind, amount in allocation.items())),
            tuple(str(gpu) for gpu in assignment.get("gpus") or ()),
        )
        resident = self.residents.take(key) if warm_key else None
        if resident is not None:  # next to nothing while idle, its batch's cores in use
            cpus = float(allocation.get("cpu") or self.settings.default_cpus)
            _hold_to(resident.cgroup, cpus, "a resident scorer")
        async with self._holding(assignment, launch=resident is None):
            if resident is None:
                launched = await self._launch_resident(assignment, files, key)
                if isinstance(launched, Outcome):
                    return launched
                resident = launched
            timeout = float(assignment.get("timeout_s") or self.settings.default_timeout_s)
            try:
                outcome = await self._batch(resident, samples, timeout, stdout_cap)
            except BaseException:  # cancelled: nothing of it may outlive the batch
                await self._end(resident)
                raise
            if outcome.state == "succeeded" and warm_key and self.residents.limit > 0:
                _hold_to(resident.cgroup, IDLE_CPUS, "an idle scorer")
                for over in self.residents.keep(resident, self._expire):
                    await self._end(over)
            else:
                await self._end(resident)
            return outcome

    # -- what runs hold -------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _holding(self, assignment: Assignment, *, launch: bool) -> AsyncIterator[None]:
        """Count the assignment's memory as the node's runs' while it runs; when it
        ``launch``-es a process, first end the idle scorers in its way."""
        allocation = assignment.get("allocation") or {}
        memory_mib = float(allocation.get("memory") or self.settings.default_memory_mib)
        self._running_mib += memory_mib
        try:
            if launch:
                gpus = {str(gpu) for gpu in assignment.get("gpus") or ()}
                for resident in self._in_the_way(gpus):
                    await self._end(resident)
            yield
        finally:
            self._running_mib -= memory_mib

    def _in_the_way(self, gpus: set[str]) -> list[Resident]:
        """Idle scorers to end before a launch on ``gpus``: those on any of them, then
        the least recently used until the runs and the rest fit the node's memory."""
        idle = self.residents.idle
        ending = [resident for resident in idle if gpus.intersection(resident.key.gpus)]
        capacity = self.settings.memory_mib
        if capacity is not None:
            kept = [resident for resident in idle if resident not in ending]
            held = sum(resident.memory_mib for resident in kept)
            for resident in kept:
                if self._running_mib + held <= capacity + 1e-9:
                    break
                ending.append(resident)
                held -= resident.memory_mib
        for resident in ending:
            self.residents.remove(resident)
        return ending

    async def _take_slot(self) -> int:
        """A free slot, ending the least recently used idle scorer if it holds the last."""
        if self._free_slots.empty() and (idle := self.residents.idle):
            self.residents.remove(idle[0])
            await self._end(idle[0])
        return await self._free_slots.get()

    # -- launching --------------------------------------------------------------

    def _prepare(
        self, run_dir: Path, payload: SandboxPayload, main_name: str, uid: int | None
    ) -> Path:
        run_dir.mkdir(mode=0o711)
        work = run_dir / "work"
        work.mkdir(mode=0o755)
        (work / main_name).write_text(payload.code)
        for name, text in payload.files.items():
            target = work / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        if uid is not None:
            for dirpath, dirnames, filenames in os.walk(work):
                os.chown(dirpath, uid, uid)
                for name in dirnames + filenames:
                    os.chown(os.path.join(dirpath, name), uid, uid)
        if self._bwrap_modern is not None:
            etc = run_dir / "etc"
            etc.mkdir(mode=0o755)
            (etc / "passwd").write_text(
                f"root:x:0:0::/:/usr/sbin/nologin\n"
                f"sandbox:x:{SANDBOX_UID}:{SANDBOX_UID}::{SANDBOX_DIR}:/usr/bin/bash\n"
                "nobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\n"
            )
            (etc / "group").write_text(f"root:x:0:\nsandbox:x:{SANDBOX_UID}:\nnogroup:x:65534:\n")
            (etc / "hosts").write_text("127.0.0.1 localhost sandbox\n::1 localhost\n")
            # The loader's cache: libraries the host registered outside the default
            # directories (the GPU driver's libcuda, say) load in the sandbox too.
            if HOST_LOADER_CACHE.is_file():
                shutil.copyfile(HOST_LOADER_CACHE, etc / HOST_LOADER_CACHE.name)
        return work

    def _launch(
        self,
        assignment: Assignment,
        payload: SandboxPayload,
        language: Language,
        main_name: str,
        slot: int,
        *,
        cpu_s_per_core: float | None = None,
    ) -> _Launch | Outcome:
        """Everything a run needs but its process (its dir, cgroup and launcher spec),
        or the outcome of a setup that failed. ``cpu_s_per_core`` replaces the
        timeout as the CPU-seconds limit per core."""
        settings = self.settings
        allocation = assignment.get("allocation") or {}
        memory_mib = float(allocation.get("memory") or settings.default_memory_mib)
        cpus = float(allocation.get("cpu") or settings.default_cpus)
        timeout = float(assignment.get("timeout_s") or settings.default_timeout_s)
        cpu_s = math.ceil((cpu_s_per_core or timeout) * max(cpus, 1.0)) + 1
        uid = None if self.uid_base is None else self.uid_base + slot
        run_name = "-".join(
            (_safe_name(str(assignment["id"])), str(assignment["attempt"]), secrets.token_hex(4))
        )
        run_dir = self.run_root / run_name
        cgroup: RunCgroup | None = None
        try:
            work = self._prepare(run_dir, payload, main_name, uid)
            if self._cgroups is not None:
                cgroup = self._cgroups.create(
                    run_name, memory_mib=memory_mib, pids_max=settings.pids_max, cpus=cpus
                )
        except OSError as exc:
            log.exception("sandbox setup failed for %s", assignment["id"])
            self._cleanup(run_dir, cgroup)
            return Outcome.invalid(f"sandbox setup failed: {exc}")

        gpus = [str(gpu) for gpu in assignment.get("gpus") or ()]
        devices, bound = self._gpu_devices(gpus) if self._bwrap_modern is not None else ((), 0)
        env = {
            "PATH": SANDBOX_PATH,
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "TMPDIR": "/tmp",
            "TANGRAM_CPUS": str(max(1, math.ceil(cpus))),
            "TANGRAM_UNITS": str(assignment.get("units", 1)),
            "TANGRAM_MEMORY_MB": str(int(memory_mib)),
            "OMP_NUM_THREADS": str(max(1, math.ceil(cpus))),
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "TANGRAM_GPUS": ",".join(gpus),
            # Bound device files are all the driver shows, numbered from 0.
            "CUDA_VISIBLE_DEVICES": ",".join(map(str, range(bound))) if bound else ",".join(gpus),
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "TANGRAM_BATCH_ID": assignment.get("batch_id") or "",
        }
        gpus_file = None
        if gpus:
            # In /etc, which the sandbox sees read-only; a resize replaces it.
            modern = self._bwrap_modern is not None
            gpus_file = (run_dir / "etc" if modern else run_dir) / GPUS_FILE_NAME
            try:
                _write_gpus(gpus_file, gpus)
            except OSError as exc:
                self._cleanup(run_dir, cgroup)
                return Outcome.invalid(f"sandbox setup failed: {exc}")
            env["TANGRAM_GPUS_FILE"] = f"/etc/{GPUS_FILE_NAME}" if modern else str(gpus_file)
        interpreter = settings.python if language == "python" else settings.bash
        rlimits = self._rlimits(cpu_s=cpu_s, memory_mib=memory_mib, gpus=bool(gpus))
        if self._bwrap_modern is not None:
            env["HOME"] = SANDBOX_DIR
            argv = self._bwrap_argv(
                self._bwrap_modern,
                etc=run_dir / "etc",
                work=work,
                env=env,
                tmp_mib=memory_mib,
                devices=devices,
            )
            argv += [interpreter, main_name, *payload.args]
            spec = self._spec(argv, env={}, uid=uid, rlimits=rlimits, cgroup=cgroup, cwd="/")
        else:
            env["HOME"] = str(work)
            spec = self._spec(
                [interpreter, main_name, *payload.args],
                env=env,
                uid=uid,
                rlimits=rlimits,
                cgroup=cgroup,
                cwd=str(work),
            )
        return _Launch(spec, cgroup, run_dir, memory_mib, cpu_s, timeout, gpus_file)

    @staticmethod
    async def _spawn(spec: dict[str, Any], *, limit: int = 2**16) -> asyncio.subprocess.Process:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            "-S",
            LAUNCHER,
            json.dumps(spec),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            env={},
            cwd="/",
            limit=limit,
        )
        assert proc.stdin and proc.stdout and proc.stderr
        return proc

    # -- resident scorers --------------------------------------------------------

    async def _launch_resident(
        self, assignment: Assignment, files: dict[str, str], key: ResidentKey
    ) -> Resident | Outcome:
        payload = SandboxPayload(code=RESIDENT_RUNNER, stdin="", files=files, args=[])
        slot = await self._take_slot()
        launch = self._launch(
            assignment, payload, "python", "main.py", slot, cpu_s_per_core=RESIDENT_CPU_S_PER_CORE
        )
        if isinstance(launch, Outcome):
            self._free_slots.put_nowait(slot)
            return launch
        try:
            proc = await self._spawn(launch.spec, limit=RESIDENT_REPLY_LIMIT)
        except BaseException:
            await asyncio.to_thread(self._cleanup, launch.run_dir, launch.cgroup)
            self._free_slots.put_nowait(slot)
            raise
        assert proc.stderr is not None
        stderr = BatchStderr(proc.stderr, self.settings.output_cap)
        resident = Resident(
            key=key,
            proc=proc,
            cgroup=launch.cgroup,
            run_dir=launch.run_dir,
            slot=slot,
            memory_mib=launch.memory_mib,
            cpu_s=launch.cpu_s,
            stderr=stderr,
            drain=asyncio.create_task(stderr.drain()),
        )
        resident.watcher = asyncio.create_task(self._watch(resident))
        return resident

    async def _watch(self, resident: Resident) -> None:
        """An idle scorer that exits by itself (it crashed, the OOM killer took it) is
        ended at once, and no longer reported warm."""
        await resident.proc.wait()
        if self.residents.remove(resident):
            await self._end(resident)

    async def _batch(
        self, resident: Resident, samples: list[Any], timeout: float, stdout_cap: int
    ) -> Outcome:
        """One batch through ``resident``; the caller keeps or ends it after."""
        proc = resident.proc
        assert proc.stdin and proc.stdout
        started = time.time()
        resident.stderr.take()  # what it said while idle is nobody's
        reply = b""
        timed_out = too_long = False

        async def exchange() -> bytes:
            assert proc.stdin and proc.stdout
            proc.stdin.write(json.dumps(samples).encode() + b"\n")
            await proc.stdin.drain()
            return await proc.stdout.readline()

        try:
            reply = await asyncio.wait_for(exchange(), timeout)
        except (BrokenPipeError, ConnectionResetError):
            pass  # it died: its exit says why
        except TimeoutError:
            timed_out = True
        except ValueError:  # over RESIDENT_REPLY_LIMIT
            too_long = True
        if reply.endswith(b"\n") and len(reply) <= stdout_cap and _scores_for(reply, samples):
            try:
                text, truncated = await asyncio.wait_for(resident.stderr.batches.get(), 5.0)
            except TimeoutError:  # the marker never came: keep what there is
                text, truncated = resident.stderr.take()
            return Outcome(
                state="succeeded",
                exit_code=0,
                stdout=reply.decode(errors="replace"),
                stderr=text,
                stderr_truncated=truncated,
                started_at=started,
                finished_at=time.time(),
            )
        # It failed: end it, so that its stderr is all there, then say why.
        code = None if timed_out or too_long or reply.endswith(b"\n") else await proc.wait()
        await self._end(resident)
        text, truncated = resident.stderr.take()
        failed: dict[str, Any] = {"state": "failed"}
        if timed_out:
            failed = {
                "state": "timed_out",
                "error": f"timed out after {timeout:g} s; process tree killed",
            }
        elif code is None:  # it answered, but not with a score per sample within the cap
            over = too_long or len(reply) > stdout_cap
            failed["stdout_truncated"] = over
            failed["error"] = "the scores are over the output cap" if over else "unreadable scores"
        else:
            failed["exit_code"] = exit_code = 128 - code if code < 0 else code
            failed["error"] = self._failure(
                exit_code, text, resident.cgroup, resident.memory_mib, resident.cpu_s
            )
        return Outcome(
            stderr=text,
            stderr_truncated=truncated,
            started_at=started,
            finished_at=time.time(),
            **failed,
        )

    async def _end(self, resident: Resident) -> None:
        """Kill ``resident``'s processes, remove its dir and cgroup, free its slot; once."""
        if resident.slot < 0:
            return
        slot, resident.slot = resident.slot, -1
        proc = resident.proc
        try:
            if proc.stdin is not None:
                proc.stdin.close()
            await asyncio.to_thread(self._kill_tree, proc.pid, resident.cgroup)
            await self._reap(proc)
            _, pending = await asyncio.wait([resident.drain], timeout=2.0)
            for task in pending:
                task.cancel()
            await asyncio.to_thread(self._cleanup, resident.run_dir, resident.cgroup)
        finally:
            self._free_slots.put_nowait(slot)

    async def end_residents(self) -> None:
        """End every idle scorer."""
        for resident in self.residents.idle:
            self.residents.remove(resident)
            await self._end(resident)

    def _expire(self, resident: Resident) -> None:
        if self.residents.remove(resident):
            task = asyncio.get_running_loop().create_task(self._end(resident))
            self._ending.add(task)
            task.add_done_callback(self._ending.discard)

    async def _execute(self, launch: _Launch, stdin: str, stdout_cap: int) -> Outcome:
        started = time.time()
        proc = await self._spawn(launch.spec)
        assert proc.stdin and proc.stdout and proc.stderr
        cgroup, timeout = launch.cgroup, launch.timeout
        out = _CappedReader(proc.stdout, stdout_cap)
        err = _CappedReader(proc.stderr, self.settings.output_cap)
        io_tasks = [
            asyncio.create_task(out.drain()),
            asyncio.create_task(err.drain()),
            asyncio.create_task(self._feed(proc.stdin, stdin)),
        ]
        timed_out = False
        try:
            try:
                await asyncio.wait_for(proc.wait(), timeout)
            except TimeoutError:
                timed_out = True
        finally:
            # Always, also on cancellation: nothing of the run may outlive it.
            await asyncio.to_thread(self._kill_tree, proc.pid, cgroup)
            code = await self._reap(proc)
            # Pipes close when the last holder dies; bound the wait anyway.
            _, pending = await asyncio.wait(io_tasks, timeout=2.0)
            for task in pending:
                task.cancel()
        finished = time.time()
        exit_code = 128 - code if code < 0 else code
        common: dict[str, Any] = {
            "exit_code": exit_code,
            "stdout": out.text(),
            "stderr": err.text(),
            "stdout_truncated": out.truncated,
            "stderr_truncated": err.truncated,
            "started_at": started,
            "finished_at": finished,
        }
        if timed_out:
            return Outcome(
                state="timed_out",
                error=f"timed out after {timeout:g} s; process tree killed",
                **{**common, "exit_code": None},
            )
        if exit_code == 0:
            return Outcome(state="succeeded", **common)
        return Outcome(
            state="failed",
            error=self._failure(
                exit_code, common["stderr"], cgroup, launch.memory_mib, launch.cpu_s
            ),
            **common,
        )

    def _failure(
        self,
        exit_code: int,
        stderr: str,
        cgroup: RunCgroup | None,
        memory_mib: float,
        cpu_s: int,
    ) -> str:
        if cgroup is not None and cgroup.oom_kills():
            return f"killed by the memory limit ({memory_mib:g} MiB)"
        if exit_code == LAUNCH_FAILED and "tangram sandbox launcher:" in stderr:
            return "sandbox setup failed: " + stderr.strip().splitlines()[-1]
        if exit_code == 1 and stderr.startswith("bwrap: "):
            return "sandbox setup failed: " + stderr.splitlines()[0]
        if cgroup is None and "MemoryError" in stderr:
            return f"ran out of memory (limit {memory_mib:g} MiB)"
        parts = [f"exited with code {exit_code}"]
        if exit_code > 128:
            signum = exit_code - 128
            parts = [f"killed by {_signal_name(signum)}"]
            if signum == signal.SIGXCPU:
                parts.append(f"CPU-time limit of {cpu_s} s exceeded")
        if cgroup is not None and cgroup.pids_limit_hits():
            parts.append(f"process limit ({self.settings.pids_max}) reached")
        return "; ".join(parts)

    @staticmethod
    async def _feed(stdin: asyncio.StreamWriter, data: str) -> None:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            if data:
                stdin.write(data.encode())
                await stdin.drain()
            stdin.close()
            await stdin.wait_closed()

    @staticmethod
    async def _reap(proc: asyncio.subprocess.Process) -> int:
        """The exit status of a run whose tree was just killed, once its child watcher
        has it. Killing it again first would reap it behind the watcher's back
        (``Popen.send_signal`` polls; CPython gh-87744): its status lost, as 255."""
        try:
            return await asyncio.wait_for(asyncio.shield(proc.wait()), REAP_WAIT_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            return await asyncio.shield(proc.wait())

    @staticmethod
    def _kill_tree(pid: int, cgroup: RunCgroup | None) -> None:
        # Killing bwrap's process group kills its pid namespace (--die-with-parent
        # takes its init down, and the kernel the rest); the cgroup catches
        # anything else, including the launcher-only fallback.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        if cgroup is not None:
            cgroup.kill_all()

    @staticmethod
    def _cleanup(run_dir: Path, cgroup: RunCgroup | None) -> None:
        if cgroup is not None:
            cgroup.kill_all()
            cgroup.remove()
        shutil.rmtree(run_dir, ignore_errors=True)


class SandboxExecutor:
    """One language's view of the shared :class:`Sandbox`."""

    def __init__(self, sandbox: Sandbox, language: Language) -> None:
        self.sandbox = sandbox
        self.language: Language = language

    async def execute(self, assignment: Assignment) -> Outcome:
        return await self.sandbox.run(assignment, self.language)

    def resize(self, assignment: Assignment) -> None:
        self.sandbox.resize(assignment)

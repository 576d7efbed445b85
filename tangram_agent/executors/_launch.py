"""Sandbox launcher: join the run's cgroups, set rlimits, drop to the slot uid, exec.

Run as its own process (``python -I -S _launch.py SPEC_JSON``) rather than as a
``preexec_fn``: forking a threaded agent and running Python before exec can
deadlock, and this way every step happens in a fresh single-threaded process
before anything of the action runs. Standard library only, no package imports.
"""

import json
import os
import resource
import sys


def main() -> None:
    spec = json.loads(sys.argv[1])
    pid = str(os.getpid())
    for procs_file in spec["cgroup_procs"]:
        with open(procs_file, "w") as f:
            f.write(pid)
    for name, value in spec["rlimits"].items():
        resource.setrlimit(getattr(resource, name), (value, value))
    if spec["uid"] is not None:
        os.setgroups([])
        os.setgid(spec["gid"])
        os.setuid(spec["uid"])
    if spec["cwd"] is not None:
        os.chdir(spec["cwd"])
    argv = spec["argv"]
    os.execve(argv[0], argv, spec["env"])


if __name__ == "__main__":
    try:
        main()
    except OSError as exc:
        sys.stderr.write(f"tangram sandbox launcher: {exc}\n")
        sys.exit(125)

"""Attacks on the sandbox from model-written code, run as a program (as root or as a user).

``python sandbox_probe.py MODE DATASET [plain [no-landlock]]`` configures ``MODE`` (``plain``:
the fallback without namespaces; ``no-landlock``: on a kernel without Landlock), runs each
attack as a real Solver call and prints one JSON object: what each call returned (its text or
its tool error). tests/test_sandbox_attacks.py reads it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import textwrap

from pytest_gta.errors import GtaError
from tool_backends.sandbox import Machine, Sandbox, SandboxWorker

ATTACKS = {
    "statistics": """
        import statistics, sympy
        def solution():
            return f'{statistics.mean([1, 2])} {sympy.sqrt(8)}'
        """,
    "dataset": """
        def solution():
            with open(DATASET) as handle:
                return handle.read()
        """,
    "walk": """
        import os
        def solution():
            found = []
            for here, subdirectories, files in os.walk('/'):
                if here.startswith(('/proc', '/sys', '/dev')):
                    subdirectories[:] = []
                    continue
                for name in files:
                    path = os.path.join(here, name)
                    if name in ('dataset.json', 'toolmeta.json'):
                        found.append(path)
                    elif name == 'pyproject.toml':
                        try:
                            with open(path, errors='replace') as handle:
                                if 'pytest-gta' in handle.read():
                                    found.append(path)
                        except OSError:
                            pass
            return repr(found)
        """,
    "environ": """
        import os
        def solution():
            found = []
            for pid in os.listdir('/proc'):
                try:
                    with open(f'/proc/{pid}/environ', 'rb') as handle:
                        found.append(handle.read().decode(errors='replace'))
                except OSError:
                    pass
            return repr(found)
        """,
    "kill": """
        import os, signal
        def solution():
            try:
                os.kill(HOST, 0)
            except OSError as exc:
                return 'refused: ' + type(exc).__name__
            return 'could signal pytest'
        """,
    "forge": """
        import os, struct
        def solution():
            for fd in range(3, 64):
                for frame in (b'[1]', b'{not json', b'{"text": 1}'):
                    try:
                        os.write(fd, struct.pack('>I', len(frame)) + frame)
                    except OSError:
                        pass
            os._exit(0)
        """,
    "fill": """
        import os
        def solution():
            block = b'x' * (8 << 20)
            for n in range(64):
                with open(f'fill-{n}.bin', 'wb') as handle:
                    handle.write(block)
            return 'wrote 512 MiB'
        """,
    "write": """
        import os, subprocess, sys
        def solution():
            wrote = []
            for directory in [*sys.path, os.path.dirname(sys.executable), '/tmp', '/dev/shm']:
                try:
                    with open(os.path.join(directory or '.', 'gta-escaped'), 'w'):
                        wrote.append(directory)
                except OSError:
                    pass
            site = [p for p in sys.path if p.endswith('site-packages')][0]
            remount = subprocess.run(['mount', '-o', 'remount,bind,rw', site],
                                     capture_output=True).returncode
            for directory in [site, '/']:
                try:
                    with open(os.path.join(directory, 'gta-escaped'), 'w'):
                        wrote.append(directory)
                except OSError:
                    pass
            return repr([wrote, remount])
        """,
    "after": """
        import os
        def solution():
            here = os.getcwd()
            stat = os.statvfs(here)
            return repr([os.listdir(os.path.dirname(here)), stat.f_bfree * stat.f_frsize,
                         stat.f_blocks * stat.f_frsize])
        """,
    "kill_worker": """
        import os, signal
        def solution():
            os.kill(os.getppid(), signal.SIGKILL)
            return 'the worker was signalled'
        """,
}


def main(mode: str, dataset: str, plain: bool, landlock: bool = True) -> None:
    machine = Machine()
    if plain:  # the fallback as a machine without bubblewrap and unshare has it
        machine = dataclasses.replace(machine, which=lambda name: None)
    if not landlock:  # ... and a kernel without Landlock
        machine = dataclasses.replace(machine, landlock_abi=lambda: 0)
    host = Sandbox(machine=machine)
    chosen = host.configure(mode)  # type: ignore[arg-type]
    host.hide(os.path.dirname(dataset))
    worker = SandboxWorker(host)
    out: dict[str, object] = {"isolation": chosen.describe(), "uid": os.getuid()}
    for name, code in ATTACKS.items():
        body = (
            textwrap.dedent(code)
            .replace("DATASET", repr(dataset))
            .replace("HOST", str(os.getpid()))
        )
        try:
            out[name] = worker.run("solver", body, timeout=10).text
        except GtaError as exc:
            out[name] = f"{type(exc).__name__}: {exc}"
        if name == "after" and worker._scratch is not None:  # the host's side, if any
            out["host_scratch"] = sorted(os.listdir(worker._scratch.name))
    figure = "def solution():\n    fig = plt.figure()\n    plt.plot([1, 2], [3, 4])\n    return fig"
    try:
        png = worker.run("plot", figure, timeout=20).png or b""
        out["plot"] = png[:8].decode("latin-1")
        out["calculator"] = worker.run("calculator", "round(sqrt(2), 3)").text
    except GtaError as exc:
        out["plot"] = f"{type(exc).__name__}: {exc}"
    worker.close()
    host.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], "plain" in sys.argv[3:], "no-landlock" not in sys.argv[3:])

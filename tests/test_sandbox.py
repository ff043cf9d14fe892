"""The code sandbox: what model-written code sees, what it leaves behind, where Python may live.

Every test runs the real worker (bubblewrap when it works here, and the rlimit fallback), with
real processes. ``.ci/run`` installs Debian's bubblewrap and sets ``PYTEST_GTA_REQUIRE_BWRAP=1``,
so there a missing or broken bubblewrap fails these tests instead of skipping them.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pytest_gta.errors import GtaInfrastructureError, GtaToolError, GtaUsageError
from tests.helpers.optional import require
from tests.helpers.paths import ROOT
from tool_backends import sandbox_pool, sandbox_tree, sandbox_worker
from tool_backends.sandbox import Sandbox
from tool_backends.sandbox_isolation import Isolation
from tool_backends.sandbox_machine import Machine
from tool_backends.sandbox_mounts import bwrap_command
from tool_backends.sandbox_pool import SandboxPool, SandboxWorker

pytestmark = pytest.mark.slow

SECRET = "sk-sandbox-test-9f8e7d6c5b4a"


@pytest.fixture(scope="module")
def sandboxes():
    """The sandbox of each mode, probed once for the module's tests (as a run probes once)."""
    made: dict[str, Sandbox] = {}

    def sandbox(mode: str) -> Sandbox:
        if mode not in made:
            made[mode] = Sandbox(mode)
        return made[mode]

    yield sandbox
    for each in made.values():
        each.close()


@pytest.fixture(params=["bubblewrap", "rlimit"])
def worker(request, sandboxes):
    """A fresh worker in each sandbox mode."""
    if request.param == "bubblewrap":
        require("bubblewrap")
    running = SandboxWorker(sandboxes(request.param))
    yield running
    running.close()


def solve(worker: SandboxWorker, body: str) -> str:
    return worker.run("solver", textwrap.dedent(body), timeout=10).text or ""


def test_a_file_reply_forged_by_model_code_is_refused(worker):
    """Only a generator's program answers a file: a Solver's code that writes one is the model's."""
    body = """
        import base64, json, os, struct
        def solution():
            frame = json.dumps({"file": base64.b64encode(b"%PDF forged").decode()}).encode()
            for fd in range(3, 64):
                try:
                    os.write(fd, struct.pack('>I', len(frame)) + frame)
                except OSError:
                    pass
            os._exit(0)
        """
    with pytest.raises(GtaToolError) as raised:
        worker.run("solver", textwrap.dedent(body), timeout=10)
    assert str(raised.value) == sandbox_worker.FORGED
    # A generator's program may answer one.
    built = "def solution():\n    return b'%PDF built'"
    assert worker.run("generator", built, timeout=10).data == b"%PDF built"


def test_model_code_sees_only_the_allow_listed_environment(worker, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("HF_TOKEN", SECRET + "-hf")
    seen = json.loads(
        solve(
            worker,
            """
            import json, os
            def solution():
                return json.dumps(dict(os.environ))
            """,
        )
    )
    assert SECRET not in json.dumps(seen)
    # PWD and TMPDIR are set by the sandbox itself (the shell, the call's own directory).
    assert set(seen) - {"PWD", "TMPDIR"} == {"PATH", "LANG", "HOME", "MPLCONFIGDIR"}
    assert seen["PATH"] == sandbox_tree.SANDBOX_PATH
    assert seen["TMPDIR"].startswith(seen["HOME"])


def test_the_parent_environment_cannot_be_read_through_proc(worker, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    text = solve(
        worker,
        """
        import os
        def solution():
            found = []
            for pid in os.listdir('/proc'):
                try:
                    with open(f'/proc/{pid}/environ', 'rb') as fh:
                        found.append(fh.read())
                except OSError:
                    pass
            return repr(found)
        """,
    )
    assert SECRET not in text


def test_a_double_forked_setsid_process_does_not_survive_the_call(worker):
    tag = f"{time.time_ns() % 10**9}.5"  # a unique sleep argument to look for afterwards
    text = solve(
        worker,
        f"""
        import os, time
        def solution():
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    os.execv('/bin/sleep', ['sleep', '{tag}'])
                os._exit(0)
            time.sleep(0.5)
            return 'forked'
        """,
    )
    assert text == "forked"
    left = subprocess.run(["pgrep", "-f", f"sleep {tag}"], capture_output=True, text=True)
    assert left.stdout.strip() == "", "a process of the call survived it"
    # Not even a zombie of the call's uid remains under the worker. (Only under it: other
    # xdist workers' and other sessions' calls run as the same uid on this machine meanwhile.)
    assert worker._process is not None
    owners = {owner(pid) for pid in descendants(worker._process.pid)}
    assert sandbox_worker.CALL_UID not in owners


def owner(pid: int) -> int | None:
    """The uid of a process, or ``None`` when it has ended."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


#: A process as ``nobody`` (what a sandboxed agent runs as under root) holding 40 threads.
THREADED_NOBODY = """
import os, sys, threading
os.setgroups([]); os.setgid(65534); os.setuid(65534)
stop = threading.Event()
for _ in range(40):
    threading.Thread(target=stop.wait, daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
"""


def test_an_agents_threads_do_not_use_up_a_calls_process_allowance(worker):
    """A call's threads count against its uid's ``RLIMIT_NPROC`` on the whole machine.

    Calls once ran as ``nobody``, like the sandboxed agents: a LangGraph agent's threads in
    another xdist worker left a concurrent call no room for Z3's timer thread (SIGABRT, CI on
    2026-12-06). Calls now run as a uid of their own; here 40 threads of ``nobody`` stand by
    while a call starts four threads.
    """
    if os.geteuid() != 0:
        pytest.skip("calls change uid only when the worker is root")
    agent = subprocess.Popen(
        [sys.executable, "-c", THREADED_NOBODY], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert agent.stdout is not None
        assert agent.stdout.readline().strip() == b"ready"
        text = solve(
            worker,
            """
            import os, threading
            def solution():
                threads = [threading.Thread(target=lambda: None) for _ in range(4)]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                return f"{os.getuid()} {len(threads)}"
            """,
        )
    finally:
        agent.communicate(b"", timeout=30)
    uid = sandbox_worker.CALL_UID if sandbox_worker.mapped(sandbox_worker.CALL_UID) else 0
    assert text == f"{uid} 4"


def test_model_code_cannot_write_outside_its_scratch_directory(worker, tmp_path):
    if not worker.host.isolation().isolated:
        pytest.skip("this machine's fallback does not hide /tmp (it says so in its gaps)")
    target = Path("/tmp") / f"gta-sandbox-escape-{uuid.uuid4().hex}"
    solve(
        worker,
        f"""
        def solution():
            try:
                open({str(target)!r}, 'w').write('escaped')
            except OSError as exc:
                return 'refused: ' + type(exc).__name__
            return 'wrote'
        """,
    )
    # bubblewrap shows an unwritable /tmp; the root fallback a private, unwritable tmpfs
    assert not target.exists()


class BrokenSandbox(Sandbox):
    """A sandbox whose isolation starts its worker under a program that does not exist."""

    def isolation(self, mode=None):
        return Isolation("rlimit", lambda s: ["/nonexistent/prefix"], None, False, ("x",))


def test_a_worker_that_cannot_start_is_an_infrastructure_error():
    running = SandboxWorker(BrokenSandbox())
    with pytest.raises(GtaInfrastructureError, match="could not be started"):
        running.run("calculator", "1+1")
    running.close()
    assert not issubclass(GtaInfrastructureError, GtaToolError)


def test_bubblewrap_required_but_missing_is_a_usage_error():
    without = Sandbox(machine=Machine(which=lambda name: None))
    with pytest.raises(GtaUsageError) as info:
        without.configure("bubblewrap")
    message = str(info.value)
    assert "--gta-sandbox=bubblewrap: bwrap is not installed" in message
    assert "apt-get install bubblewrap" in message
    assert "--gta-sandbox=rlimit" in message


def test_fallback_says_what_is_not_isolated():
    # A user's machine where no namespace can be made and the kernel has no Landlock.
    machine = Machine(euid=lambda: 1000, runs=lambda command: False, landlock_abi=lambda: 0)
    plain = Sandbox("rlimit", machine=machine).isolation()
    assert plain.kind == "rlimit"
    assert not plain.pid_namespace
    assert "network" in plain.gaps
    assert "processes that leave the call's process group outlive it" in plain.gaps
    assert "NOT isolated: network" in plain.summary()


def test_a_path_hidden_after_the_probe_is_hidden_from_workers_started_later(tmp_path):
    """The local backend may hide the run's dataset after the sandbox was probed."""
    site = tmp_path / "site-packages"
    (site / "run_data").mkdir(parents=True)
    (site / "sympy").mkdir()
    # A machine that has bubblewrap and runs every probe: nothing here starts a process.
    machine = Machine(which=lambda name: f"/usr/bin/{name}", runs=lambda command: True)
    host = Sandbox("bubblewrap", python=(str(site),), machine=machine)
    prefix = host.isolation().prefix
    assert str(site / "run_data") not in prefix("")
    host.hide(site / "run_data")
    command = prefix("")
    assert command[command.index(str(site / "run_data")) - 1] == "--tmpfs"
    assert str(site / "sympy") in host.landlock_paths()
    assert str(site / "run_data") not in host.landlock_paths()


def test_an_unknown_mode_is_a_usage_error():
    with pytest.raises(GtaUsageError, match="--gta-sandbox=docker: choose auto, bubblewrap"):
        Sandbox("docker")  # type: ignore[arg-type]
    with pytest.raises(GtaUsageError, match="--gta-sandbox=docker"):
        Sandbox().configure("docker")  # type: ignore[arg-type]


# -- Python in a virtualenv under /tmp ------------------------------------------------------------


def tmp_venv(where: Path) -> Path:
    """A virtualenv under /tmp whose packages are this environment's (through a .pth file)."""
    import site
    import venv

    assert str(where).startswith("/tmp/"), where
    venv.create(where, with_pip=False, symlinks=True)
    packages = [p for p in site.getsitepackages() if Path(p).is_dir()]
    lines = [f"import site; site.addsitedir({p!r})" for p in packages]
    (site_dir,) = where.glob("lib/python3*/site-packages")
    (site_dir / "_outer_env.pth").write_text("\n".join(lines) + "\n")
    return where / "bin" / "python"


@pytest.fixture(scope="module")
def venv_python(tmp_path_factory):
    return tmp_venv(tmp_path_factory.mktemp("venv-under-tmp"))


PROBE = """
import json, sys, textwrap
sys.path.insert(0, sys.argv[1])
from tool_backends.sandbox import Sandbox, SandboxWorker
host = Sandbox()
iso = host.configure(sys.argv[2])
worker = SandboxWorker(host)
code = "import sympy\\ndef solution():\\n    return sympy.sqrt(8)"
print(json.dumps({"kind": iso.kind, "prefix": sys.prefix, "text": worker.run("solver", code).text}))
worker.close()
"""


def probe(venv_python: Path, mode: str) -> dict:
    """Configure ``mode`` and run one Solver call, from the venv's Python."""
    require("bubblewrap")
    out = subprocess.run(
        [str(venv_python), "-c", PROBE, str(ROOT), mode],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def test_bubblewrap_works_with_python_in_a_venv_under_tmp(venv_python):
    result = probe(venv_python, "bubblewrap")
    assert result["prefix"].startswith("/tmp/")
    assert result == {**result, "kind": "bubblewrap", "text": "2*sqrt(2)"}


def test_auto_does_not_silently_degrade_under_tmp(venv_python):
    """The old probe failed whenever Python lived under /tmp and quietly used the fallback."""
    assert probe(venv_python, "auto")["kind"] == "bubblewrap"


def test_bubblewrap_mounts_parents_before_children(tmp_path):
    venv = tmp_path / "a" / "venv"
    (venv / "lib").mkdir(parents=True)
    tree = Sandbox(python=(str(venv / "lib"), str(venv))).tree()
    command = bwrap_command(tree, "/scratch", Machine())
    tmpfs = command.index("/tmp")
    assert command[tmpfs - 1] == "--tmpfs"
    binds = [command[i + 2] for i, arg in enumerate(command) if arg == "--ro-bind"]
    assert binds.index(str(venv)) < binds.index(str(venv / "lib"))
    dirs = [command[i + 1] for i, arg in enumerate(command) if arg == "--dir"]
    assert dirs.index(str(venv.parent.parent)) < dirs.index(str(venv.parent))
    assert str(venv) not in dirs  # bound itself
    assert "--clearenv" in command
    assert command.index("--dir") > tmpfs


ANSWER = "gt-answer-5d1e-planted-in-site-packages"
HIDDEN_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
from tool_backends.sandbox import Sandbox, SandboxWorker
host = Sandbox()
host.hide(sys.argv[4])
iso = host.configure(sys.argv[2])
worker = SandboxWorker(host)
code = '''
import os, sympy
def solution():
    found = []
    for here, _, files in os.walk(%r):
        for name in files:
            try:
                with open(os.path.join(here, name), 'rb') as handle:
                    if %r in handle.read():
                        found.append(os.path.join(here, name))
            except OSError:
                pass
    return repr([str(sympy.sqrt(8)), found])
''' % (sys.argv[3], sys.argv[5].encode())
print(json.dumps({"mode": iso.describe()["mode"], "text": worker.run("solver", code).text}))
worker.close()
"""


@pytest.mark.parametrize("mode", ["bubblewrap", "rlimit"])
def test_datasets_inside_the_python_paths_are_hidden(mode, tmp_path_factory):
    """The bundled sample's installed copy, any dataset and the run's own, under site-packages."""
    if mode == "bubblewrap":
        require("bubblewrap")
    python = tmp_venv(tmp_path_factory.mktemp("venv-with-data"))
    (site_packages,) = python.parent.parent.glob("lib/python3*/site-packages")
    planted = {
        "pytest_gta/_sample/dataset.json": ANSWER,  # an installed pytest-gta's sample
        "pytest_gta/__init__.py": ANSWER,  # and the rest of that package
        "someone_elses/gta/dataset.json": ANSWER,  # any GTA dataset
        "run_data/answers.txt": ANSWER,  # the run's dataset (hidden by name)
    }
    for relative, text in planted.items():
        (site_packages / relative).parent.mkdir(parents=True, exist_ok=True)
        (site_packages / relative).write_text(text)
    hidden = str(site_packages / "run_data")
    out = subprocess.run(
        [str(python), "-c", HIDDEN_PROBE, str(ROOT), mode, str(site_packages), hidden, ANSWER],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    if mode == "rlimit" and result["mode"] != "namespaces":
        pytest.skip(f"this machine cannot build the rlimit sandbox's tree ({result['mode']})")
    sqrt, found = json.loads(result["text"].replace("'", '"'))
    assert sqrt == "2*sqrt(2)"  # the venv's packages import
    assert found == []


def imported(nodes) -> set[str]:
    """The top-level package of every import statement among ``nodes``."""
    names = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add((node.module or "").split(".")[0])
    return names


def test_worker_source_runs_on_its_own():
    """The worker program needs nothing from this checkout (the sandbox does not show it).

    At module level it imports the standard library only; inside functions, also the packages
    a call uses (which may be missing), never this project.
    """
    tree = ast.parse(sandbox_pool.worker_source())
    compile(tree, "<worker>", "exec")
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    in_functions = {id(node) for function in functions for node in ast.walk(function)}
    nodes = list(ast.walk(tree))
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    assert imported(n for n in nodes if id(n) not in in_functions) <= stdlib
    in_calls = imported(n for n in nodes if id(n) in in_functions)
    assert in_calls <= stdlib | {"sympy", "matplotlib", "PIL"}


# -- the pool: calls from many threads at once -----------------------------------------------------

INTERVAL = """
import time
def solution():
    start = time.monotonic()
    time.sleep({sleep})
    return f'{{start}} {{time.monotonic()}}'
"""


@pytest.fixture(params=["bubblewrap", "rlimit"])
def pool(request, sandboxes):
    """A fresh pool of three workers in each sandbox mode."""
    if request.param == "bubblewrap":
        require("bubblewrap")
    running = SandboxPool(sandboxes(request.param), 3)
    yield running
    running.close()


def interval(pool: SandboxPool, sleep: float) -> tuple[float, float]:
    """(start, end) of a call that sleeps, on CLOCK_MONOTONIC, which the sandbox shares."""
    text = pool.run("solver", INTERVAL.format(sleep=sleep), timeout=30).text or ""
    start, end = (float(part) for part in text.split())
    return start, end


def test_calls_from_threads_run_at_once(pool):
    pool.warm()
    with ThreadPoolExecutor(3) as threads:
        spans = list(threads.map(lambda _: interval(pool, 2), range(3)))
    # Every call started before any ended: the three ran at the same time.
    assert max(start for start, _ in spans) < min(end for _, end in spans)
    assert len(pool.workers()) == 3


def test_a_pool_of_one_serialises_calls():
    host = Sandbox("rlimit", max_workers=1)
    single = host.pool()
    assert single.size == 1
    try:
        with ThreadPoolExecutor(2) as threads:
            first, second = sorted(threads.map(lambda _: interval(single, 0.5), range(2)))
        assert first[1] <= second[0]
        assert len(single.workers()) == 1
    finally:
        host.close()


def test_workers_start_only_when_calls_overlap(pool):
    for n in range(3):
        assert pool.run("calculator", f"{n} + 1").text == f"{n + 1}"
    assert len(pool.workers()) == 1


def _process_table() -> dict[int, tuple[int, bytes]]:
    """pid -> (parent pid, command line) of every process now visible in /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        table[int(entry)] = (int(stat.rsplit(")", 1)[1].split()[1]), cmdline)
    return table


def descendants(root: int) -> set[int]:
    """Every process below ``root`` now (bubblewrap, its init, the worker, a call's leftovers)."""
    table = _process_table()
    below = {root}
    while True:
        more = {pid for pid, (parent, _) in table.items() if parent in below} - below
        if not more:
            return below - {root}
        below |= more


def serving(root: int) -> bool:
    """Whether the worker started as ``root`` is running a call now.

    The call runs in a fork of the worker's Python (``python -I -c <worker>``), so it is the
    descendant of ``root`` whose command line is its parent's (bubblewrap forks itself too).
    """
    table = _process_table()
    return any(
        table[pid][1] == table[table[pid][0]][1] and b"\0-I\0-c\0" in table[pid][1]
        for pid in descendants(root)
        if pid in table and table[pid][0] in table
    )


def wait_for(condition, what: str) -> None:
    """Poll ``condition`` until it holds; a generous deadline turns a hang into a failure."""
    deadline = time.monotonic() + 120
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"  # bound: catches a hang
        time.sleep(0.05)


def test_a_worker_outlives_the_thread_that_started_it(pool):
    """bubblewrap's --die-with-parent watches the starting thread: an episode's thread ends."""
    starter = threading.Thread(target=pool.warm, args=(1,))
    starter.start()
    starter.join()
    (only,) = pool.workers()
    assert only._process is not None
    pid = only._process.pid
    assert pool.run("calculator", "6 * 7").text == "42"
    assert only._process is not None
    assert only._process.pid == pid


def test_a_dead_worker_fails_only_its_own_call(pool):
    pool.warm(1)  # started, so that the only fork of its Python is the call's
    (first,) = pool.workers()
    with ThreadPoolExecutor(2) as threads:
        doomed = threads.submit(interval, pool, 60)
        wait_for(lambda: first._process is not None and serving(first._process.pid), "a call")
        survivor = threads.submit(interval, pool, 2)
        wait_for(lambda: len(pool.workers()) == 2, "the second worker")
        assert first._process is not None
        os.killpg(first._process.pid, signal.SIGKILL)
        with pytest.raises(GtaInfrastructureError, match="stopped answering"):
            doomed.result()
        start, end = survivor.result()
    assert start < end
    # The slot of the dead worker is usable again: its next call restarts it.
    assert pool.run("calculator", "2 * 21").text == "42"


def test_a_call_over_its_time_limit_leaves_a_concurrent_call_alone(pool):
    pool.warm(2)
    pids = {w._process.pid for w in pool.workers() if w._process is not None}
    loop = "def solution():\n    while True:\n        pass"
    with ThreadPoolExecutor(2) as threads:
        spinning = threads.submit(pool.run, "solver", loop, 2)
        sleeping = threads.submit(interval, pool, 3)
        with pytest.raises(GtaToolError, match="time limit"):
            spinning.result()
        start, end = sleeping.result()
    assert start < end
    # The worker enforces the limit by killing the call's child; no worker was restarted.
    assert {w._process.pid for w in pool.workers() if w._process is not None} == pids


def test_closing_the_pool_stops_every_worker(pool):
    pool.warm(2)
    processes = [w._process for w in pool.workers()]
    assert len(processes) == 2
    assert all(p is not None and p.poll() is None for p in processes)
    pool.close()
    assert all(p is not None and p.poll() is not None for p in processes)
    assert pool.workers() == ()
    assert pool.run("calculator", "1 + 1").text == "2"


def test_pool_size_defaults_to_the_cores_and_obeys_the_environment(monkeypatch):
    env = sandbox_pool.WORKERS_ENV
    monkeypatch.delenv(env, raising=False)
    cores = len(os.sched_getaffinity(0))
    assert sandbox_pool.pool_size() == max(1, min(cores, sandbox_pool.MAX_WORKERS))
    monkeypatch.setenv(env, "7")
    assert sandbox_pool.pool_size() == 7
    assert Sandbox().pool().size == 7
    assert Sandbox(max_workers=2).pool().size == 2
    for bad in ("0", "-1", "four", "2.5"):
        monkeypatch.setenv(env, bad)
        with pytest.raises(GtaUsageError, match=f"{env}=.*1 or more"):
            Sandbox().configure("rlimit")


@pytest.mark.parametrize("payload", [b"[1]", b"{not json", b'"text"', b"\xff"])
def test_a_frame_on_the_workers_pipe_that_is_no_reply_is_the_models(payload):
    """Only model code that reached the worker's pipe could write it: a tool error, no crash."""
    echo = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdout.buffer.write(sys.stdin.buffer.read())"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert echo.stdin is not None
    echo.stdin.write(sandbox_worker.HEADER.pack(len(payload)) + payload)
    echo.stdin.close()
    try:
        assert sandbox_pool.receive(echo, 30) == sandbox_pool.MALFORMED
    finally:
        echo.wait()
        assert echo.stdout is not None
        echo.stdout.close()


def test_landlock_allows_a_directory_entry_by_entry_around_what_it_hides(tmp_path):
    site = tmp_path / "site-packages"
    for each in ("a", "b/c", "b/pytest_gta/_sample"):
        (site / each).mkdir(parents=True)
    (site / "b" / "module.py").write_text("")
    hidden = site / "b" / "pytest_gta"
    tree = sandbox_tree.Tree(((str(site), str(site)), ("/usr", "/usr")), (), (), (str(hidden),))
    assert sandbox_tree.landlock_paths(tree) == (
        str(site / "a"),
        str(site / "b" / "c"),
        str(site / "b" / "module.py"),
        "/usr",
    )

"""The agent's warm sandbox (issue 38): one per run, each case forked into namespaces of its own.

A sandbox per case cost a sandbox program, a Python, its imports and the agent module's import
every time (about 280 ms a command, 540 ms a callable). The jail now starts one sandbox per run
and forks each case from it. These tests run the jail directly: a callable is imported once,
cases see only their own inputs, scratch and processes, a timeout ends everything a case
started, and where the warm sandbox cannot start (a bubblewrap that refuses capabilities) each
case gets a sandbox of its own again, the run saying why.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_gta.jail import Job, JobOutcome
from tests.helpers.optional import require
from tests.helpers.processes import processes_named
from tool_backends import agent_cases
from tool_backends.agent_jail import WARM, AgentJail, with_binds
from tool_backends.agent_warm import CaseInputs
from tool_backends.sandbox_machine import Machine
from tool_backends.sandbox_mounts import bwrap_command, namespace_script
from tool_backends.sandbox_tree import build_tree

QUERY = {"case_id": "e2e-0", "query_id": "0", "query": "", "images": [], "tools": [], "model": ""}
ENV = {"PATH": "/usr/bin:/bin"}


@pytest.fixture
def bubblewrap() -> None:
    require("bubblewrap")


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    """A dataset any user can read: answers beside two cases' images."""
    root = tmp_path / "data"
    (root / "image").mkdir(parents=True)
    (root / "dataset.json").write_text(json.dumps({"0": {"gt_answer": "only-in-the-data"}}))
    (root / "image" / "a.jpg").write_bytes(b"image a")
    (root / "image" / "b.jpg").write_bytes(b"image b")
    for path in [tmp_path, root, root / "image", *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return root


def command(directory: Path, script: str, *words: str) -> tuple[str, ...]:
    """``python FILE WORDS``, the script in a file (its braces are no placeholders)."""
    path = directory / "agent.py"
    path.write_text(textwrap.dedent(script))
    path.chmod(0o644)
    return (sys.executable, str(path), *words)


def run(jail: AgentJail, job: Job) -> JobOutcome:
    ran = jail.run(job)
    assert not ran.timed_out
    return ran


def test_a_callable_is_imported_once_for_every_case(tmp_path, bubblewrap):
    module = tmp_path / "agent_once.py"
    module.write_text(
        "import secrets\nTOKEN = secrets.token_hex(8)\ndef agent(task):\n    return TOKEN\n"
    )
    module.chmod(0o644)
    spec = {"file": str(module), "attr": "agent", "path": [], "show": [str(module)]}
    spec["task_fields"] = ["case_id", "query_id", "text", "image_paths", "tools", "workdir"]
    jail = AgentJail(hidden=(), network="case")
    try:
        answers = {
            run(jail, Job("callable", QUERY, ENV, 60, spec=spec)).result["result"]["answer"]
            for _ in range(3)
        }
        assert len(answers) == 1
        assert WARM in jail.isolation.guarantees
        assert jail.isolation.attempts == ()
    finally:
        jail.close()


def test_a_module_that_starts_threads_at_import_is_imported_per_case(tmp_path, bubblewrap):
    module = tmp_path / "agent_threads.py"
    module.write_text(
        "import secrets, threading, time\nTOKEN = secrets.token_hex(8)\n"
        "threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n"
        "def agent(task):\n    return TOKEN\n"
    )
    module.chmod(0o644)
    spec = {"file": str(module), "attr": "agent", "path": [], "show": [str(module)]}
    spec["task_fields"] = ["case_id"]
    jail = AgentJail(hidden=(), network="case")
    try:
        answers = [
            run(jail, Job("callable", QUERY, ENV, 60, spec=spec)).result["result"]["answer"]
            for _ in range(2)
        ]
        assert answers[0] != answers[1]
        assert any("left 1 thread(s) running at import" in a for a in jail.isolation.attempts)
        assert jail.isolation.isolated
    finally:
        jail.close()


LOOK = """
import json, os, sys, time
mine = os.environ["GTA_CASE_ID"]
open(os.path.join(os.environ["HOME"], "mine-" + mine), "w").write("x")
import subprocess
name = "gta-warm-" + mine
sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", name])
time.sleep(1.5)
seen = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            seen.append(open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace"))
        except OSError:
            pass
inputs = sys.argv[1]
listing = sorted(os.listdir(inputs)) if os.path.isdir(inputs) else None
answers = os.path.exists(os.path.join(os.path.dirname(inputs), "dataset.json"))
print(json.dumps({
    "scratch": sorted(n for n in os.listdir(os.environ["HOME"]) if n.startswith("mine-")),
    "others": sorted(c for c in seen if "gta-warm-" in c and mine not in c),
    "own": any("gta-warm-" + mine in c for c in seen),
    "inputs": listing,
    "answers": answers,
    "read": open(os.path.join(inputs, sys.argv[2]), "rb").read().decode(),
}))
"""


@pytest.mark.slow  # 3 s in a full run: slow by cost (issue 39)
def test_cases_see_their_own_inputs_scratch_and_processes_only(dataset, bubblewrap):
    jail = AgentJail(hidden=(str(dataset),), network="case")
    got: dict[str, dict] = {}

    def case(name: str, image: str) -> None:
        query = {**QUERY, "case_id": name}
        job = Job(
            "command",
            query,
            {**ENV, "GTA_CASE_ID": name},
            60,
            argv=command(dataset.parent, LOOK, str(dataset / "image"), image),
            show=(str(dataset / "image" / image),),
        )
        ran = run(jail, job)
        assert ran.exit_status == 0, ran.stderr_tail
        got[name] = json.loads(ran.stdout)

    try:
        threads = [
            threading.Thread(target=case, args=("e2e-1", "a.jpg")),
            threading.Thread(target=case, args=("e2e-2", "b.jpg")),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert WARM in jail.isolation.guarantees
    finally:
        jail.close()
    assert got["e2e-1"] == {
        "scratch": ["mine-e2e-1"],
        "others": [],
        "own": True,
        "inputs": ["a.jpg"],
        "answers": False,
        "read": "image a",
    }
    assert got["e2e-2"]["inputs"] == ["b.jpg"]
    assert got["e2e-2"]["others"] == []
    assert got["e2e-2"]["read"] == "image b"
    assert processes_named("gta-warm-e2e-") == []


@pytest.mark.slow  # 3 s in a full run: slow by cost (issue 39)
def test_a_timeout_ends_the_case_and_all_it_started(tmp_path, bubblewrap):
    marker = f"gta-warm-timeout-{os.getpid()}"
    jail = AgentJail(hidden=(), network="case")
    try:
        sleeper = f"{sys.executable} -c 'import time; time.sleep(600)' {marker}"
        argv = ("sh", "-c", f"setsid {sleeper} & {sleeper}")
        ran = jail.run(Job("command", QUERY, ENV, 2, argv=argv))
        assert ran.timed_out
        assert processes_named(marker) == []
        # The warm sandbox serves the next case as before.
        again = run(jail, Job("command", QUERY, ENV, 60, argv=("echo", "after")))
        assert again.stdout.strip() == "after"
    finally:
        jail.close()


@pytest.mark.parametrize("warm", [True, False], ids=["warm", "per-case"])
def test_the_agent_cannot_end_its_case_init(warm, bubblewrap):
    """Signals to PID 1 would turn the agent's case into the harness's error: none arrives."""
    script = (
        "import os, signal, time\n"
        "for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):\n"
        "    try:\n"
        "        os.kill(1, number)\n"
        "    except PermissionError:\n"  # a sandbox per case: its init is another uid's
        "        pass\n"
        "time.sleep(0.5)\n"
        "print('still here')\n"
    )
    jail = AgentJail(hidden=(), network="case", warm=warm)
    try:
        ran = run(jail, Job("command", QUERY, ENV, 60, argv=(sys.executable, "-c", script)))
    finally:
        jail.close()
    assert ran.exit_status == 0, ran.stderr_tail
    assert ran.stdout.strip() == "still here"


@pytest.mark.slow  # 3 s in a full run: slow by cost (issue 39)
def test_without_a_warm_sandbox_each_case_gets_one_of_its_own(tmp_path, dataset, bubblewrap):
    """A bubblewrap that refuses --cap-add (a set-uid one, run by a user): the run says why."""
    real = shutil.which("bwrap")
    assert real is not None
    fake = tmp_path / "bwrap"
    fake.write_text(
        '#!/bin/sh\nfor word in "$@"; do\n  if [ "$word" = --cap-add ]; then\n'
        "    echo 'bwrap: --cap-add in setuid mode can be used only by root' >&2; exit 1\n"
        f'  fi\ndone\nexec {real} "$@"\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    machine = Machine(which=lambda name: str(fake) if name == "bwrap" else shutil.which(name))
    jail = AgentJail(hidden=(str(dataset),), network="case", machine=machine)
    try:
        job = Job(
            "command",
            QUERY,
            {**ENV, "GTA_CASE_ID": "e2e-1"},
            60,
            argv=command(dataset.parent, LOOK, str(dataset / "image"), "a.jpg"),
            show=(str(dataset / "image" / "a.jpg"),),
        )
        ran = run(jail, job)
        seen = json.loads(ran.stdout)
        isolation = jail.isolation
    finally:
        jail.close()
    assert seen["read"] == "image a"
    assert seen["answers"] is False
    assert isolation.isolated
    assert WARM not in isolation.guarantees
    (said,) = isolation.attempts
    assert said.startswith("warm sandbox: ")
    assert "--cap-add in setuid mode" in said
    assert said.endswith("each case gets a sandbox of its own")


# -- units ------------------------------------------------------------------------------------


def test_a_hidden_path_inside_another_is_covered_with_it(tmp_path):
    """The bundled sample of an installed package lies in the package the tree hides."""
    site = tmp_path / "site-packages"
    (site / "pytest_gta" / "_sample" / "image").mkdir(parents=True)
    (site / "pytest_gta" / "_sample" / "dataset.json").write_text("{}")
    (site / "other").mkdir()
    tree = build_tree((str(site),), hidden=(str(site / "pytest_gta" / "_sample"),))
    assert tree.hidden == (str(site / "pytest_gta"),)


def test_an_agent_file_inside_the_hidden_package_shows_alone(tmp_path, bubblewrap):
    """A shipped example agent (``example:cli``) lies inside the installed package: its file
    shows, the package around it stays hidden (once the whole package showed, issue 38)."""
    site = tmp_path / "site-packages"
    script = site / "pytest_gta" / "_examples" / "cli_agent.py"
    script.parent.mkdir(parents=True)
    script.write_text("the agent's own code\n")
    (site / "pytest_gta" / "__init__.py").write_text("the package")
    for path in [tmp_path, *tmp_path.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    tree = build_tree((str(site), str(script)))
    assert tree.hidden == (str(site / "pytest_gta"),)
    machine = Machine()
    look = f"cat {script}; ls {site / 'pytest_gta'}; cat {site / 'pytest_gta' / '__init__.py'}"
    words = [*bwrap_command(tree, "/scratch", machine), "/bin/sh", "-c", look]
    done = subprocess.run(words, capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.splitlines() == ["the agent's own code", "_examples"], done.stderr
    assert "No such file" in done.stderr
    script_text = namespace_script(tree, machine)
    made = script_text.index(f'mkdir -m 0755 -p "$R"{script.parent}')  # traversable
    assert script_text.index("gta-hidden") < made < script_text.index(f"mount --rbind {script}")


def test_inputs_inside_a_hidden_path_are_bound_after_its_tmpfs(tmp_path):
    site = tmp_path / "site-packages"
    image = site / "pytest_gta" / "_sample" / "image" / "a.jpg"
    image.parent.mkdir(parents=True)
    image.write_bytes(b"a")
    base = build_tree((str(site),))
    tree = with_binds(base, [(str(image), str(image))])
    words = bwrap_command(tree, "/scratch", Machine(which=lambda name: f"/usr/bin/{name}"))
    cover = words.index(str(site / "pytest_gta"))  # the tmpfs over the package
    assert words[cover - 1] == "--tmpfs"
    assert words[cover - 5 : cover - 3] == ["--perms", "0755"]  # it holds an input: traversable
    bound = words.index(str(image), cover + 1)
    assert words[bound - 1] == "--ro-bind"
    assert words.index("--remount-ro", bound) > bound
    script = namespace_script(tree, Machine(which=lambda name: f"/usr/bin/{name}"))
    assert script.index(f"mount --rbind {image}") > script.index("gta-hidden")


@pytest.mark.parametrize(
    ("paths", "placed"),
    [
        (["image/a.jpg"], [("image/a.jpg",)]),
        (["image/a.jpg", "image/a.jpg"], [("image/a.jpg",)]),
        (["../outside.jpg"], None),
        (["image/missing.jpg"], None),
        (["image"], None),
    ],
)
def test_case_inputs_are_placed_under_a_root_or_not_at_all(tmp_path, paths, placed):
    root = tmp_path / "data"
    (root / "image").mkdir(parents=True)
    (root / "image" / "a.jpg").write_bytes(b"a")
    (tmp_path / "outside.jpg").write_bytes(b"x")
    found = CaseInputs.place([str(root / p) for p in paths], [str(root)])
    if placed is None:
        assert found is None
    else:
        assert [(rel,) for _, rel, _ in found.entries] == placed
        assert all(d == str(root) for d, _, _ in found.entries)


def test_an_input_linked_from_elsewhere_is_placed_where_the_case_is_told_it_is(tmp_path):
    root = tmp_path / "data"
    (root / "image").mkdir(parents=True)
    target = tmp_path / "store" / "real.jpg"
    target.parent.mkdir()
    target.write_bytes(b"r")
    (root / "image" / "a.jpg").symlink_to(target)
    found = CaseInputs.place([str(root / "image" / "a.jpg")], [str(root)])
    assert found is not None
    assert found.entries == ((str(root), "image/a.jpg", str(target)),)


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["/data", "relative", "/"]),
            st.text(alphabet="ab./", max_size=12),
            st.integers(-3, 5),
        ),
        max_size=4,
    )
)
def test_a_case_lays_out_no_input_outside_its_directory(inputs):
    """Whatever the host's request says, an input lands inside its own directory or nowhere."""
    try:
        grouped = agent_cases._by_directory(inputs, 4)
    except ValueError:
        return
    for directory, files in grouped.items():
        assert os.path.isabs(directory)
        for relative, index in files:
            assert 0 < index < 4
            joined = os.path.normpath(os.path.join(directory, relative))
            assert joined.startswith(directory.rstrip("/") + "/")

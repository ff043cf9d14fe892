"""Model-written code against the sandbox, in every mode, as root and as an unprivileged user.

Each run starts ``tests/helpers/sandbox_probe.py`` as its own process (the pytest process of a run,
with secrets in its initial environment), which runs real Solver calls that read for the
reference answers, walk ``/`` for any GTA dataset or this checkout, read every
``/proc/*/environ`` for the secrets, signal the process that runs them, forge reply frames and
fill their scratch space. The answers and the secrets must appear in no call's output; where a
mode cannot hold (the fallback without namespaces), its report says it is not isolated.

As root, the unprivileged runs use a fresh uid (:data:`USER_UID`, no account needed) through
``setpriv``, in a private mount namespace where any directory above Python or this checkout
that others cannot enter (``/root`` under pyenv) is opened, as a user's own Python would be.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from tests.helpers.as_user import USER_UID, run_json
from tests.helpers.gta_run import FAST_SIM
from tests.helpers.optional import require
from tests.helpers.paths import HELPERS
from tool_backends import sandbox_worker
from tool_backends.sandbox import Sandbox
from tool_backends.sandbox_isolation import (
    FILES_READABLE,
    PROCESSES_REACHABLE,
    UNREACHABLE_PYTHON,
)
from tool_backends.sandbox_mounts import SCRATCH_BYTES

pytestmark = pytest.mark.slow

PROBE = HELPERS / "sandbox_probe.py"
ANSWER = "gt-answer-7f3a9c-only-in-the-dataset"
SECRETS = {
    "OPENAI_API_KEY": "sk-proj-sandbox-attack-1b2c3d",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-sandbox-attack-4e5f6a",
    "MY_SERVICE_KEY": "my-service-key-sandbox-attack-7b8c9d",
}


@pytest.fixture(scope="module")
def dataset():
    """A GTA dataset with an answer, readable by any user: only the sandbox may hide it."""
    root = Path(tempfile.mkdtemp(prefix="gta-attack-data-"))
    root.chmod(0o755)
    data = root / "dataset.json"
    data.write_text(json.dumps({"0": {"gt_answer": {"whitelist": [[ANSWER]]}}}))
    (root / "toolmeta.json").write_text("{}")
    for each in (data, root / "toolmeta.json"):
        each.chmod(0o644)
    yield data
    shutil.rmtree(root)


def probe(mode: str, data: Path, *, user: bool, plain: bool = False, landlock: bool = True) -> dict:
    """Run the attacks in ``mode`` and return what each call gave back."""
    if mode == "bubblewrap":
        require("bubblewrap")
    argv = [sys.executable, str(PROBE), mode, str(data), *(["plain"] if plain else [])]
    argv += [] if landlock else ["no-landlock"]
    return run_json(argv, user=user, env=SECRETS)


def assert_nothing_leaked(result: dict) -> None:
    text = json.dumps(result)
    assert ANSWER not in text
    for value in SECRETS.values():
        assert value not in text


FORGED = f"GtaToolError: {sandbox_worker.FORGED}"


@pytest.mark.parametrize("user", [False, True], ids=["root", "user"])
@pytest.mark.parametrize("mode", ["bubblewrap", "rlimit"])
def test_isolated_modes_hold(mode, user, dataset):
    result = probe(mode, dataset, user=user)
    info = result["isolation"]
    if not info["isolated"]:
        pytest.skip(f"this machine cannot build the {mode} sandbox's tree: {info['summary']}")
    assert result["uid"] == (USER_UID if user and os.geteuid() == 0 else os.getuid())
    assert_nothing_leaked(result)
    # Ordinary code works the same in every mode: scores do not depend on the sandbox.
    assert result["statistics"] == "1.5 2*sqrt(2)"
    assert result["plot"] == "\x89PNG\r\n\x1a\n"
    assert result["calculator"] == "1.414"
    assert result["dataset"].startswith("GtaToolError: FileNotFoundError")
    assert result["walk"] == "[]"  # no dataset.json, no toolmeta.json, no checkout anywhere
    assert result["kill"] == "refused: ProcessLookupError"  # pytest is outside its PID namespace
    assert result["forge"] == FORGED
    # The worker is beyond the call's reach (root's, or PID 1 of the namespace): a call cannot
    # end it and turn its case into the harness's error.
    assert not result["kill_worker"].startswith("GtaInfrastructureError")
    # Nothing on the import path, /tmp, /dev/shm or / is writable, and root of a user
    # namespace cannot remount the view writable.
    wrote, remount = json.loads(result["write"].replace("'", '"'))
    assert wrote == []
    assert remount != 0
    assert "No space left on device" in result["fill"]
    calls, free, total = json.loads(result["after"].replace("'", '"'))
    assert [c for c in calls if c.startswith("call-")] == [c for c in calls if "call-" in c][:1]
    assert len([c for c in calls if c.startswith("call-")]) == 1  # the earlier calls' are gone
    assert free > 0.9 * total  # and the space they filled came back
    assert total <= SCRATCH_BYTES


@pytest.mark.parametrize("landlock", [True, False], ids=["landlock", "no-landlock"])
@pytest.mark.parametrize("user", [False, True], ids=["root", "user"])
def test_the_fallback_without_namespaces_says_what_it_cannot_hold(user, landlock, dataset):
    result = probe("rlimit", dataset, user=user, plain=True, landlock=landlock)
    info = result["isolation"]
    gaps = info["not_isolated"]
    assert info["mode"] == "plain"
    assert info["isolated"] is False  # its network is open
    assert "NOT isolated" in info["summary"]
    # Secrets stay closed whatever the kernel: pytest and the worker are non-dumpable.
    for value in SECRETS.values():
        assert value not in result["environ"]
    assert result["forge"] == FORGED
    assert result["fill"] == (f"GtaToolError: scratch space limit exceeded ({SCRATCH_BYTES} bytes)")
    assert [n for n in result["host_scratch"] if n.startswith("call-")] == []  # all removed
    if UNREACHABLE_PYTHON in gaps:  # root, Python under /root: a call's uid cannot import it
        assert "ModuleNotFoundError" in result["statistics"]
    else:
        assert result["statistics"] == "1.5 2*sqrt(2)"
        assert result["plot"] == "\x89PNG\r\n\x1a\n"
    abi = sandbox_worker.landlock_abi() if landlock else 0
    if abi >= 1:  # Landlock: nothing but the tree can be read
        assert_nothing_leaked(result)
        assert result["walk"] == "[]"
        assert result["dataset"] == "GtaToolError: PermissionError(13, 'Permission denied')"
        assert FILES_READABLE not in gaps
    else:
        assert ANSWER in result["dataset"]
        assert FILES_READABLE in gaps
    if abi >= sandbox_worker.LANDLOCK_SIGNAL_ABI or (os.geteuid() == 0 and not user):
        assert result["kill"].startswith("refused: ")
        assert not result["kill_worker"].startswith("GtaInfrastructureError")
    else:
        assert result["kill"] == "could signal pytest"  # the gap the report names
        assert PROCESSES_REACHABLE in gaps


PLAIN_CONFTEST = """
from tool_backends.sandbox import Machine, Sandbox, use_sandbox

# A machine without bubblewrap, unshare (user namespaces off, util-linux missing) or Landlock.
use_sandbox(Sandbox(machine=Machine(runs=lambda command: False, landlock_abi=lambda: 0)))
"""


@pytest.mark.parametrize("plain", [False, True], ids=["isolated", "not-isolated"])
def test_the_header_and_the_report_say_whether_results_are_isolated(pytester, plain):
    if plain:
        pytester.makeconftest(PLAIN_CONFTEST)
    else:
        here = Sandbox("rlimit").isolation()
        if not here.isolated:
            pytest.skip(f"this machine cannot build the rlimit sandbox's tree: {here}")
    result = pytester.runpytest_subprocess(
        "--gta-model=oracle",
        "--gta-data=sample",
        FAST_SIM,
        "--gta-mode=e2e",
        "--gta-ids=1",
        "--gta-tools=local,replay",
        "--gta-sandbox=rlimit",
        "--gta-report=gta.json",
        "-p",
        "no:randomly",
        timeout=300,
    )
    output = result.stdout.str()
    report = json.loads((pytester.path / "gta.json").read_text())
    ran = report["settings"]["sandbox"]
    assert ran["isolated"] is not plain, output[-3000:]
    warning = "gta: WARNING: model-written code (local) is NOT isolated"
    if plain:
        assert ran["mode"] == "plain"
        assert FILES_READABLE in ran["not_isolated"]
        assert warning in output
    else:
        assert ran == {**ran, "mode": "namespaces", "not_isolated": []}
        assert warning not in output

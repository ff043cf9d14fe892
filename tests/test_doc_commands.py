"""Every command of docs/agents.md and docs/workflow.md runs as written, from an empty directory.

Issue 38: users ``pip install`` the wheel and copy a page's commands into an empty directory or
their own repository, where no checkout exists (no ``examples/``, no ``tests/data/``). Each
command is taken from its page's code blocks (so a page and this file cannot drift: a command
added to a page without a test here fails :func:`test_every_documented_command_has_a_test`)
and run by bash exactly as written, with the virtualenv of the built wheel
(:mod:`tests.helpers.wheel_install`) activated, after the commands before it in its block.

What a command needs from outside is what a user would have, reached through the variables a
user sets, the command text unchanged: ``openai/gpt-4o`` is the perfect function-calling model
of ``tests/helpers/agent_model_server.py`` and the default ``openai/gpt-5.2`` judge the scripted
judge of ``tests/helpers/judge_server.py``, both on 127.0.0.1 through ``OPENAI_BASE_URL`` and
``OPENAI_API_KEY``; the Hugging Face Hub of ``pytest --gta-download=workflow`` is
``tests/helpers/hf_server.py`` through ``HF_ENDPOINT``. The install lines are the virtualenv
itself: the wheel's must name extras and packages the test's virtualenv has, the framework
virtualenvs' must be what ``.ci/run`` installs into the ones they are linked to
(``GTA_LANGGRAPH_PYTHON``, ``GTA_SMOLAGENTS_PYTHON``; ``require`` skips without them, or fails
in CI).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_gta.validation import load_dataset
from tests.helpers import optional
from tests.helpers.agent_model_server import AgentModelServer
from tests.helpers.hf_server import serve_hf_repo
from tests.helpers.judge_server import WORKFLOW_DATA, WORKFLOW_SAMPLE, JudgeServer
from tests.helpers.offline_agent import assert_scored_offline
from tests.helpers.optional import require
from tests.helpers.paths import ROOT
from tests.helpers.wheel_install import (
    DOCUMENTED_EXTRAS,
    DOCUMENTED_MODELS,
    activated,
    run_user_command,
    wheel_python,
)

pytestmark = pytest.mark.slow

PAGES = (ROOT / "docs" / "agents.md", ROOT / "docs" / "workflow.md")
#: What the wheel's virtualenv is installed with: the README's install (the official similarity
#: model) and every install line of the pages.
EXTRAS = DOCUMENTED_EXTRAS
MODELS = DOCUMENTED_MODELS
#: Seconds one command may take (a SmolLM2 agent run takes about a minute on 2 cores).
COMMAND_TIMEOUT = 900
KEY = "sk-doc-commands-test"


@dataclass(frozen=True)
class Doc:
    """A command of a page: its text, and the commands before it in its block."""

    page: str
    text: str
    before: tuple[str, ...]


def logical_commands(block: str) -> list[str]:
    """The commands of a shell block as bash reads them: continued lines and quotes joined.

    Comment lines (output shown as ``# ...``) are not commands.
    """
    commands: list[str] = []
    current = ""
    for line in block.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current = f"{current}\n{line}" if current else line
        if current.endswith("\\"):
            continue
        try:
            shlex.split(current, comments=True)
        except ValueError:  # a quote still open: the command goes on
            continue
        commands.append(current)
        current = ""
    assert not current, f"unfinished command: {current!r}"
    return commands


def documented() -> list[Doc]:
    """Every command of :data:`PAGES`' shell blocks (```` ```bash ```` or untagged)."""
    found = []
    for page in PAGES:
        for block in re.findall(r"^```(?:bash)?\n(.*?)^```", page.read_text(), re.S | re.M):
            commands = logical_commands(block)
            for index, text in enumerate(commands):
                found.append(Doc(page.name, text, tuple(commands[:index])))
    return found


def words(text: str) -> list[str]:
    """The command's words as bash splits them (continuations, quotes, comments)."""
    return shlex.split(text.replace("\\\n", " "), comments=True)


def is_install(text: str) -> bool:
    """An install line: the virtualenv the test runs in stands for it (see the module doc)."""
    first = words(text)[:3]
    return (
        first[:2] == ["pip", "install"]
        or first == ["python3", "-m", "venv"]
        or (first[0].endswith("/bin/pip") and first[1] == "install")
    )


#: Each documented command (but install lines) and the test that runs it.
TESTS = {
    "python -m pytest_gta.examples": "examples",
    'cp "$(python -m pytest_gta.examples cli)" my_agent.py': "copy",
    "pytest --gta-model=openai/gpt-4o --gta-data=sample --gta-limit=3 --gta-tools=local,replay \\\n"
    "    --gta-agent-command='python my_agent.py {mcp_url} {query_file} {model_url} {model}'": (
        "gpt4o"
    ),
    "pytest --gta-model=openai/gpt-4o --gta-data=sample --gta-limit=3 --gta-tools=local,replay \\\n"
    "    --gta-agent=example:openai_agents": "gpt4o",
    "pytest --gta-model=openai/gpt-4o --gta-data=sample --gta-limit=3 --gta-tools=local,replay \\\n"
    "    --gta-agent-command=example:cli": "gpt4o",
    "pytest --gta-model=openai/gpt-4o --gta-data=sample --gta-limit=3 --gta-tools=local,replay \\\n"
    "    --gta-agent-command='.venv-langgraph/bin/python example:langgraph {mcp_url} "
    "{query_file} {model_url} {model}'": "gpt4o",
    "pytest --gta-model=openai/gpt-4o --gta-data=sample --gta-limit=3 --gta-tools=local,replay \\\n"
    "    --gta-agent-command='.venv-smolagents/bin/python example:smolagents {mcp_url} "
    "{query_file} {model_url} {model}'": "gpt4o",
    "pytest --gta-model=smollm2 --gta-data=sample --gta-ids=0 --gta-max-tokens=16 \\\n"
    "    --gta-agent=example:openai_agents": "smollm2",
    "pytest --gta-model=smollm2 --gta-data=sample --gta-ids=0 --gta-max-tokens=16 \\\n"
    "    --gta-agent-command=example:cli": "smollm2",
    "python -m pytest_gta.mcp --gta-data=sample --gta-tools=local,replay": "mcp",
    "pytest --gta-data=workflow-sample --gta-model=evalpack:sample \\\n"
    "       --gta-judge=openai/gpt-5.2 --junitxml=gta.xml": "judge",
    "pytest --gta-download=workflow              # fetch, unpack, check into "
    "data/gta_workflow_dataset": "download",
    "pytest --gta-data=workflow --gta-data-info  # its tasks, files, tools and checkpoint trees": (
        "data-info"
    ),
    "pytest --gta-data=workflow --gta-model=evalpack:PACK.json": "pack",
}
COMMANDS = [doc for doc in documented() if not is_install(doc.text)]
INSTALLS = [doc for doc in documented() if is_install(doc.text)]


def test_every_documented_command_has_a_test() -> None:
    """A command added to, changed in or removed from a page must change here too."""
    assert {doc.text for doc in COMMANDS} == set(TESTS)
    assert len(COMMANDS) == len(TESTS)  # each command once: its test's id is its text


def test_the_pages_have_the_commands_this_file_reads() -> None:
    """The reader itself: a block's continued lines and a quote over two lines are one command."""
    assert logical_commands("pytest a \\\n  b\n# out\necho 'x\ny'\n\npip install c\n") == [
        "pytest a \\\n  b",
        "echo 'x\ny'",
        "pip install c",
    ]
    assert len(documented()) == len(COMMANDS) + len(INSTALLS) >= 20


# -- the install lines ------------------------------------------------------------------------


@pytest.mark.parametrize("doc", INSTALLS, ids=lambda d: f"{d.page}:{d.text[:50]}")
def test_an_install_line_is_what_the_test_installs(doc: Doc) -> None:
    said = words(doc.text)
    if said[:3] == ["python3", "-m", "venv"]:
        assert said[3] in {".venv-langgraph", ".venv-smolagents"}, doc.text
        return
    if said[0].endswith("/bin/pip"):
        # The framework's own virtualenv: what .ci/run installs into the one the test links.
        venv = said[0].split("/")[0]
        ci = (ROOT / ".ci" / "run").read_text()
        lines = (ln.strip() for ln in ci.splitlines())
        line = next(ln for ln in lines if ln.startswith(f"{venv}/bin/python -m pip"))
        assert shlex.split(line)[5:] == said[2:], (line, doc.text)
        return
    packages = [w for w in said[2:] if not w.startswith("-")]
    for package in packages:
        match = re.fullmatch(r"pytest-gta\[([a-z,]+)\]", package)
        if match:
            assert set(match.group(1).split(",")) <= set(EXTRAS), doc.text
        else:
            assert package in MODELS, doc.text


# -- running them -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def user_python() -> Path:
    """The python of a fresh virtualenv holding the built wheel and what the pages install."""
    return wheel_python(EXTRAS, MODELS)


@pytest.fixture(scope="module")
def gpt_4o(
    user_python: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AgentModelServer]:
    """``openai/gpt-4o``: a perfect function-calling model on 127.0.0.1.

    It knows each query by its text and its images' absolute paths: those of the sample the
    wheel carries (``--gta-data=sample`` on a wheel install), found as the wheel finds it.
    """
    where = tmp_path_factory.mktemp("sample")
    found = run_user_command(
        user_python,
        "python -c 'from pytest_gta.dataset import bundled_sample_path as p; print(p())'",
        cwd=where,
    )
    sample = Path(found.stdout.strip())
    assert sample.is_relative_to(user_python.parent.parent), found
    with AgentModelServer(load_dataset(sample), served="gpt-4o") as server:
        yield server


def ids(kind: str) -> list[Doc]:
    return [doc for doc in COMMANDS if TESTS.get(doc.text) == kind]


def doc_id(doc: Doc) -> str:
    """The page and the command's end (where the commands of a block differ)."""
    said = " ".join(words(doc.text))
    return f"{doc.page}:{said if len(said) <= 70 else '...' + said[-70:]}"


def run_doc(
    python: Path, doc: Doc, where: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The commands before ``doc`` in its block, then ``doc``, as written.

    But installs (the virtualenv stands for them), the MCP server (it serves until Ctrl-C) and
    commands of ``doc``'s own kind (the SmolLM2 commands side by side do not need each other).
    """
    for text in doc.before:
        if not is_install(text) and TESTS.get(text) not in ("mcp", TESTS[doc.text]):
            done = run_user_command(python, text, cwd=where, env=env, timeout=COMMAND_TIMEOUT)
            assert done.returncode == 0, (text, done.stdout[-3000:], done.stderr[-3000:])
    return run_user_command(python, doc.text, cwd=where, env=env, timeout=COMMAND_TIMEOUT)


def link_framework_venvs(text: str, where: Path) -> None:
    """``.venv-langgraph`` or ``.venv-smolagents`` as a user made it: CI's, linked in ``where``."""
    for framework in ("langgraph", "smolagents"):
        if f".venv-{framework}/" in text:
            require(f"{framework}-venv")
            venv = Path(optional.venv_python(framework)).parent.parent
            (where / f".venv-{framework}").symlink_to(venv)


def summary(done: subprocess.CompletedProcess[str]) -> dict[str, int]:
    """pytest's last line as counts (``{"passed": 17}``)."""
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    return {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", last)}


def test_the_examples_listing_names_files_the_wheel_carries(user_python: Path, tmp_path: Path):
    (doc,) = ids("examples")
    done = run_doc(user_python, doc, tmp_path)
    assert done.returncode == 0, done.stderr
    site = user_python.parent.parent / "lib"
    files = [Path(p) for p in re.findall(r"^    file: +(\S+)$", done.stdout, re.M)]
    assert [f.name for f in files] == [
        "cli_agent.py",
        "openai_agents_agent.py",
        "langgraph_agent.py",
        "smolagents_agent.py",
        "pack.json",
    ]
    for file in files:
        assert file.is_file(), file
        assert file.is_relative_to(site), file
    shipped = files[0].read_bytes()
    assert shipped == (ROOT / "examples" / "cli_agent.py").read_bytes()
    assert list(tmp_path.iterdir()) == []  # nothing written where it ran


def test_copying_an_example_gives_the_shipped_file(user_python: Path, tmp_path: Path) -> None:
    (doc,) = ids("copy")
    done = run_doc(user_python, doc, tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "my_agent.py").read_bytes() == (ROOT / "examples/cli_agent.py").read_bytes()


@pytest.mark.parametrize("doc", ids("gpt4o"), ids=doc_id)
def test_an_agent_on_gpt_4o_solves_the_first_sample_cases(
    doc: Doc, user_python: Path, gpt_4o: AgentModelServer, tmp_path: Path
) -> None:
    """The agent examples as the page writes them, ``openai/gpt-4o`` served here."""
    link_framework_venvs(doc.text, tmp_path)
    gpt_4o.model.reset()
    env = {"OPENAI_BASE_URL": gpt_4o.url, "OPENAI_API_KEY": KEY}
    done = run_doc(user_python, doc, tmp_path, env)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-5000:]
    assert summary(done) == {"passed": 3}, out[-3000:]
    assert gpt_4o.model.unknown == 0
    assert gpt_4o.model.calls >= 3  # every case asked the model, through the proxy
    assert "gpt-4o [agent " in done.stdout
    assert KEY not in out
    assert_isolated(done.stdout)


@pytest.mark.parametrize("doc", ids("smollm2"), ids=doc_id)
def test_an_agent_on_the_bundled_smollm2_runs_offline(
    doc: Doc, user_python: Path, tmp_path: Path
) -> None:
    """No network, no key: a 135M model fails the case, but it runs and is scored.

    The command as written; its report is asked for through ``PYTEST_ADDOPTS`` (which a user's
    shell may set as well) and checked as tests/test_examples.py checks the other examples'.
    """
    report = tmp_path / "offline-report.json"
    done = run_doc(user_python, doc, tmp_path, {"PYTEST_ADDOPTS": f"--gta-report={report}"})
    out = done.stdout + done.stderr
    assert done.returncode in (0, 1), out[-5000:]
    counts = summary(done)
    assert counts.get("passed", 0) + counts.get("failed", 0) == 1, out[-3000:]
    assert "error" not in counts, out[-3000:]
    assert "smollm2-135m-instruct [agent example:" in done.stdout
    api = "responses" if "example:openai_agents" in doc.text else "chat.completions"
    assert_scored_offline(json.loads(report.read_text()), api, done.stdout)
    assert_isolated(done.stdout)


def assert_isolated(output: str) -> None:
    """The shipped example ran in its sandbox from the wheel, every probe attempt held."""
    if optional.missing("bubblewrap") is None:
        said = "\n".join(line for line in output.splitlines() if "sandbox" in line)
        assert "gta: agent sandbox probe: 8 of 8 attempts of a cheating agent held" in output, said
        assert "NOT isolated" not in output, said
        assert "could not be forked" not in output, said  # the warm sandbox served every case


def test_the_tools_alone_serve_until_ctrl_c(user_python: Path, tmp_path: Path) -> None:
    (doc,) = ids("mcp")
    served = subprocess.Popen(
        ["bash", "-c", f"exec {doc.text}"],
        cwd=tmp_path,
        env=activated(user_python),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert served.stdout is not None
        first = served.stdout.readline()
        assert re.match(
            r"pytest-gta: GTA tools over MCP \(14 tools\): http://127\.0\.0\.1:\d+/\S+/mcp$",
            first.strip(),
        ), first + served.stderr.read() if served.stderr else first
    finally:
        os.killpg(served.pid, signal.SIGINT)  # Ctrl-C, as a user stops it
        served.communicate(timeout=60)
    assert served.returncode == 0


def test_the_workflow_sample_is_judged_with_its_shipped_pack(
    user_python: Path, tmp_path: Path
) -> None:
    (doc,) = ids("judge")
    with JudgeServer.from_script(WORKFLOW_DATA / "judge_script.json") as judge:
        env = {"OPENAI_BASE_URL": judge.base_url, "OPENAI_API_KEY": KEY}
        done = run_doc(user_python, doc, tmp_path, env)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-5000:]  # the script's judge fails task 8, as official
    assert judge.requests  # the judge was asked, through the user's variables
    assert root_scores(tmp_path / "gta.xml") == official_root_scores()
    assert KEY not in out


def official_root_scores() -> dict[str, float | None]:
    """What ``agent_app_eval/score_with_gpt52.py`` gave the sample's pack with this judge."""
    recorded = json.loads((WORKFLOW_DATA / "official_scores.json").read_text(encoding="utf-8"))
    return {
        str(task["task_id"]): task["score"] if task["status"] == "ok" else None
        for task in recorded["per_task"]
    }


def root_scores(junit: Path) -> dict[str, float | None]:
    """Each task's ``gta_root_score`` in the JUnit file (``None``: the task errored)."""
    found: dict[str, float | None] = {}
    for case in ET.parse(junit).iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        score = props.get("gta_root_score")
        found[str(props["gta_task_id"])] = None if score is None else float(str(score))
    return found


@pytest.fixture
def hub() -> Iterator[dict[str, str]]:
    """The Hub serving the bundled Workflow sample as ``Jize1/GTA-Workflow``; its variables."""
    files = {
        str(p.relative_to(WORKFLOW_SAMPLE)): p.read_bytes()
        for p in WORKFLOW_SAMPLE.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    with serve_hf_repo(files, repo_id="Jize1/GTA-Workflow") as server:
        home = Path(os.environ.get("TMPDIR", "/tmp")) / f"gta-doc-hf-{os.getpid()}-{id(server)}"
        yield {
            "HF_ENDPOINT": server.url,
            "HF_HOME": str(home),
            "HF_HUB_OFFLINE": "0",
            "HF_HUB_DISABLE_TELEMETRY": "1",
        }
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.parametrize("doc", [*ids("download"), *ids("data-info"), *ids("pack")], ids=doc_id)
def test_the_real_workflow_data_commands(
    doc: Doc, user_python: Path, hub: dict[str, str], tmp_path: Path
) -> None:
    """Downloaded from the (local) Hub into ``data/``, described, then a pack of yours judged."""
    pack = WORKFLOW_DATA / "pack.json"
    shutil.copyfile(pack, tmp_path / "PACK.json")
    shutil.copytree(WORKFLOW_DATA / "deliverables", tmp_path / "deliverables")
    with JudgeServer.from_script(WORKFLOW_DATA / "judge_script.json") as judge:
        env = {**hub, "OPENAI_BASE_URL": judge.base_url, "OPENAI_API_KEY": KEY}
        done = run_doc(user_python, doc, tmp_path, env)
    out = done.stdout + done.stderr
    assert done.returncode == (1 if TESTS[doc.text] == "pack" else 0), out[-5000:]
    installed = tmp_path / "data" / "gta_workflow_dataset" / "end.json"
    assert installed.read_bytes() == (WORKFLOW_SAMPLE / "end.json").read_bytes()
    if TESTS[doc.text] == "download":
        assert "NOT verified" in out
    elif TESTS[doc.text] == "data-info":
        assert "8 tasks" in out or "tasks: 8" in out, out[-3000:]
    else:
        assert summary(done) == {"failed": 7, "error": 1}, out[-3000:]  # as official_scores
        assert judge.requests
    assert KEY not in out


def test_the_commands_run_the_wheel_not_the_checkout(user_python: Path, tmp_path: Path) -> None:
    """From an empty directory, ``python`` is the wheel's virtualenv's, not the checkout's."""
    done = run_user_command(
        user_python, "python -c 'import pytest_gta; print(pytest_gta.__file__)'", cwd=tmp_path
    )
    assert "site-packages" in done.stdout
    assert not Path(done.stdout.strip()).is_relative_to(ROOT)
    assert Path(sys.executable) != user_python

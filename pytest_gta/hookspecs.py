"""Hooks pytest-gta calls, for conftest files and plugins to implement.

"Give me one" hooks are ``firstresult``: the first implementation that returns something wins,
and the built-in implementations run last (``trylast``), so a project's conftest can override
them. "Add to it" hooks are ``update_*`` and mutate their argument in place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_gta.models.base import ModelAdapter, ModelContext, RecordedSource
    from pytest_gta.results.report import RunReport
    from pytest_gta.run.benchmark import Benchmark, BenchmarkContext
    from pytest_gta.tools import ToolBackend, ToolBackendContext, ToolSpec


@pytest.hookspec(firstresult=True)
def pytest_gta_make_model(
    config: pytest.Config, spec: str, context: ModelContext
) -> ModelAdapter | RecordedSource | None:
    """Build the model named by ``--gta-model`` (return ``None`` to leave it to others).

    Adapters should be cheap to build and defer heavy work (loading weights, connecting) to the
    first ``generate`` call or to ``warm_up``: the hook runs in every pytest process. Any object
    with ``name``, ``protocol`` and ``generate`` will do; the optional capabilities it may also
    offer are declared on :class:`pytest_gta.models.base.BaseModelAdapter`, with the defaults
    an object that does not subclass it gets.

    Example, in ``conftest.py``::

        from pytest_gta import ModelOutput

        class Echo:
            name = "echo"
            protocol = "react"

            def generate(self, request):
                return ModelOutput("Final Answer: " + request.messages[-1].content)

        def pytest_gta_make_model(config, spec, context):
            if spec == "echo":
                return Echo()
    """


@pytest.hookspec(firstresult=True)
def pytest_gta_make_tool(
    config: pytest.Config, spec: ToolSpec, context: ToolBackendContext
) -> ToolBackend | None:
    """Build the tool backend for one ``--gta-tools`` entry (``None`` to leave it to others).

    Any object with ``name``, ``offers`` and ``call`` will do; the optional capabilities are
    declared on :class:`pytest_gta.tools.BaseToolBackend`.

    Example, in ``conftest.py``::

        from pytest_gta import ToolResult

        class Constant:
            name = "constant"

            def offers(self, tool):
                return tool == "Calculator"

            def call(self, invocation, context):
                return ToolResult.text("42")

        def pytest_gta_make_tool(config, spec, context):
            if spec.name == "constant":
                return Constant()
    """


def pytest_gta_update_report(config: pytest.Config, report: RunReport) -> None:
    """Change the report in place before it is printed and written (controller only).

    ``report`` is the typed report of the run's benchmark, the ``--gta-report`` file's shape
    (:class:`pytest_gta.results.report.RunReport` for GTA-Atomic; a
    :class:`~pytest_gta.results.workflow.WorkflowReport` on a GTA-Workflow run, a
    :class:`~pytest_gta.results.scored.ScoredReport` for a scored benchmark: its ``benchmark``
    field says which): change its fields within their kinds, and put fields of your own in
    ``report.hook_fields`` (any JSON value; written at the report's top level, after its own
    fields, whatever the benchmark). A field of the wrong kind is a usage error naming it.

    Example, in ``conftest.py``::

        def pytest_gta_update_report(config, report):
            report.hook_fields["checkpoint"] = "step-12000"
            report.notes.append("evaluated on the nightly checkpoint")
    """


@pytest.hookspec(firstresult=True)
def pytest_gta_make_benchmark(config: pytest.Config, context: BenchmarkContext) -> Benchmark | None:
    """Choose the benchmark the run's data is for (``None`` to leave it to others).

    The built-in implementation asks the factories of the ``pytest_gta.benchmarks``
    entry-point group (a third party's first, then ``gta-workflow`` for a directory with
    ``end.json``, then ``gta-atomic`` for any other data). ``context.data`` is the resolved
    ``--gta-data``, ``context.services`` the session's services (dataset, model, tools, cache,
    budget, agent), built on first use. The object returned implements
    :class:`pytest_gta.run.benchmark.Benchmark`.
    """

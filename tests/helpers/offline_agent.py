"""What an agent's run on the bundled SmolLM2 must show, wherever the run was started.

tests/test_examples.py runs the LangGraph example from its virtualenv; tests/test_doc_commands.py
runs docs/agents.md's SmolLM2 commands (the OpenAI Agents SDK example and the agent CLI) from the
built wheel. Each run is the only one of its agent on that model (issue 39 merged the
checkout's runs of the two documented agents into the wheel's, and left smolagents' requests to
the perfect model in pytest's process), so both check the same things of its report.
"""

from __future__ import annotations

from typing import Any

#: The name the bundled model answers under.
SMOLLM2 = "smollm2-135m-instruct"


def assert_scored_offline(report: dict[str, Any], api: str, output: str) -> None:
    """One case ran and was scored, every model request answered in pytest's process.

    A 135M model is no tool agent: the case fails (or, by chance, passes), but it never ends
    as an error, every exchange through the proxy is a 200 in ``api`` for the bundled model,
    the usage counts each of them, and the agent's answer was taken.
    """
    assert report["outcomes"]["error"] == 0, output[-3000:]
    (case,) = report["cases"]
    assert case["outcome"] in ("passed", "failed")
    exchanges = case["exchanges"]
    assert exchanges
    assert all(e["status"] == 200 and e["error"] is None for e in exchanges)
    assert {(e["api"], e["request"]["model"]) for e in exchanges} == {(api, SMOLLM2)}
    assert report["usage"]["calls"] == len(exchanges)
    assert case["agent"]["answer"] is not None
    assert f"{SMOLLM2} [agent " in output

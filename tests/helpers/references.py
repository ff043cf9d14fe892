"""The bundled sample's reference chains, for the test agents that replay them.

An agent's sandbox shows it no dataset, so a test that wants a perfect agent (to check that an
agent's run is scored exactly as the oracle's) hands it the references on purpose, as JSON in
``$GTA_TEST_REFERENCES`` passed on with ``--gta-agent-env``: what a leaderboard would never do,
and what the report shows (``settings.agent.env``).
"""

from __future__ import annotations

import json
from functools import cache

from pytest_gta.dataset import bundled_sample_path
from pytest_gta.validation import load_dataset

#: The variable the test agents read, and the option that passes it on.
VARIABLE = "GTA_TEST_REFERENCES"
AGENT_ENV = f"--gta-agent-env={VARIABLE}"


@cache
def sample_references() -> str:
    """``{query_id: [[[tool, arguments], ...], final_answer]}`` of the bundled sample, as JSON."""
    dataset = load_dataset(bundled_sample_path())
    out = {}
    for query_id, query in dataset.queries.items():
        dialogs = dataset.reference_dialogs(query)
        calls = [
            [call["function"]["name"], call["function"]["arguments"]]
            for message in dialogs
            for call in message.get("tool_calls") or ()
        ]
        answers = [
            m["content"] for m in dialogs if m["role"] == "assistant" and "tool_calls" not in m
        ]
        out[query_id] = [calls, str(answers[-1]) if answers else ""]
    return json.dumps(out)

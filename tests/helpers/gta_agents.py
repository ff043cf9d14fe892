"""Agents under test for tests/test_agents.py: a perfect one and hostile ones.

Each is a callable ``--gta-agent=tests/helpers/gta_agents.py:NAME`` takes. The perfect agent
replays the reference chain of its query through the task's tools and answers the reference answer,
so a run with it must give the oracle's end-to-end numbers; the hostile ones do what issue 25's item
6 lists (unknown tools, malformed and huge arguments, a flood of calls, no answer, a crash).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.request
from typing import Any

from pytest_gta import AgentResult, AgentTask

#: Not an agent (``--gta-agent=tests/helpers/gta_agents.py:NOT_CALLABLE`` is a usage error).
NOT_CALLABLE = "just text"


def reference(query_id: str) -> tuple[list[tuple[str, Any]], str]:
    """The reference calls (name, arguments) of ``query_id`` and its final answer.

    From ``$GTA_TEST_REFERENCES`` (:func:`tests.helpers.gta_run.sample_references`), which the
    tests hand the agent on purpose with ``--gta-agent-env``: its sandbox shows it no dataset.
    """
    calls, answer = json.loads(os.environ["GTA_TEST_REFERENCES"])[query_id]
    return [(name, arguments) for name, arguments in calls], answer


def replay(task: AgentTask) -> str:
    """The perfect agent: the reference calls through ``task.tools``, the reference answer."""
    calls, answer = reference(task.query_id)
    for name, arguments in calls:
        task.tools.call_json(name, arguments)
    return answer


async def replay_async(task: AgentTask) -> AgentResult:
    """The perfect agent, async, answering an :class:`AgentResult`."""
    calls, answer = reference(task.query_id)
    for name, arguments in calls:
        await asyncio.to_thread(task.tools.call_json, name, arguments)
    return AgentResult(answer)


def unknown_tool(task: AgentTask) -> str:
    """Calls a tool the case does not have, then answers the reference answer."""
    calls, answer = reference(task.query_id)
    task.tools.call("DeleteEverything", path="/")
    for name, arguments in calls:
        task.tools.call_json(name, arguments)
    return answer


def malformed(task: AgentTask) -> str:
    """Calls each reference tool with malformed arguments: a list, a huge string, a bad key."""
    calls, answer = reference(task.query_id)
    for name, _ in calls:
        task.tools.call_json(name, ["not", "an", "object"])
        task.tools.call_json(name, {"image": "x" * 3_000_000})
        task.tools.call(name, no_such_argument=1)
    return answer


def flood(task: AgentTask) -> str:
    """Calls a tool far more often than the case's limit allows; says what the limit said."""
    name = task.tool_schemas[0]["name"]
    replies = [task.tools.call(name) for _ in range(200)]
    return replies[-1]


def never(task: AgentTask) -> str:
    """Never answers (the case's timeout must end it)."""
    time.sleep(3600)
    return ""


def crash(task: AgentTask) -> str:
    """Raises, with a secret from the environment in its message."""
    raise RuntimeError(f"agent broke; key {os.environ.get('OPENAI_API_KEY', '')}")


def returns_none(task: AgentTask) -> Any:
    """Returns no answer at all."""
    return None


def hostile(task: AgentTask) -> Any:
    """One hostile behaviour per query of the sample, so one run shows them all."""
    behaviours = {
        "1": unknown_tool,
        "2": malformed,
        "3": flood,
        "4": crash,
        "5": never,
        "6": returns_none,
    }
    return behaviours.get(task.query_id, replay)(task)


def ask_model(task: AgentTask) -> str:
    """Asks the run's model once through the proxy (any key works), then replays the reference."""
    assert task.model_url is not None, "every model that generates has a proxy URL"
    body = {"model": "whatever", "messages": [{"role": "user", "content": task.text}]}
    request = urllib.request.Request(
        task.model_url.rstrip("/") + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "authorization": "Bearer anything"},
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        assert json.loads(reply.read())["choices"][0]["message"]["content"]
    return replay(task)


def cheat(task: AgentTask) -> str:
    """Tries what a cheating agent would; answers what it got as JSON (tests expect ``{}``).

    The dataset (``$GTA_SAMPLE``), PID 1's environment, any other process's.
    """
    got: dict[str, Any] = {}
    for path in (os.environ.get("GTA_SAMPLE", "/x"), "/proc/1/environ"):
        try:
            with open(path, "rb") as handle:
                got[path] = handle.read(50).decode("utf-8", "replace")
        except OSError:
            pass
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in (os.getpid(), 1):
            try:
                with open(f"/proc/{entry}/environ", "rb") as handle:
                    if b"sk-" in handle.read():
                        got[f"environ {entry}"] = "has a key"
            except OSError:
                pass
    return json.dumps(got)

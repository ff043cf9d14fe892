"""An agent program for tests/test_agents.py (``--gta-agent-command``): perfect or hostile.

``python gta_agent_cli.py MODE QUERY_FILE [EXTRA]``; the case's MCP URL and answer file come
from the environment the harness sets (``GTA_MCP_URL``, ``GTA_ANSWER_FILE``). The perfect mode
replays the reference chain over MCP with the SDK's ``mcp.Client`` and prints the reference
answer; the others are issue 25's hostile agents.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.helpers.gta_agents import reference


async def call_all(url: str, calls: list[tuple[str, Any]]) -> list[str]:
    """Call each tool over MCP; the text of each result."""
    # Imported here: the modes that call no tool (hang, crash, binary...) start in a fraction
    # of a second even on a loaded CI machine, well inside a short --gta-agent-timeout.
    from mcp import Client

    out = []
    async with Client(url) as client:
        listed = await client.list_tools()
        assert listed.tools, "the case's endpoint lists no tools"
        for name, arguments in calls:
            result = await client.call_tool(name, arguments)
            out.append(" ".join(getattr(c, "text", "") for c in result.content))
    return out


def main(argv: list[str]) -> int:
    mode, query_file, *extra = argv
    task = json.loads(Path(query_file).read_text("utf-8"))
    url = os.environ["GTA_MCP_URL"]
    assert task["mcp_url"] == url
    assert all(os.path.isabs(p) and os.path.isfile(p) for p in task["images"])
    calls, answer = reference(task["query_id"])
    if mode == "replay":
        asyncio.run(call_all(url, calls))
        print(answer)
    elif mode == "answer-file":
        asyncio.run(call_all(url, calls))
        Path(os.environ["GTA_ANSWER_FILE"]).write_text(answer, "utf-8")
        print("progress chatter, not the answer")
    elif mode == "ask-model":  # once through the proxy ({model_url}), then the reference
        assert extra[0] == task["model_url"] == os.environ["OPENAI_BASE_URL"]
        body = {"model": "whatever", "messages": [{"role": "user", "content": task["query"]}]}
        request = urllib.request.Request(
            extra[0].rstrip("/") + "/chat/completions",
            data=json.dumps(body).encode(),
            headers={"content-type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as reply:
            assert json.loads(reply.read())["choices"][0]["message"]["content"]
        asyncio.run(call_all(url, calls))
        print(answer)
    elif mode == "binary":
        sys.stdout.buffer.write(b"\xff\xfe\x00\x80 binary \xc3\x28" * 1000)
    elif mode == "crash":
        print("Traceback (most recent call last):\nValueError: the agent broke", file=sys.stderr)
        return 3
    elif mode == "hang":
        if extra:  # say who is hanging: this process and a child of its own
            child = subprocess.Popen(["sleep", "1000"])
            pids = f"{os.getpid()} {child.pid}"
            Path(extra[0], f"{task['case_id']}.pid").write_text(pids)
        time.sleep(3600)
    elif mode == "child":
        child = subprocess.Popen(["sleep", "1000"])
        Path(extra[0], f"{task['case_id']}.pid").write_text(str(child.pid))
        print(answer)
    elif mode == "env":
        print(json.dumps(dict(os.environ)))
    elif mode == "hostile":
        return hostile(task, url, calls, answer, Path(extra[0]))
    return 0


#: ``hostile`` mode: what each query of the sample does (the rest answer nothing, politely).
HOSTILE = {
    "0": "victim",
    "1": "unknown",
    "2": "malformed",
    "3": "flood",
    "4": "crash",
    "5": "hang",
    "6": "binary",
    "7": "child",
    "8": "env",
    "9": "thief",
}


def hostile(
    task: dict[str, Any], url: str, calls: list[tuple[str, Any]], answer: str, work: Path
) -> int:
    """One hostile behaviour per query (:data:`HOSTILE`), so one run shows them all."""
    what = HOSTILE.get(task["query_id"], "quiet")
    name = task["tools"][0]["name"]
    if what in ("victim", "thief"):
        return steal(url, calls, work / "url", answer, thief=what == "thief")
    if what == "unknown":
        asyncio.run(call_all(url, [("DeleteEverything", {"path": "/"}), *calls]))
        print(answer)
    elif what == "malformed":
        asyncio.run(call_all(url, [(name, {"image": "x" * 3_000_000}), (name, {"nope": [1, {}]})]))
        print(answer)
    elif what == "flood":
        print(asyncio.run(call_all(url, [(name, {})] * 60))[-1])
    elif what in ("crash", "hang", "binary", "child", "env"):
        return main([what, os.environ["GTA_QUERY_FILE"], str(work)])
    return 0


def steal(url: str, calls: list[tuple[str, Any]], note: Path, answer: str, *, thief: bool) -> int:
    """The victim leaves its case's URL in ``note`` as it ends; the thief calls it later.

    The thief's calls must be refused: the victim's endpoint closed with its case.
    """
    if not thief:
        asyncio.run(call_all(url, calls))
        note.write_text(url)
        print(answer)
        return 0
    for _ in range(600):  # with xdist, the victim may run in the other worker
        if note.exists():
            break
        time.sleep(0.1)
    time.sleep(1.0)  # the victim's case has ended by now
    try:
        asyncio.run(call_all(note.read_text(), calls))
    except BaseException as exc:
        print(f"refused: {type(exc).__name__}")
        return 0
    print("the other case's endpoint answered")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

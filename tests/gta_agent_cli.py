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
from pathlib import Path
from typing import Any

from mcp import Client

from tests.gta_agents import reference


async def call_all(url: str, calls: list[tuple[str, Any]]) -> list[str]:
    """Call each tool over MCP; the text of each result."""
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
    elif mode == "binary":
        sys.stdout.buffer.write(b"\xff\xfe\x00\x80 binary \xc3\x28" * 1000)
    elif mode == "crash":
        print("Traceback (most recent call last):\nValueError: the agent broke", file=sys.stderr)
        return 3
    elif mode == "hang":
        time.sleep(3600)
    elif mode == "child":
        child = subprocess.Popen(["sleep", "1000"])
        Path(extra[0], f"{task['case_id']}.pid").write_text(str(child.pid))
        print(answer)
    elif mode == "env":
        print(json.dumps(dict(os.environ)))
    elif mode == "steal":
        return steal(url, calls, Path(extra[0]), answer)
    return 0


def steal(url: str, calls: list[tuple[str, Any]], note: Path, answer: str) -> int:
    """The first case leaves its URL behind; a later one calls it (it must be refused)."""
    if not note.exists():
        asyncio.run(call_all(url, calls))
        note.write_text(url)
        print(answer)
        return 0
    time.sleep(1.0)  # the first case's endpoint has closed by now
    try:
        asyncio.run(call_all(note.read_text(), calls))
    except BaseException as exc:  # noqa: BLE001  (any refusal will do)
        print(f"refused: {type(exc).__name__}")
        return 0
    print("the other case's endpoint answered")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

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
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any


def reference(query_id: str) -> tuple[list[tuple[str, Any]], str]:
    """The reference calls and answer of ``query_id`` (``tests/helpers/references.py``)."""
    calls, answer = json.loads(os.environ["GTA_TEST_REFERENCES"])[query_id]
    return [(name, arguments) for name, arguments in calls], answer


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
    if mode == "cheat":  # needs no case: the tests run it in a bare sandbox too
        if extra:
            leave(f"{extra[0]}-{task['case_id']}")
        print(json.dumps(cheat(task)))
        return 0
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
        if extra:  # a child of its own, and a double-forked one that leaves its session
            leave(f"{extra[0]}-{task['case_id']}")
        time.sleep(3600)
    elif mode == "child":
        leave(f"{extra[0]}-{task['case_id']}")
        print(answer)

    elif mode == "env":
        print(json.dumps(dict(os.environ)))
    elif mode == "hostile":
        return hostile(task, url, calls, answer, extra[0])
    return 0


def leave(marker: str) -> None:
    """Start a child, and a double-forked ``setsid`` grandchild, each named by ``marker``.

    The tests look for ``marker`` on the host's command lines: neither may outlive the case.
    """
    sleeper = [sys.executable, "-c", "import time; time.sleep(1000)", marker]
    subprocess.Popen(sleeper)
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, sleeper)
        os._exit(0)
    os.wait()


def cheat(task: dict[str, Any]) -> dict[str, Any]:
    """What a cheating agent tries; what it got (the tests expect nothing)."""
    got: dict[str, Any] = {}
    image_dir = Path(task["images"][0]).parent if task["images"] else Path("/")
    for path in (image_dir.parent / "dataset.json", Path(os.environ.get("GTA_SAMPLE", "/x"))):
        try:
            got[str(path)] = path.read_text()[:50]
        except OSError:
            pass
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int(entry.name) != os.getpid():
                environ = (entry / "environ").read_bytes()
                if b"sk-" in environ:
                    got[f"environ {entry.name}"] = "has a key"
        except OSError:
            pass
    for port in (int(p) for p in os.environ.get("GTA_CANARY_PORTS", "").split(",") if p):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            got[f"port {port}"] = "reached"
        except OSError:
            pass
    return got


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
    "9": "cheat",
}


def hostile(
    task: dict[str, Any], url: str, calls: list[tuple[str, Any]], answer: str, marker: str
) -> int:
    """One hostile behaviour per query (:data:`HOSTILE`), so one run shows them all."""
    what = HOSTILE.get(task["query_id"], "quiet")
    name = task["tools"][0]["name"]
    if what == "victim":
        asyncio.run(call_all(url, calls))
        print(answer)
    elif what == "unknown":
        asyncio.run(call_all(url, [("DeleteEverything", {"path": "/"}), *calls]))
        print(answer)
    elif what == "malformed":
        asyncio.run(call_all(url, [(name, {"image": "x" * 3_000_000}), (name, {"nope": [1, {}]})]))
        print(answer)
    elif what == "flood":
        print(asyncio.run(call_all(url, [(name, {})] * 60))[-1])
    elif what in ("crash", "hang", "binary", "child", "env", "cheat"):
        return main([what, os.environ["GTA_QUERY_FILE"], marker])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

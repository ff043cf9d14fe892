"""What the agent's sandbox adds per case, beside the unsandboxed paths, in one run (issue 38).

A case of an agent under test runs in a sandbox of its own. Issue 38 measured about 280 ms per
case for a command and 540 ms for a callable (a guard, a bubblewrap and its bind tree, a Python
launcher per case, and for a callable its module's import every time), plus 2 to 3 s per run.
Now each run starts one warm sandbox and forks every case from it into namespaces of its own.
This script times, case by case and interleaved so that machine noise hits every path alike:

* a **command** agent (a small Python program that reads its query file and answers): run
  plainly as a subprocess (the unsandboxed path), in the warm sandbox, and in a sandbox of its
  own per case (the fallback where no warm sandbox can start);
* a **callable** agent whose module imports the ``openai`` SDK, as agents do: called in
  pytest's process (``--gta-agent-in-process``, the unsandboxed path, its import paid once),
  forked from the warm sandbox (imported once per run), and in a sandbox of its own per case
  (imported per case).

Added cost is per case: the path's median wall time minus the unsandboxed path's. The table
also gives each path's p90, the one-off costs of a run (the jail's self-test, the warm
sandbox's start with the callable's import, the cheating probe), and the machine's load before
and after, since two shared cores make every number move.

    python benchmarks/isolation.py [--cases 30]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_gta.dataset import bundled_sample_path
from pytest_gta.jail import Job
from pytest_gta.session.agent_setup import AgentSetup, probe
from tool_backends.agent_jail import AgentJail

AGENT = """
import json, sys
task = json.load(open(sys.argv[1]))
print("answer to", task["case_id"])
"""
CALLABLE = """
import openai  # what an agent's module imports: its SDK

def agent(task):
    return "answer to " + task.case_id
"""
FIELDS = ["case_id", "query_id", "text", "image_paths", "tools", "workdir", "model"]


def query(number: int, image: str) -> dict[str, Any]:
    return {
        "case_id": f"e2e-{number}",
        "query_id": str(number),
        "query": "What is in the picture?",
        "images": [image],
        "tools": [],
        "model": "m",
    }


def timed(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return (time.perf_counter() - start) * 1000


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} cores"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=30, help="cases per path (default 30)")
    args = parser.parse_args(argv)
    if importlib.util.find_spec("openai") is None:
        print("the callable imports the openai SDK: pip install openai", file=sys.stderr)
        return 2
    print(f"load before: {load()}")
    sample = bundled_sample_path()
    image = str(sample / "image" / "image_0.jpg")
    work = Path(tempfile.mkdtemp(prefix="gta-isolation-bench-"))
    work.chmod(0o755)
    program = work / "agent.py"
    program.write_text(AGENT)
    module = work / "agent_module.py"
    module.write_text(CALLABLE)
    for path in (program, module):
        path.chmod(0o644)
    spec = {"file": str(module), "attr": "agent", "path": [], "show": [str(module)]}
    spec["task_fields"] = FIELDS
    argv_ = (sys.executable, str(program), "{query_file}")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    once: dict[str, float] = {}
    start = time.perf_counter()
    warm = AgentJail(hidden=(str(sample),), network="case")
    once["jail self-test (bubblewrap, the bind tree)"] = (time.perf_counter() - start) * 1000
    cold = AgentJail(hidden=(str(sample),), network="case", warm=False)
    print(f"mechanism: {warm.isolation.mechanism}")
    setup = AgentSetup(None, warm, warm.isolation, program={"spec": spec})  # type: ignore[arg-type]
    once["warm start, the callable's import, the probe"] = timed(
        lambda: probe(setup, sample / "dataset.json")
    )
    spec_module: Any = None

    def in_process(number: int) -> None:
        nonlocal spec_module
        if spec_module is None:  # the in-process path imports once too, at start-up
            found = importlib.util.spec_from_file_location("agent_module", module)
            assert found is not None
            assert found.loader is not None
            spec_module = importlib.util.module_from_spec(found)
            found.loader.exec_module(spec_module)

        class Task:
            case_id = f"e2e-{number}"

        spec_module.agent(Task())

    def plain(number: int) -> None:
        with tempfile.TemporaryDirectory() as scratch:
            path = Path(scratch) / "query.json"
            path.write_text(__import__("json").dumps(query(number, image)))
            subprocess.run([sys.executable, str(program), str(path)], capture_output=True)

    def sandboxed(jail: AgentJail, kind: str) -> Callable[[int], None]:
        def run(number: int) -> None:
            if kind == "command":
                job = Job("command", query(number, image), env, 60, argv=argv_, show=(image,))
            else:
                job = Job("callable", query(number, image), env, 60, spec=spec, show=(image,))
            ran = jail.run(job)
            assert not ran.timed_out, ran
            assert ran.exit_status == 0, ran.stderr_tail

        return run

    paths = {
        ("command", "unsandboxed (a subprocess)"): plain,
        ("command", "warm sandbox (a fork per case)"): sandboxed(warm, "command"),
        ("command", "a sandbox per case (fallback)"): sandboxed(cold, "command"),
        ("callable", "unsandboxed (--gta-agent-in-process)"): in_process,
        ("callable", "warm sandbox (a fork per case)"): sandboxed(warm, "callable"),
        ("callable", "a sandbox per case (fallback)"): sandboxed(cold, "callable"),
    }
    for run in paths.values():  # warm-up: first imports, the warm sandboxes' start
        run(0)
    times: dict[tuple[str, str], list[float]] = {key: [] for key in paths}
    for number in range(1, args.cases + 1):
        for key, run in paths.items():
            times[key].append(timed(lambda run=run, number=number: run(number)))  # type: ignore[misc]
    warm.close()
    cold.close()
    print(f"load after: {load()}")
    print()
    print(f"Per case, {args.cases} cases per path, interleaved (milliseconds)")
    print()
    print("| agent | path | median | p90 | added per case |")
    print("|---|---|---:|---:|---:|")
    for kind in ("command", "callable"):
        rows = [(path, times[(k, path)]) for k, path in paths if k == kind]
        base = statistics.median(rows[0][1])
        for path, values in rows:
            median = statistics.median(values)
            p90 = statistics.quantiles(values, n=10)[-1]
            added = "-" if path == rows[0][0] else f"{median - base:+.1f}"
            print(f"| {kind} | {path} | {median:.1f} | {p90:.1f} | {added} |")
    print()
    print("Once per run (milliseconds)")
    print()
    for what, value in once.items():
        print(f"- {what}: {value:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Hostile agents in the agents' sandbox, run directly (as root or as another user).

``python agent_jail_probe.py MODE DATASET_DIR``: builds the jail of ``--gta-sandbox=MODE`` that
hides ``DATASET_DIR`` (a dataset readable by any user), runs the start-up probe, a cheating
command (``gta_agent_cli.py cheat``, which also leaves a child and a double-forked grandchild)
and a cheating callable (``gta_agents.py:cheat``), and prints what each got as one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from pytest_gta.jail import Job
from pytest_gta.run.agent_command import callable_spec
from pytest_gta.session.agent_setup import AgentSetup, probe
from tool_backends.agent_jail import AgentJail

HERE = Path(__file__).resolve().parent


def main(mode: str, data: str) -> dict:
    jail = AgentJail(hidden=(data,), network="case", mode=mode)  # type: ignore[arg-type]
    marker = f"gta-jail-probe-{os.getpid()}"
    env = {"PATH": "/usr/bin:/bin", "GTA_SAMPLE": f"{data}/dataset.json"}
    query = {"case_id": "c", "query_id": "9", "query": "", "images": [], "tools": [], "model": ""}
    try:
        setup = AgentSetup(None, jail, jail.isolation)  # type: ignore[arg-type]
        findings = probe(setup, Path(data) / "dataset.json")
        argv = (sys.executable, str(HERE / "gta_agent_cli.py"), "cheat", "{query_file}", marker)
        command = jail.run(Job("command", query, env, 60, argv=argv))
        spec = callable_spec(f"{HERE / 'gta_agents.py'}:cheat", HERE)
        called = jail.run(Job("callable", query, env, 60, spec=spec))
        return {
            "mechanism": jail.isolation.mechanism,
            "gaps": list(jail.isolation.gaps),
            "guarantees": list(jail.isolation.guarantees),
            "attempts": list(jail.isolation.attempts),
            "findings": findings,
            "command": command.stdout.strip(),
            "command_status": command.exit_status,
            "command_stderr": command.stderr_tail[-2000:],
            "callable": called.result,
            "uid": os.getuid(),
            "marker": marker,
        }
    finally:
        jail.close()


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))

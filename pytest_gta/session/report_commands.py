"""``--gta-merge`` and ``--gta-compare``: the commands that read reports instead of running tests.

The plugin imports this module only when one of them is given. It imports what the two need
(the report model, the merge, the comparison and its pages), not the session layer of a run
(model adapters, runners, servers, the similarity model's client): ``--gta-compare`` of 20
release reports starts 0.4 s sooner for it (docs/benchmarks.md, "Comparing runs").
"""

from __future__ import annotations

import pytest

from pytest_gta.session.compare_command import compare_command
from pytest_gta.session.finish import merge_command
from pytest_gta.session.workflow_compare import workflow_compare_command, workflow_reports


def run(config: pytest.Config) -> int | None:
    """Run the report command ``config`` names; ``None`` when it names neither."""
    if config.getoption("gta_merge"):
        return merge_command(config)
    if config.getoption("gta_compare"):
        workflow = workflow_reports(config)
        if workflow is not None:
            return workflow_compare_command(config, workflow)
        return compare_command(config)
    return None

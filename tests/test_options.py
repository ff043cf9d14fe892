"""The option table: what it registers, and where the paths it resolves point."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

import pytest

from pytest_gta.models.generation import GenerationSettings
from pytest_gta.options import OPTIONS, RANGES, GtaSettings, doc, resolve_option, resolve_settings
from pytest_gta.options.table import FEATURES
from tests.helpers.gta_run import FAST_SIM

#: Every flag and its ini twin (``None``: a command, no twin), as registered before the table
#: existed. A rename here is a breaking change for users' ini files and scripts.
TWINS = {
    "--gta-model": "gta_model",
    "--gta-data": "gta_data",
    "--gta-data-dir": "gta_data_dir",
    "--gta-download": None,
    "--gta-download-url": "gta_download_url",
    "--gta-allow-unverified": "gta_allow_unverified",
    "--gta-record-manifest": None,
    "--gta-data-info": None,
    "--gta-mcp-serve": None,
    "--gta-mcp-transport": "gta_mcp_transport",
    "--gta-mcp-query": "gta_mcp_query",
    "--gta-mcp-port": "gta_mcp_port",
    "--gta-mode": "gta_mode",
    "--gta-tools": "gta_tools",
    "--gta-sim-model": "gta_sim_model",
    "--gta-sim-threshold": "gta_sim_threshold",
    "--gta-report": "gta_report",
    "--gta-report-md": "gta_report_md",
    "--gta-report-html": "gta_report_html",
    "--gta-report-html-max-mb": "gta_report_html_max_mb",
    "--gta-inspect-log": "gta_inspect_log",
    "--gta-label": "gta_label",
    "--gta-limit": "gta_limit",
    "--gta-ids": "gta_ids",
    "--gta-only": "gta_only",
    "--gta-recorded-root": "gta_recorded_root",
    "--gta-max-turns": "gta_max_turns",
    "--gta-base-url": "gta_base_url",
    "--gta-served-model": "gta_served_model",
    "--gta-model-args": "gta_model_args",
    "--gta-temperature": "gta_temperature",
    "--gta-max-tokens": "gta_max_tokens",
    "--gta-seed": "gta_seed",
    "--gta-protocol": "gta_protocol",
    "--gta-timeout": "gta_timeout",
    "--gta-max-reply-bytes": "gta_max_reply_bytes",
    "--gta-retries": "gta_retries",
    "--gta-max-concurrency": "gta_max_concurrency",
    "--gta-concurrency": "gta_concurrency",
    "--gta-cache": "gta_cache",
    "--gta-cache-dir": "gta_cache_dir",
    "--gta-epoch": "gta_epoch",
    "--gta-epochs": "gta_epochs",
    "--gta-max-tokens-total": "gta_max_tokens_total",
    "--gta-max-cost": "gta_max_cost",
    "--gta-tool-cassettes": "gta_tool_cassettes",
    "--gta-tool-record": "gta_tool_record",
    "--gta-tool-faults": "gta_tool_faults",
    "--gta-tools-without": "gta_tools_without",
    "--gta-tools-none": "gta_tools_none",
    "--gta-price": "gta_price",
    "--gta-sandbox": "gta_sandbox",
    "--gta-shard": "gta_shard",
    "--gta-merge": None,
    "--gta-compare": None,
    "--gta-compare-ref": "gta_compare_ref",
    "--gta-leaderboard-rows": "gta_leaderboard_rows",
    "--gta-confidence": "gta_confidence",
    "--gta-bootstrap-samples": "gta_bootstrap_samples",
    "--gta-baseline": "gta_baseline",
    "--gta-baseline-lenient": "gta_baseline_lenient",
    "--gta-rerun-regressions": None,
    "--gta-fail-under": "gta_fail_under",
    "--gta-fail-on-regression": "gta_fail_on_regression",
    "--gta-alpha": "gta_alpha",
    "--gta-min-drop": "gta_min_drop",
    "--gta-serve": "gta_serve",
    "--gta-serve-command": "gta_serve_command",
    "--gta-serve-timeout": "gta_serve_timeout",
    "--gta-agent": "gta_agent",
    "--gta-agent-command": "gta_agent_command",
    "--gta-agent-env": "gta_agent_env",
    "--gta-agent-timeout": "gta_agent_timeout",
    "--gta-agent-network": "gta_agent_network",
    "--gta-agent-in-process": "gta_agent_in_process",
    "--gta-require-isolation": "gta_require_isolation",
    "--gta-evalpack-root": "gta_evalpack_root",
    "--gta-judge": "gta_judge",
    "--gta-judge-base-url": "gta_judge_base_url",
    "--gta-judge-api": "gta_judge_api",
    "--gta-judge-threshold": "gta_judge_threshold",
    "--gta-judge-timeout": "gta_judge_timeout",
}
#: The one ini twin that is not a string.
BOOL_INI = {
    "gta_allow_unverified",
    "gta_baseline_lenient",
    "gta_agent_in_process",
    "gta_require_isolation",
    "gta_only",
    "gta_tools_none",
}


def test_table_pairs_every_flag_with_its_ini_twin():
    assert {spec.flag: spec.ini for spec in OPTIONS} == TWINS


def test_help_registers_exactly_the_table(pytester):
    text = pytester.runpytest("--help").stdout.str()
    flags = set(re.findall(r"^  (--gta-[a-z-]+)", text, re.M))
    inis = dict(re.findall(r"^  (gta_[a-z_]+) \((\w+)\):", text, re.M))
    assert flags == set(TWINS)
    expected = {ini: "bool" if ini in BOOL_INI else "string" for ini in TWINS.values() if ini}
    assert inis == expected


def test_every_settings_part_comes_from_its_features_rows():
    # Each feature's rows fill its part of the settings; the data is resolved with rules of its
    # own (its rows have no setting), the model's generation.* rows fill GenerationSettings.
    parts = typing.get_type_hints(GtaSettings)
    del parts["invocation_dir"]
    assert {feature.name for feature in FEATURES if feature.name} == set(parts)
    # The agent's ``given`` is what the user typed, beside the resolved callable or command.
    special = {"data": {"path", "source", "dir"}, "model": {"generation"}, "agent": {"given"}}
    generation = []
    for feature in FEATURES:
        settings = [spec.setting for spec in feature.rows if spec.setting]
        assert len(settings) == len(set(settings)), feature.name
        if feature.name is None:
            assert settings == [], feature.rows
            continue
        own = {s for s in settings if not s.startswith("generation.")}
        generation += [s.removeprefix("generation.") for s in settings if s not in own]
        fields = {f.name for f in dataclasses.fields(parts[feature.name])}
        assert own | special.get(feature.name, set()) == fields, feature.name
    assert sorted(generation) == sorted(f.name for f in dataclasses.fields(GenerationSettings))


@pytest.mark.slow  # 7 s in a full run: slow by cost (issue 39)
def test_defaults_match_the_dataclasses(pytester):
    settings = resolve_settings(pytester.parseconfigure())
    defaults = GtaSettings(settings.invocation_dir, settings.data)
    assert settings == defaults
    assert settings.model.generation == GenerationSettings()
    assert (settings.cases.modes, settings.tools.backends, settings.tools.record) == (
        ("e2e",),
        "replay",
        "none",
    )
    assert settings.tools.sandbox == "auto"
    assert settings.report.json is settings.model.cache_dir is settings.tools.cassettes is None


INI_PATHS = """
    [pytest]
    gta_report = out/r.json
    gta_report_md = out/r.md
    gta_cache_dir = out/cache
    gta_tool_cassettes = cassettes
    gta_data = mydata
    gta_data_dir = datasets
    gta_download_url = mirror/gta.zip
"""


@pytest.fixture
def in_subdir(pytester, monkeypatch):
    """A project with path options in its ini file, run from a subdirectory."""
    pytester.makeini(INI_PATHS)
    sub = pytester.mkdir("sub")
    monkeypatch.chdir(sub)
    return sub


@pytest.mark.slow  # 7 s in a full run: slow by cost (issue 39)
def test_ini_paths_resolve_against_the_ini_file(pytester, in_subdir):
    config = pytester.parseconfigure()
    assert config.invocation_params.dir == in_subdir
    settings = resolve_settings(config)
    root = pytester.path
    assert settings.report.json == root / "out" / "r.json"
    assert settings.report.md == root / "out" / "r.md"
    assert settings.model.cache_dir == root / "out" / "cache"
    assert settings.tools.cassettes == root / "cassettes"
    assert settings.data.path == root / "mydata"
    assert settings.data.dir == root / "datasets"
    url = resolve_option(config, "gta_download_url")
    assert (url.value, url.source) == ("mirror/gta.zip", "ini")


@pytest.mark.slow  # 4 s in a full run: slow by cost (issue 39)
def test_cli_paths_resolve_against_the_invocation_dir(pytester, in_subdir):
    config = pytester.parseconfigure(
        "--gta-report=r.json",
        "--gta-report-md=r.md",
        "--gta-cache-dir=cache",
        "--gta-tool-cassettes=cassettes",
        "--gta-data=mydata",
        "--gta-data-dir=datasets",
    )
    settings = resolve_settings(config)
    assert settings.report.json == in_subdir / "r.json"
    assert settings.report.md == in_subdir / "r.md"
    assert settings.model.cache_dir == in_subdir / "cache"
    assert settings.tools.cassettes == in_subdir / "cassettes"
    assert (settings.data.path, settings.data.source) == (in_subdir / "mydata", "--gta-data")
    assert settings.data.dir == in_subdir / "datasets"


def test_reports_from_ini_land_beside_it_when_run_from_a_subdirectory(pytester, monkeypatch):
    # The regression: gta_report and friends used to resolve against the current directory.
    pytester.makeini(
        """
        [pytest]
        gta_report = out/r.json
        gta_report_md = out/r.md
        gta_cache_dir = out/cache
        """
    )
    sub = pytester.mkdir("sub")
    monkeypatch.chdir(sub)
    result = pytester.runpytest(
        FAST_SIM, "--gta-model=oracle", "--gta-data=sample", "--gta-limit=1"
    )
    result.assert_outcomes(passed=1)
    assert (pytester.path / "out" / "r.json").is_file()
    assert (pytester.path / "out" / "r.md").is_file()
    assert not (sub / "out").exists()


def test_data_info_report_from_ini_lands_beside_it(pytester, monkeypatch, tmp_path):
    data_dir = tmp_path / "data"
    pytester.makeini(f"[pytest]\ngta_report = out/info.json\ngta_data_dir = {data_dir}\n")
    sub = pytester.mkdir("sub")
    monkeypatch.chdir(sub)
    result = pytester.runpytest("--gta-data-info", "--gta-data=sample")
    assert result.ret == 0, result.stdout.str()
    assert (pytester.path / "out" / "info.json").is_file()
    assert not (sub / "out").exists()


DOCS = Path(__file__).resolve().parents[1] / "docs" / "options.md"


def test_docs_option_tables_are_written_from_the_rows():
    text = DOCS.read_text()
    assert doc.render(text) == text, "docs/options.md is stale: python -m pytest_gta.options.doc"
    rows = re.findall(r"^\| `(--gta-[a-z-]+)[=`\[]", text, re.M)
    assert rows[: len(OPTIONS)] == [spec.flag for spec in OPTIONS]
    for spec in OPTIONS:
        assert spec.doc, spec.flag
        assert spec.doc_default or spec.ini is None, spec.flag
        # A range's ends are the parser's own: only the prose around them is written by hand.
        assert (spec.doc_range is not None) >= (spec.flag in RANGES), spec.flag


def test_doc_command_writes_a_stale_page_and_checks_it(tmp_path, capsys):
    page = tmp_path / "options.md"
    stale = DOCS.read_text().replace("| `--gta-seed=N` |", "| `--gta-seed=SEED` |")
    page.write_text(stale)
    assert doc.main(["--check", str(page)]) == 1
    assert "is stale" in capsys.readouterr().err
    assert doc.main([str(page)]) == 0
    assert page.read_text() == DOCS.read_text()
    assert doc.main(["--check", str(page)]) == 0

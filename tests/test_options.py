"""The option table: what it registers, and where the paths it resolves point."""

from __future__ import annotations

import dataclasses
import re

import pytest

from pytest_gta.models.generation import GenerationSettings
from pytest_gta.options import OPTIONS, GtaSettings, resolve_option, resolve_settings
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
}
#: The one ini twin that is not a string.
BOOL_INI = {"gta_allow_unverified", "gta_baseline_lenient"}


def test_table_pairs_every_flag_with_its_ini_twin():
    assert {spec.flag: spec.ini for spec in OPTIONS} == TWINS


def test_help_registers_exactly_the_table(pytester):
    text = pytester.runpytest("--help").stdout.str()
    flags = set(re.findall(r"^  (--gta-[a-z-]+)", text, re.M))
    inis = dict(re.findall(r"^  (gta_[a-z_]+) \((\w+)\):", text, re.M))
    assert flags == set(TWINS)
    expected = {ini: "bool" if ini in BOOL_INI else "string" for ini in TWINS.values() if ini}
    assert inis == expected


def test_every_settings_field_comes_from_one_row():
    # resolve_settings builds both dataclasses from the rows' settings; the rest are its own.
    special = {"data", "data_source", "invocation_dir", "generation", "data_dir"}
    rows = [spec.setting for spec in OPTIONS if spec.setting]
    assert len(rows) == len(set(rows))
    assert {r for r in rows if not r.startswith("generation.")} | special == {
        f.name for f in dataclasses.fields(GtaSettings)
    }
    assert {r.removeprefix("generation.") for r in rows if r.startswith("generation.")} == {
        f.name for f in dataclasses.fields(GenerationSettings)
    }


def test_defaults_match_the_dataclasses(pytester):
    settings = resolve_settings(pytester.parseconfigure())
    assert settings.generation == GenerationSettings()
    assert (settings.modes, settings.tools, settings.tool_record, settings.sandbox) == (
        ("e2e",),
        "replay",
        "none",
        "auto",
    )
    assert settings.report is settings.cache_dir is settings.tool_cassettes is None


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


def test_ini_paths_resolve_against_the_ini_file(pytester, in_subdir):
    config = pytester.parseconfigure()
    assert config.invocation_params.dir == in_subdir
    settings = resolve_settings(config)
    root = pytester.path
    assert settings.report == root / "out" / "r.json"
    assert settings.report_md == root / "out" / "r.md"
    assert settings.cache_dir == root / "out" / "cache"
    assert settings.tool_cassettes == root / "cassettes"
    assert settings.data == root / "mydata"
    assert settings.data_dir == root / "datasets"
    url = resolve_option(config, "gta_download_url")
    assert (url.value, url.source) == ("mirror/gta.zip", "ini")


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
    assert settings.report == in_subdir / "r.json"
    assert settings.report_md == in_subdir / "r.md"
    assert settings.cache_dir == in_subdir / "cache"
    assert settings.tool_cassettes == in_subdir / "cassettes"
    assert (settings.data, settings.data_source) == (in_subdir / "mydata", "--gta-data")
    assert settings.data_dir == in_subdir / "datasets"


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

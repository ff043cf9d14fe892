"""``--gta-inspect-log=DIR``: a run as Inspect AI eval logs, read back with Inspect's own reader.

Real runs on the bundled sample (the oracle in both modes, an OpenCompass prediction file that
fails every query, two epochs, two shards merged, a model behind a real HTTP server whose URL
carries a password) write their logs; ``inspect_ai.log.read_eval_log`` reads every file, whole
and as ``inspect view`` lists it (``header_only``), and each sample and metric is checked against
the run's own JSON report, read as the typed report the logs are written from. Inspect's CLI
(``inspect log dump``) parses the file too.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_gta.options.report import check_inspect_log
from pytest_gta.report.inspect_log import MODE_METRICS, eval_logs, log_file_name
from pytest_gta.results.io import parse_report
from pytest_gta.results.recorded import Step as RecordedStep
from pytest_gta.results.report import RunReport
from pytest_gta.scoring.aggregate import E2E_METRICS, STEP_METRICS
from tests.helpers.gta_run import (
    BOTH_MODES,
    FAST_SIM,
    ORACLE,
    SAMPLE_DATA,
    gta,
    gta_process,
    read_report,
)
from tests.helpers.optional import require
from tests.helpers.scripted_server import ScriptedServer, Step, chat_completion
from tests.test_gates import write_predictions

require("inspect_ai")
from inspect_ai import log as inspect_log  # noqa: E402

LOGS = "--gta-inspect-log=logs"


def read_logs(directory: Path, header_only: bool = False) -> dict[str, Any]:
    """Every log in ``directory`` by its task (``gta_step``, ``gta_e2e``), read by Inspect."""
    found = sorted(directory.glob("*.eval"))
    logs = [inspect_log.read_eval_log(str(p), header_only=header_only) for p in found]
    assert len({log.eval.task for log in logs}) == len(logs), [p.name for p in found]
    return {log.eval.task: log for log in logs}


def typed(data: dict[str, Any]) -> RunReport:
    """A run's JSON report as the typed report the session writes the logs from."""
    return parse_report("gta.json", data).report


def check_against_report(directory: Path, report: RunReport, status: str = "success"):
    """The logs hold the report's cases and metrics, one log per mode the run ran."""
    logs = read_logs(directory)
    modes = report.settings.modes
    assert sorted(logs) == sorted(f"gta_{m}" for m in modes)
    for mode in modes:
        log = logs[f"gta_{mode}"]
        assert log.status == status
        assert log.eval.model == report.model
        assert log.eval.dataset.location == report.dataset.path
        assert log.eval.metadata["dataset_sha256"] == report.dataset.sha256
        assert log.eval.task_args["mode"] == mode
        cases = {(c.query_id, c.epoch or 0): c for c in report.cases if c.mode == mode}
        assert len(log.samples) == len(cases)
        epochs = sorted({e for _, e in cases})
        for sample in log.samples:
            case = cases[(sample.metadata["query_id"], epochs[sample.epoch - 1])]
            assert sample.id == f"{mode}-{case.query_id}"
            assert sample.metadata["case_id"] == case.id
            score = sample.scores["gta"]
            assert score.value == case.score
            assert score.metadata["outcome"] == case.outcome
            assert (score.explanation or "") == case.message
        # The results' metrics are the report's, number for number.
        metrics = log.results.scores[0].metrics
        expected = {k: v for k, v in report.metrics.get(mode) or () if isinstance(v, int | float)}
        expected["pass_rate"] = report.pass_rate.get(mode)
        assert {k: m.value for k, m in metrics.items()} == expected
        ci = dict(report.metrics_ci.get(mode) or ())
        for name, metric in metrics.items():
            if name in ci:
                assert metric.metadata == ci[name].to_json_value()
        assert log.results.total_samples == len(cases)
        # What `inspect view` lists: the header alone, with the same results.
        header = inspect_log.read_eval_log(log.location, header_only=True)
        assert header.samples is None
        assert header.results == log.results
        assert header.eval.task_id in Path(log.location).name
    return logs


def test_the_metrics_are_table_4s_in_its_order():
    """The metric names come from the report's sections, in the scorer's order (headline first)."""
    assert MODE_METRICS == {"step": STEP_METRICS, "e2e": E2E_METRICS}


@pytest.fixture(scope="module")
def oracle_run(tmp_path_factory) -> tuple[Path, RunReport]:
    """The oracle in both modes, in a fresh process: its log directory and its report."""
    cwd = tmp_path_factory.mktemp("oracle")
    run = gta_process(cwd, SAMPLE_DATA, ORACLE, BOTH_MODES, FAST_SIM, LOGS)
    return cwd / "logs", typed(run.report)


def test_an_oracle_run_reads_back_sample_by_sample(oracle_run):
    directory, report = oracle_run
    logs = check_against_report(directory, report)
    e2e = logs["gta_e2e"]
    assert e2e.eval.run_id == logs["gta_step"].eval.run_id
    assert next(iter(e2e.results.scores[0].metrics)) == "ans_acc"  # Inspect's headline
    sample = next(s for s in e2e.samples if s.id == "e2e-3")
    query = next(c for c in report.cases if c.id == "e2e-3")
    assert sample.input.startswith("The first picture shows what my two friends and I ordered")
    assert sample.metadata["files"][0].endswith("image/image_8.jpg")
    assert sample.target == ["15.10 / 15.1", "5.03"]  # every group, any alternative
    assert sample.metadata["reference"]["whitelist"] == [["15.10", "15.1"], ["5.03"]]
    # The transcript: the query, then each call with its tool reply, then the answer.
    roles = [m.role for m in sample.messages]
    assert roles == ["user"] + ["assistant", "tool"] * 5 + ["assistant"]
    first = sample.messages[1]
    assert first.text.startswith("Thought:I need to count the cups")
    assert first.tool_calls[0].function == "CountGivenObject"
    assert first.tool_calls[0].arguments["text"] == "coffee cup"
    assert sample.messages[2].tool_call_id == first.tool_calls[0].id
    assert sample.messages[2].text == "3"
    assert sample.output.completion == query.steps[-1].content
    # Step mode: each prediction, then the reference step the next request was given.
    step = next(s for s in logs["gta_step"].samples if s.id == "step-0")
    assert [m.role for m in step.messages] == ["user"] + ["assistant", "system"] * 3
    assert step.messages[2].text.startswith("Reference step 1: called OCR with")
    assert "fixtures/gta_sample/image/image_0.jpg" in step.messages[2].text


def test_the_file_is_named_and_listed_as_inspect_does(oracle_run):
    directory, _ = oracle_run
    listed = inspect_log.list_eval_logs(str(directory))
    assert sorted(info.task for info in listed) == ["gta-e2e", "gta-step"]
    for info in listed:
        header = inspect_log.read_eval_log(info.name, header_only=True)
        assert Path(info.name).name == log_file_name(
            header.eval.created, header.eval.task_args["mode"], header.eval.task_id
        )
        assert info.task_id == header.eval.task_id


def test_inspect_cli_dumps_the_log(oracle_run):
    directory, report = oracle_run
    path = next(directory.glob("*gta-e2e*.eval"))
    require("inspect-cli")
    inspect_cli = Path(sys.executable).with_name("inspect")
    done = subprocess.run(
        [str(inspect_cli), "log", "dump", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    dumped = json.loads(done.stdout)
    assert dumped["status"] == "success"
    assert report.outcomes_by_mode.e2e is not None
    assert len(dumped["samples"]) == report.outcomes_by_mode.e2e.passed


def test_status_identity_and_errored_cases_come_from_the_report(oracle_run, sample_dataset):
    _, report = oracle_run
    report = report.model_copy(deep=True)
    assert [log.status for log in eval_logs(report, sample_dataset)] == ["success", "success"]
    report.label = report.identity.label = "nightly [react]"
    report.identity.started_at = "2026-02-03T10:00:00Z"
    report.identity.finished_at = "2026-02-03T10:05:30+00:00"
    errored = next(c for c in report.cases if c.id == "e2e-5")
    errored.outcome, errored.score = "error", 0.0
    errored.message = "ConnectError: the model went away"
    report.interrupted, report.interrupted_by = True, "SIGTERM"
    step, e2e = eval_logs(report, sample_dataset)
    assert (e2e.status, e2e.error.message) == ("cancelled", "interrupted by SIGTERM")
    assert step.status == "cancelled"
    assert step.eval.run_id == e2e.eval.run_id
    assert e2e.eval.created == "2026-02-03T10:00:00+00:00"
    assert (e2e.stats.started_at, e2e.stats.completed_at) == (
        "2026-02-03T10:00:00+00:00",
        "2026-02-03T10:05:30+00:00",
    )
    assert e2e.eval.metadata["label"] == "nightly [react]"
    assert "nightly [react]" in e2e.eval.tags
    assert log_file_name(e2e.eval.created, "e2e", e2e.eval.task_id).startswith(
        "2026-02-03T10-00-00-00-00_gta-e2e_"
    )
    sample = next(s for s in e2e.samples if s.id == "e2e-5")
    assert sample.error.message == "ConnectError: the model went away"
    assert sample.scores["gta"].value == 0.0
    assert e2e.results.completed_samples == 16
    report.interrupted, report.stopped = False, "--gta-max-cost=0.5 reached"
    assert eval_logs(report, sample_dataset)[0].status == "error"
    # Written twice, the same report gives the same ids (a file is replaced, not duplicated).
    assert eval_logs(report, sample_dataset)[1].eval.task_id == e2e.eval.task_id


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(
                    st.sampled_from(["role", "content", "tool_calls", "function", "error", "x"]),
                    inner,
                    max_size=4,
                )
            ),
            max_leaves=12,
        )
        | st.fixed_dictionaries(
            {"role": st.sampled_from(["assistant", "tool"])},
            optional={
                "content": st.none() | st.text() | st.lists(st.dictionaries(st.text(), st.text())),
                "tool_calls": st.lists(
                    st.fixed_dictionaries(
                        {
                            "function": st.fixed_dictionaries(
                                {
                                    "name": st.text() | st.integers() | st.none(),
                                    "arguments": st.text()
                                    | st.dictionaries(st.text(), st.integers())
                                    | st.none(),
                                }
                            )
                        }
                    ),
                    max_size=2,
                ),
                "error": st.none() | st.dictionaries(st.text(), st.text()) | st.text(),
            },
        ),
        max_size=6,
    ),
    replies=st.lists(st.text(), max_size=4),
)
def test_any_recorded_steps_make_a_valid_log(oracle_run, sample_dataset, steps, replies):
    """Prediction files hold whatever their harness wrote: the log is still Inspect's."""
    _, report = oracle_run
    report = report.model_copy(deep=True)
    for case in report.cases[:: len(report.cases) // 2]:
        case.steps, case.replies = [RecordedStep(s) for s in steps], replies
    for log in eval_logs(report, sample_dataset):
        again = inspect_log.EvalLog.model_validate_json(log.model_dump_json())
        assert len(again.samples) == len(log.samples) == 17


def test_failing_prediction_file(pytester, sample_dataset):
    predictions = write_predictions(pytester.path / "bad", sample_dataset, bad=True)
    run = gta(
        pytester,
        SAMPLE_DATA,
        f"--gta-model=opencompass:{predictions}",
        FAST_SIM,
        LOGS,
    )
    assert run.ret == pytest.ExitCode.TESTS_FAILED, run.output[-3000:]
    logs = check_against_report(pytester.path / "logs", typed(run.report))
    samples = logs["gta_e2e"].samples
    assert {s.scores["gta"].metadata["outcome"] for s in samples} == {"failed"}
    assert all(s.scores["gta"].explanation for s in samples)
    assert {s.output.completion for s in samples} == {" I do not know"}
    assert logs["gta_e2e"].results.scores[0].metrics["ans_acc"].value < 5
    run.result.stdout.fnmatch_lines([f"report written to {pytester.path / 'logs'}"])


def test_epochs_are_inspect_epochs(pytester):
    run = gta(pytester, SAMPLE_DATA, ORACLE, FAST_SIM, "--gta-epochs=2", LOGS)
    assert run.ret == pytest.ExitCode.OK, run.output[-3000:]
    logs = check_against_report(pytester.path / "logs", typed(run.report))
    log = logs["gta_e2e"]
    assert log.eval.config.epochs == 2
    assert sorted((s.id, s.epoch) for s in log.samples) == sorted(
        (f"e2e-{q}", e) for q in range(17) for e in (1, 2)
    )
    assert {s.metadata["case_id"] for s in log.samples if s.epoch == 2} == {
        f"e2e-{q}@epoch1" for q in range(17)
    }


def test_a_merge_of_shards_writes_the_log(pytester):
    for k in (1, 2):
        shard = gta(
            pytester, SAMPLE_DATA, ORACLE, FAST_SIM, f"--gta-shard={k}/2", report=f"s{k}.json"
        )
        assert shard.ret == pytest.ExitCode.OK, shard.output[-3000:]
    merged = pytester.runpytest(
        "--gta-merge", "s1.json", "s2.json", "--gta-report=merged.json", LOGS
    )
    assert merged.ret == 0, merged.stderr.str()
    merged.stdout.fnmatch_lines([f"pytest-gta: written to {pytester.path / 'logs'}"])
    report = typed(read_report(pytester.path / "merged.json"))
    logs = check_against_report(pytester.path / "logs", report)
    assert len(logs["gta_e2e"].samples) == 17
    assert logs["gta_e2e"].eval.metadata["merged"]["shards"] == ["1/2", "2/2"]


def test_an_unwritable_directory_is_reported_not_raised(pytester):
    pytester.path.joinpath("blocker").write_text("a file where the directory should be")
    run = gta(pytester, SAMPLE_DATA, ORACLE, FAST_SIM, "--gta-inspect-log=blocker/logs")
    assert run.ret == pytest.ExitCode.TESTS_FAILED
    run.result.stdout.fnmatch_lines(
        ["pytest-gta: could not write */blocker/logs (--gta-inspect-log): *"]
    )
    assert "Traceback" not in run.output
    assert typed(run.report).outcomes.passed == 17  # the other files are still written
    merged = pytester.runpytest(
        "--gta-merge", "gta.json", SAMPLE_DATA, "--gta-inspect-log=blocker/logs"
    )
    assert merged.ret == pytest.ExitCode.TESTS_FAILED
    merged.stdout.fnmatch_lines(
        ["pytest-gta: could not write */blocker/logs (--gta-inspect-log): *"]
    )


def test_without_inspect_ai_the_option_is_a_usage_error(pytester, monkeypatch):
    monkeypatch.setitem(sys.modules, "inspect_ai", None)  # what find_spec sees when absent
    with pytest.raises(pytest.UsageError, match=r'pip install "pytest-gta\[inspect\]"'):
        check_inspect_log(Path("logs"))
    check_inspect_log(None)
    result = pytester.runpytest(SAMPLE_DATA, ORACLE, LOGS)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (
        "--gta-inspect-log writes Inspect AI logs through the inspect_ai package, which is not "
        'installed; pip install "pytest-gta[inspect]"'
    ) in result.stderr.str()
    assert not (pytester.path / "logs").exists()


PASSWORD = "urlpw-inspect-4c2e8a"


def test_a_secret_in_the_model_url_is_not_in_the_log(pytester, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-inspect-test")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    answer = Step(chat_completion(f"Thought: done\nFinal Answer: the password is {PASSWORD}"))
    with ScriptedServer(models=["scripted"], default=answer) as server:
        url = server.url.replace("http://", f"http://gta:{PASSWORD}@")
        run = gta(
            pytester,
            "--gta-model=openai/scripted",
            f"--gta-base-url={url}",
            SAMPLE_DATA,
            FAST_SIM,
            "--gta-ids=0",
            LOGS,
        )
    assert run.ret == pytest.ExitCode.TESTS_FAILED, run.output[-3000:]
    (path,) = (pytester.path / "logs").glob("*.eval")
    with zipfile.ZipFile(path) as archive:
        text = "".join(archive.read(n).decode("utf-8") for n in archive.namelist())
    assert "[redacted URL password]" in text  # the model's answer, as the report has it
    assert PASSWORD not in text
    log = read_logs(pytester.path / "logs")["gta_e2e"]
    assert log.eval.model_base_url == url.replace(PASSWORD, "***")

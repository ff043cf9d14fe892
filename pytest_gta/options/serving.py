"""One model server for the session (``--gta-serve``), and the command templates it starts.

Its part of the settings is :class:`ServeSettings`; :mod:`pytest_gta.session.model_server`
decides from it whether a server runs. :func:`template_words` checks a command template
without a shell, for the server's and for an agent's (:mod:`pytest_gta.options.agents`).
"""

from __future__ import annotations

import shlex
import string
from dataclasses import dataclass
from typing import Literal

from pytest_gta.flags import OPT_CONCURRENCY, OPT_SERVE, OPT_SERVE_COMMAND, OPT_SERVE_TIMEOUT
from pytest_gta.options.core import Feature, Given, OptionSpec, fields, usage_error

#: ``--gta-serve``: whether one model server is started for the session (session/model_server.py).
ServeMode = Literal["auto", "vllm", "none"]
SERVE_MODES: tuple[ServeMode, ...] = ("auto", "vllm", "none")
#: A 72B model's weights take minutes to load from a network disk.
DEFAULT_SERVE_TIMEOUT = 1800.0
#: What a ``--gta-serve-command`` template may name.
PLACEHOLDERS = ("port", "model", "host")


def template_words(
    template: str,
    *,
    flag: str = OPT_SERVE_COMMAND,
    placeholders: tuple[str, ...] = PLACEHOLDERS,
    required: str | None = "port",
    what: str = "server",
    example: str = "'python -m sglang.launch_server --model-path {model} --host {host} "
    "--port {port}'",
) -> list[str]:
    """The words of a command template (``--gta-serve-command``), checked; no shell is involved.

    ``--gta-agent-command`` checks its template here too, with its own ``placeholders`` and
    nothing ``required``.

    Raises:
        pytest.UsageError: unbalanced quotes, no words, a stray brace, a placeholder other
            than ``placeholders`` (with no conversion or format spec), or no ``{required}``
            (for a server: the plugin could not tell it where to listen).
    """
    shown_flag = f"{flag}={template!r}"
    try:
        words = shlex.split(template)
    except ValueError as exc:
        raise usage_error(f"{shown_flag}: {exc} (balance the quotes)") from None
    if not words:
        raise usage_error(f"{shown_flag}: give the {what}'s command, e.g. {example}")
    seen: set[str] = set()
    allowed = ", ".join("{" + p + "}" for p in placeholders)
    for word in words:
        try:
            parts = list(string.Formatter().parse(word))
        except ValueError as exc:
            hint = "write {{ and }} for literal braces"
            raise usage_error(f"{shown_flag}: {exc} in {word!r}; {hint}") from None
        for _, name, spec, conversion in parts:
            if name is None:
                continue
            if name not in placeholders or spec or conversion:
                raise usage_error(
                    f"{shown_flag}: unknown placeholder {{{name}"
                    f"{'!' + conversion if conversion else ''}"
                    f"{':' + spec if spec else ''}}} in {word!r}; the template may use {allowed}"
                )
            seen.add(name)
    if required is not None and required not in seen:
        raise usage_error(f"{shown_flag}: put {{{required}}} where the server takes its port")
    return words


def parse_serve_command(value: str) -> str:
    """An option parser: the template, checked by :func:`template_words`."""
    template_words(value)
    return value.strip()


def parse_serve(value: str) -> ServeMode:
    """``auto``, ``vllm`` or ``none``."""
    for mode in SERVE_MODES:
        if value.strip() == mode:
            return mode
    raise usage_error(
        f"{OPT_SERVE}={value}: choose auto (one managed server for an open-weight model under "
        f"xdist or {OPT_CONCURRENCY} above 1), vllm (always vllm serve) or none"
    )


def parse_serve_timeout(value: str) -> float:
    """Seconds the server may take to answer ``/health``."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    # At most a day (docs/options.md): 1e308 would overflow the socket's timeval.
    if not 0 < seconds <= 86_400:
        raise usage_error(
            f"{OPT_SERVE_TIMEOUT}={value[:40]}: give a positive number of seconds, at most "
            f"86,400 (default {DEFAULT_SERVE_TIMEOUT:g}: a 72B model takes minutes to load)"
        )
    return seconds


@dataclass(frozen=True)
class ServeSettings:
    """Whether and how one model server is started for the session."""

    #: ``--gta-serve``: auto, vllm or none (see pytest_gta.session.model_server).
    mode: ServeMode = "auto"
    #: ``--gta-serve-command``: the server template, checked; ``None``: vllm serve.
    command: str | None = None
    #: ``--gta-serve-timeout``: seconds the server may take to become healthy.
    timeout: float = DEFAULT_SERVE_TIMEOUT


ROWS: tuple[OptionSpec, ...] = (
    OptionSpec(
        OPT_SERVE,
        "KIND",
        "start one model server for the session: auto (default: for an open-weight model under "
        f"xdist or {OPT_CONCURRENCY} above 1, without a base URL), vllm or none",
        parse=parse_serve,
        default="auto",
        setting="mode",
        doc_default="`auto`",
        doc="one model server for the session, shared by the xdist workers: `auto` (for an "
        f"open-weight model under `-n` or `{OPT_CONCURRENCY}` above 1, without a base URL), "
        "`vllm` (always `vllm serve`) or `none` (see [Serving](serving.md))",
    ),
    OptionSpec(
        OPT_SERVE_COMMAND,
        "TEMPLATE",
        "command of the OpenAI-compatible server to start instead of vllm serve, with {port}, "
        "{model} and {host}, e.g. 'llama-server -m model.gguf --port {port}'",
        parse=parse_serve_command,
        setting="command",
        doc_default="none",
        doc="start this OpenAI-compatible server instead of `vllm serve`; `{port}`, `{model}`, "
        "`{host}` are filled in",
    ),
    OptionSpec(
        OPT_SERVE_TIMEOUT,
        "SECONDS",
        f"how long the model server may take to answer /health (default: "
        f"{DEFAULT_SERVE_TIMEOUT:g})",
        parse=parse_serve_timeout,
        default=DEFAULT_SERVE_TIMEOUT,
        setting="timeout",
        doc_default="`1800`",
        doc="how long the server may take to answer `/health` (weights loading)",
        doc_range="more than 0, up to 86,400 seconds",
    ),
)
FEATURE = Feature("serve", ROWS, {})


def settings(given: Given) -> ServeSettings:
    """The model server's part of the settings, from the rows' resolved values."""
    return ServeSettings(**fields(ROWS, given))

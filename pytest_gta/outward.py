"""What leaves a pytest-gta process: values every writer accepts, with no secret in them.

Everything a run writes or sends between processes (the terminal, JUnit XML, the JSON and
markdown reports, the response cache, tool cassettes, xdist's transport of test reports) may
carry text that came from outside: a model's reply, a tool's output, a prediction file. Such text
can hold what no writer accepts (a lone surrogate makes UTF-8 encoders and execnet fail, a NaN is
not JSON, a 5,000-digit integer cannot even be turned into a string) and what must never be
written (an API key a model or a tool managed to read). :class:`Cleaner` turns any value into
JSON-able builtins with those problems removed, and is applied at every exit, whatever path a
value took to get there.

Secrets are every credential the run was given, wherever it came from: the values of the
environment variables the plugin knows to hold credentials (the provider and vendor API keys,
``HF_TOKEN``, the Serper and Mathpix keys) and of any variable named like one (a word of its name
ends in KEY, SECRET, TOKEN, PASSWORD, PASSWD, CREDENTIAL or AUTH: ``AWS_SECRET_ACCESS_KEY``,
``MY_SERVICE_KEY``), each occurrence becoming ``[redacted $NAME]``; and the credentials a run
is handed in its options (:func:`register_run_secrets`): the password of a URL
(``http://user:PASS@host/v1``, in ``--gta-base-url``, any other option or any variable), the
header values and credential-named entries of ``--gta-model-args``, the key of the variable
``api_key_env`` names. Values are matched as they are, never by name, so a key an endpoint
echoes in an error body, a model repeats or a tool prints is caught on whatever path it takes.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_gta.jsonsafe import MAX_DEPTH

#: Credentials the plugin or its tools read, by name.
SECRET_VARIABLES = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "SERPER_API_KEY",
    "MATHPIX_APP_ID",
    "MATHPIX_APP_KEY",
    "GTA_VLM_API_KEY",
)
#: Any variable with a word of its name ending in one of these (or in one of these plus S) is
#: treated as a credential, known to the plugin or not: vendor keys of the catalog, CI tokens,
#: ``AWS_SECRET_ACCESS_KEY``, ``MY_SERVICE_KEY``, ``DB_PASSWD``, ``GITHUB_APP_CREDENTIALS``.
#: Words, not substrings: ``AUTHOR`` in ``GIT_AUTHOR_NAME`` or ``TOKENIZERS_PARALLELISM`` are not.
SECRET_WORDS = ("KEY", "SECRET", "TOKEN", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
#: Shorter values ("1", "EMPTY", "true") are not secrets and would redact ordinary words.
MIN_SECRET_LENGTH = 8
#: Integers longer than this cannot be written by ``json`` (CPython's 4,300-digit limit).
MAX_INT_BITS = 4096
#: What stands for a password in a URL shown anywhere (``http://user:***@host/v1``).
MASK = "***"

_SURROGATE = re.compile("[\ud800-\udfff]")
#: What a terminal acts on instead of showing: C0 and C1 controls (an escape sequence can set
#: the window's title, clear the screen or hide what follows), DEL, and the bidirectional
#: overrides that reorder what is shown. Newlines and tabs stay.
_TERMINAL_ACTIVE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_NAME_WORD = re.compile("[A-Z0-9]+")
#: The userinfo of a URL: ``scheme://user:password@`` or ``scheme://token@``. The password runs
#: to the last ``@`` before the path, as ``urllib.parse.urlsplit`` reads it.
_USERINFO = re.compile(
    r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/?#@\s:]*)"
    r"(?::(?P<password>[^/?#\s]*))?@(?=[^/?#\s@]*(?:[/?#\s]|$))"
)
#: Model-args keys whose values are credentials whatever their shape (``headers``: every value).
_HEADER_ARGS = ("headers", "default_headers", "extra_headers")

#: Credentials the run was handed outside known variables: ``{value: label}``.
_given: dict[str, str] = {}
_registering = threading.Lock()


def is_secret_name(name: str) -> bool:
    """Whether the environment variable ``name`` holds a credential (see :data:`SECRET_WORDS`)."""
    upper = name.upper()
    if upper in SECRET_VARIABLES:
        return True
    return any(
        word.endswith(SECRET_WORDS) or word.removesuffix("S").endswith(SECRET_WORDS)
        for word in _NAME_WORD.findall(upper)
    )


def register_secret(value: Any, label: str) -> None:
    """Treat ``value`` as a credential from now on, shown as ``[redacted <label>]``.

    Values shorter than :data:`MIN_SECRET_LENGTH` (after stripping) are ignored: redacting
    ``"1"`` or ``"EMPTY"`` everywhere would garble every report and protect nothing.
    """
    if not isinstance(value, str):
        return
    value = value.strip()
    if len(value) < MIN_SECRET_LENGTH:
        return
    with _registering:
        _given.setdefault(value, label)


def forget_registered_secrets() -> None:
    """Drop what :func:`register_secret` gathered (a new session in the same process)."""
    with _registering:
        _given.clear()


def secrets(environ: Mapping[str, str] | None = None) -> tuple[tuple[str, str], ...]:
    """``(label, value)`` of every secret known, longest value first.

    The label is ``$NAME`` for an environment variable, else what :func:`register_secret` was
    told. A value known under several labels keeps the variable's name, then the first one.
    """
    env = os.environ if environ is None else environ
    found = {
        ("$" + name, value.strip())
        for name, value in env.items()
        if is_secret_name(name) and len(value.strip()) >= MIN_SECRET_LENGTH
    }
    known = {value for _, value in found}
    found.update((label, value) for value, label in tuple(_given.items()) if value not in known)
    return tuple(sorted(found, key=lambda item: (-len(item[1]), item[0])))


def mask_url(text: str) -> str:
    """``text`` with the password of every URL in it shown as :data:`MASK`.

    ``http://user:PASS@host/v1`` becomes ``http://user:***@host/v1``; a URL whose userinfo is a
    single part (``https://TOKEN@host``, how tokens are often passed) shows ``***@`` instead.
    """

    def masked(match: re.Match[str]) -> str:
        if match["password"] is None:
            return f"{match['scheme']}{MASK}@" if match["user"] else match.group(0)
        return f"{match['scheme']}{match['user']}:{MASK}@"

    return _USERINFO.sub(masked, text)


def url_credentials(text: str) -> list[str]:
    """The credentials in the URLs inside ``text``, as written and as sent.

    The password as written (maybe percent-encoded), decoded (what an HTTP client sends), and
    the ``user:password`` pair base64-encoded (the ``Authorization: Basic`` value an echoing
    endpoint may quote back); a lone userinfo part (a token) the same way.
    """
    import base64
    from urllib.parse import unquote

    out: list[str] = []
    for match in _USERINFO.finditer(text):
        user, password = match["user"], match["password"]
        if password is None:
            user, password = "", user
        plain = unquote(password)
        pair = f"{unquote(user)}:{plain}".encode()
        out += [password, plain, base64.b64encode(pair).decode("ascii")]
    return out


def header_credentials(value: Any) -> list[str]:
    """A header value, and its credential alone when it is ``<scheme> <credential>``."""
    if not isinstance(value, str):
        return []
    scheme, _, credential = value.strip().partition(" ")
    return [value, credential] if credential and scheme.isalpha() else [value]


def register_run_secrets(
    texts: Iterable[str] = (),
    model_args: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> None:
    """Register every credential a run was handed outside the known variables.

    Args:
        texts: Option values and command-line arguments: the passwords of URLs in them
            (``--gta-base-url``, ``--gta-tools=agentlego=URL``...).
        model_args: ``--gta-model-args``: every header value (``headers``), the value of every
            key named like a credential (``api_key``), and the key in the variable
            ``api_key_env`` names, whatever that name is.
        environ: The environment (default ``os.environ``): URL passwords in any variable
            (``OPENAI_BASE_URL``, ``HTTPS_PROXY``...).
    """
    env = os.environ if environ is None else environ
    for text in (*texts, *env.values()):
        for credential in url_credentials(text):
            register_secret(credential, "URL password")
    args = model_args or {}
    for key, value in args.items():
        if key in _HEADER_ARGS and isinstance(value, Mapping):
            for header, header_value in value.items():
                for credential in header_credentials(header_value):
                    register_secret(credential, f"header {header}")
        elif _credential_arg(str(key)):
            register_secret(value, f"model arg {key}")
    key_env = args.get("api_key_env")
    if isinstance(key_env, str) and key_env:
        register_secret(env.get(key_env, ""), f"${key_env}")


def _credential_arg(key: str) -> bool:
    """Whether a model-args entry holds a credential (``api_key``; not ``api_key_env``).

    ``*_env`` entries name the variable that holds one, and a variable's name is no secret.
    """
    return is_secret_name(key) and not key.lower().endswith("_env")


def masked_model_args(model_args: Mapping[str, Any]) -> dict[str, Any]:
    """``--gta-model-args`` as reports show them: header values and credentials as ``***``."""
    shown: dict[str, Any] = {}
    for key, value in model_args.items():
        if key in _HEADER_ARGS and isinstance(value, Mapping):
            shown[key] = {header: MASK for header in value}
        elif _credential_arg(str(key)):
            shown[key] = MASK
        else:
            shown[key] = value
    return shown


@functools.lru_cache(maxsize=8)
def _pattern(found: tuple[tuple[str, str], ...]) -> tuple[re.Pattern[str], dict[str, str]] | None:
    if not found:
        return None
    names: dict[str, str] = {}
    for label, value in found:
        names.setdefault(value, label)
    alternation = "|".join(re.escape(value) for value in names)
    return re.compile(alternation), names


def redact(text: str, found: tuple[tuple[str, str], ...] | None = None) -> str:
    """``text`` with every secret value replaced by ``[redacted $NAME]`` (or its label)."""
    compiled = _pattern(secrets() if found is None else found)
    if compiled is None:
        return text
    pattern, names = compiled
    return pattern.sub(lambda m: f"[redacted {names[m.group(0)]}]", text)


def clip(text: str, limit: int) -> str:
    """``text`` redacted, then cut to ``limit`` characters, saying so.

    In that order: cutting first can leave the start of a key that straddles the cut, which no
    match by value finds afterwards.
    """
    text = redact(text)
    return text if len(text) <= limit else text[: max(limit - 3, 0)] + "..."


def head(text: str, limit: int) -> str:
    """At most ``limit`` characters from the start of ``text``, never the start of a secret.

    For windows read off something too large to redact whole (a reply's body): when the window
    cuts ``text``, its last word goes, since it may be the first part of a key.
    """
    if len(text) <= limit:
        return redact(text)
    window = text[:limit]
    cut = max(window.rfind(c) for c in " \t\r\n")
    return redact(window[:cut] if cut > 0 else "")


def redact_value(value: Any) -> Any:
    """``value`` with secrets redacted in every string, and nothing else changed.

    For stores that must keep what they hold exactly (the response cache, tool cassettes):
    lone surrogates and NaN survive there, a key does not.
    """
    found = secrets()
    if not found:
        return value
    return _redact_strings(value, found, 0)


def _redact_strings(value: Any, found: tuple[tuple[str, str], ...], level: int) -> Any:
    if isinstance(value, str):
        return redact(value, found)
    if level >= MAX_DEPTH:
        return value
    if isinstance(value, Mapping):
        return {
            _redact_strings(k, found, level + 1): _redact_strings(v, found, level + 1)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_redact_strings(v, found, level + 1) for v in value]
    return value


def clean_text(text: str, found: tuple[tuple[str, str], ...] | None = None) -> str:
    """Text any UTF-8 writer accepts (lone surrogates become U+FFFD), with secrets redacted."""
    if _SURROGATE.search(text):
        text = _SURROGATE.sub("\ufffd", text)
    return redact(text, found)


def terminal_text(text: str) -> str:
    r"""``text`` as a terminal may print it: each control character a visible escape (``\x1b``).

    Text from a report or a dataset (a label, a field's value, a file name) reaches the terminal
    in messages and tables; a report is a file anyone can edit.
    """
    return _TERMINAL_ACTIVE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


@dataclass
class Cleaner:
    """Turns values into JSON-able builtins for writing; counts what it had to change.

    Non-finite floats become ``None`` (strict JSON has no NaN), integers too long to print and
    structures nested deeper than :data:`~pytest_gta.jsonsafe.MAX_DEPTH` become a short
    placeholder, tuples become lists, mapping keys become strings, other objects their
    ``str()``; all text goes through :func:`clean_text`.
    """

    nonfinite: int = 0
    truncated: int = 0

    def __post_init__(self) -> None:
        self._secrets = secrets()

    def text(self, value: str) -> str:
        """One string, cleaned."""
        return clean_text(value, self._secrets)

    def value(self, value: Any, level: int = 0) -> Any:
        """A cleaned copy of ``value`` (see the class docstring)."""
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, int):
            if value.bit_length() > MAX_INT_BITS:
                self.truncated += 1
                return f"<integer of about {int(value.bit_length() * 0.30103)} digits>"
            return int(value)
        if isinstance(value, float):
            if not math.isfinite(value):
                self.nonfinite += 1
                return None
            return float(value)
        if level >= MAX_DEPTH and isinstance(value, Mapping | list | tuple | set | frozenset):
            self.truncated += 1
            return "<nested too deeply>"
        if isinstance(value, Mapping):
            return {self._key(k): self.value(v, level + 1) for k, v in value.items()}
        if isinstance(value, list | tuple | set | frozenset):
            return [self.value(v, level + 1) for v in value]
        number = _number(value)
        if number is not None:
            return self.value(number, level)
        return self.text(str(value))

    def _key(self, key: Any) -> str:
        return self.text(key if isinstance(key, str) else str(key))

    def notes(self) -> list[str]:
        """What the report should say about the changes made."""
        out = []
        if self.nonfinite:
            out.append(
                f"{self.nonfinite} value(s) were not finite numbers (NaN or Infinity, e.g. in "
                "prediction files) and are written as null, since JSON has no such numbers"
            )
        if self.truncated:
            out.append(
                f"{self.truncated} value(s) were too long or too deeply nested to write and "
                "are replaced by a short placeholder"
            )
        return out


def _number(value: Any) -> int | float | None:
    """NumPy and other numeric scalars as a Python number, else ``None``."""
    import numbers

    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return None


def clean(value: Any) -> Any:
    """A cleaned copy of ``value`` (see :class:`Cleaner`), when the counts are not needed."""
    return Cleaner().value(value)


def clean_pairs(pairs: Iterable[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """``user_properties``-style ``(name, value)`` pairs, cleaned for transport and writing."""
    cleaner = Cleaner()
    return [(cleaner.text(str(name)), cleaner.value(value)) for name, value in pairs]


def clean_report(report: Any) -> None:
    """Clean a ``TestReport`` in place: properties, failure text and captured output.

    A failure's representation is replaced by its (cleaned) text only when cleaning changed
    something, so ordinary tracebacks keep pytest's rich rendering.
    """
    report.user_properties = clean_pairs(report.user_properties)
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (path, line, reason)
        path, line, reason = longrepr
        report.longrepr = (path, line, clean_text(str(reason)))
    elif longrepr is not None:
        text = str(longrepr)
        cleaned = clean_text(text)
        if cleaned != text:
            report.longrepr = cleaned
    report.sections = [(clean_text(str(t)), clean_text(str(c))) for t, c in report.sections]
    extras = getattr(report, "extras", None)
    if isinstance(extras, list) and extras:
        # pytest-html's extras: the case's transcript is in an HTML extra.
        report.extras = Cleaner().value(extras)


class _RedactingFilter(logging.Filter):
    """Redacts secrets from pytest-gta's log records (live logging prints them as they come)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = clean_text(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


#: The loggers pytest-gta emits on (a logger's filters do not apply to its children).
LOGGERS = ("pytest_gta", "pytest_gta.models")


def install_log_filter() -> None:
    """Redact secrets in everything pytest-gta's loggers emit (idempotent)."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _RedactingFilter) for f in logger.filters):
            logger.addFilter(_RedactingFilter())

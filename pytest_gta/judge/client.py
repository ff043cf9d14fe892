"""The judge's clients: the official Responses API with uploads, and a chat-completions variant.

Both answer one leaf (``(prompt, files) -> LeafReply``) for :func:`pytest_gta.judge.walk.judge`,
through the response cache (a leaf's key is its prompt and the bytes and names of the files it
would send, so a re-run of the same deliverables costs nothing) and with the official client's
retries (the ``openai`` SDK's two, so an error reply is retried exactly as the official scorer
retries it). Each call is logged (:class:`CallLog`) for the report.

The official path (:class:`ResponsesJudge`) reproduces ``GPTEvaluator._call_openai`` request
for request: every file is uploaded again for every leaf (``purpose=user_data``), an image
becomes ``input_image``, audio is uploaded and then shown as a one-line note, a video is
uploaded and then its frames are uploaded and shown, a PDF (or a text file converted to one)
becomes ``input_file``, and CSV and the other suffixes are left out without a word.

Where the judge is reached (:func:`judge_served`): an endpoint given by ``--gta-judge-base-url``
or the official variables, else the OpenAI API for an ``openai/...`` judge, else a model served
in pytest's process. Only the OpenAI API needs a key: an endpoint without one is sent the
placeholder ``EMPTY`` (the SDK refuses no key at all; local OpenAI-compatible servers ignore
it, and one that wants a real key answers 401, which the SDK does not retry). Each checkpoint's
call has one deadline (:mod:`.deadline`).
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from pytest_gta.flags import OPT_JUDGE, OPT_JUDGE_API, OPT_JUDGE_BASE_URL
from pytest_gta.judge.deadline import judge_http_client, leaf_deadline, timed_out
from pytest_gta.judge.files import convert_to_pdf, file_text, video_frames
from pytest_gta.judge.protocol import TEMPERATURE, attached, audio_note, handling
from pytest_gta.judge.walk import LeafReply
from pytest_gta.models.generation import DEFAULT_MAX_REPLY_BYTES, DEFAULT_TIMEOUT
from pytest_gta.results.workflow import JudgeServed
from pytest_gta.types import ModelOutput, Usage

if TYPE_CHECKING:
    import openai

    from pytest_gta.models.cache import ResponseCache
    from pytest_gta.models.usage import Budget

#: The key variables, in the order the official client reads them.
KEY_VARIABLES = ("OPENAI_API_KEY", "EVAL_OPENAI_API_KEY")
BASE_URL_VARIABLES = ("OPENAI_BASE_URL", "EVAL_OPENAI_BASE_URL")
#: The official client's retries (the SDK's default).
RETRIES = 2
#: The key sent to an endpoint when no key is set (the official configs' ``key='EMPTY'``).
NO_KEY = "EMPTY"


def normalize_base_url(url: str | None) -> str | None:
    """The official scorer's fix of a chat-completions URL given for the Responses API."""
    if not url:
        return None
    u = url.strip().rstrip("/")
    for suffix in ("/v1/chat/completions", "/chat/completions"):
        if u.endswith(suffix):
            u = u[: -len(suffix)]
    return u


def judge_key() -> str | None:
    """The judge's key from the official variables (``OPENAI_API_KEY`` first, as it reads)."""
    for name in KEY_VARIABLES:
        value = os.environ.get(name)
        if value:
            return value
    return None


def judge_base_url(explicit: str | None) -> str | None:
    """``--gta-judge-base-url``, else the official variables."""
    if explicit:
        return normalize_base_url(explicit)
    for name in BASE_URL_VARIABLES:
        value = os.environ.get(name)
        if value:
            return normalize_base_url(value)
    return None


def judge_served(judge: str, base_url: str | None) -> JudgeServed:
    """Where ``judge`` is reached, given its resolved endpoint (:func:`judge_base_url`).

    An endpoint always wins; without one an ``openai/...`` judge is OpenAI's, and any other is
    built here like a model under test and answered by a proxy in pytest's process.
    """
    if base_url is not None:
        return "endpoint"
    return "openai" if judge.startswith("openai/") else "process"


def missing_access(judge: str, base_url: str | None) -> str | None:
    """Why ``judge`` cannot be reached at all (``None``: it can), for the start-up check.

    Only the OpenAI API needs a key: with neither a key nor an endpoint every judge call would
    fail (after the SDK's retries, as many connection errors as there are checkpoints).
    """
    if judge_served(judge, base_url) != "openai" or judge_key() is not None:
        return None
    keys = " or ".join(KEY_VARIABLES)
    urls = ", ".join(BASE_URL_VARIABLES)
    return (
        f"{OPT_JUDGE}={judge} is judged over the OpenAI API, but no key is set: set "
        f"{keys} (read in that order, as the official scorer reads them), or point "
        f"{OPT_JUDGE_BASE_URL}=URL (or {urls}) at an OpenAI-compatible server (a local one needs "
        f"no key), or judge with a model run here: {OPT_JUDGE}=MODEL {OPT_JUDGE_API}=chat (not "
        "the official protocol)"
    )


def _sha256(path: str) -> str | None:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()


@dataclass
class CallLog:
    """One judge call as the report shows it."""

    prompt: str
    #: Each attached file: its name and what became of it (``input_file``, ``input_image``,
    #: ``note``, ``frames:N``, ``skipped``, ``not uploaded``...).
    files: list[dict[str, str]] = field(default_factory=list)
    reply: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cached: bool = False
    duration: float = 0.0
    error: str | None = None


class BaseJudge:
    """What both clients share: the cache, the logs, and the cost counters."""

    protocol = "responses"
    official = True

    def __init__(
        self,
        model: str,
        base_url: str | None,
        key: str | None,
        cache: ResponseCache | None,
        budget: Budget | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
    ) -> None:
        self.model = model
        self.budget = budget
        #: Seconds one checkpoint's call may take, uploads and retries included.
        self.timeout = timeout
        self.max_reply_bytes = max_reply_bytes
        self.base_url = base_url
        self._key = key
        self.cache = cache
        self.logs: list[CallLog] = []
        self.usage = Usage()
        self._lock = threading.Lock()
        self._client: openai.OpenAI | None = None

    def client(self) -> openai.OpenAI:
        """The ``openai`` client, made on first use (the SDK is heavy to import)."""
        if self._client is None:
            import openai

            self._client = openai.OpenAI(
                api_key=self._key or NO_KEY,
                base_url=self.base_url,
                max_retries=RETRIES,
                timeout=self.timeout,
                # The SDK's own client settings, with the reply cap and the call's deadline.
                http_client=judge_http_client(
                    openai.APITimeoutError,
                    self.max_reply_bytes,
                    limits=openai.DEFAULT_CONNECTION_LIMITS,
                    follow_redirects=True,
                ),
            )
        return self._client

    def close(self) -> None:
        """Close the client's connections: the task's judging is over.

        None outlives the task for the garbage collector to finalise, unclosed, during whatever
        runs next (a ``ResourceWarning`` there).
        """
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def _material(self, prompt: str, files: Any) -> dict[str, Any]:
        sent = [
            {"name": PurePath(f.path).name, "kind": f.kind, "sha256": _sha256(f.path)}
            for f in attached(files)
        ]
        return {
            "judge": self.protocol,
            "model": self.model,
            "base_url": self.base_url,
            "temperature": TEMPERATURE,
            "prompt": prompt,
            "files": sent,
        }

    def __call__(self, prompt: str, files: Any) -> LeafReply:
        """Score one leaf: from the cache, else by the call (which raises when it fails)."""
        log = CallLog(prompt=prompt)
        started = time.perf_counter()
        key = None
        if self.cache is not None:
            key = self.cache.key(self._material(prompt, files))
            hit = self.cache.get(key)
            if hit is not None:
                usage = hit.usage or Usage()
                log.reply, log.cached = hit.text, True
                log.input_tokens, log.output_tokens = usage.input_tokens, usage.output_tokens
                self._record(log, started, Usage(usage.input_tokens, usage.output_tokens, 1, 1))
                return LeafReply(hit.text, usage.input_tokens, usage.output_tokens, cached=True)
        if self.budget is not None:
            self.budget.check()  # raises GtaBudgetExhausted: the session stops, as for the model
        workdir = tempfile.mkdtemp(prefix="gta-judge-")
        try:
            with leaf_deadline(self.timeout) as deadline:
                try:
                    text, tokens_in, tokens_out = self.call(prompt, files, log, workdir)
                except Exception as exc:
                    late = timed_out(deadline, exc)
                    failure = exc if late is None else late
                    log.error = f"{type(failure).__name__}: {failure}"
                    self._record(log, started, Usage(calls=1))
                    if late is not None:
                        raise late from exc
                    raise
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        log.reply, log.input_tokens, log.output_tokens = text, tokens_in, tokens_out
        self._record(log, started, Usage(tokens_in, tokens_out, 1, 0))
        if self.budget is not None:
            self.budget.add(Usage(tokens_in, tokens_out, 1, 0))
        if self.cache is not None and key is not None:
            output = ModelOutput(text, Usage(tokens_in, tokens_out, 1, 0))
            self.cache.put(key, output, {"judge": self.model})
        return LeafReply(text, tokens_in, tokens_out)

    def _record(self, log: CallLog, started: float, usage: Usage) -> None:
        log.duration = round(time.perf_counter() - started, 3)
        with self._lock:
            self.logs.append(log)
            self.usage = self.usage + usage

    def call(self, prompt: str, files: Any, log: CallLog, workdir: str) -> tuple[str, int, int]:
        """One call to the judge: ``(reply text, input tokens, output tokens)``."""
        raise NotImplementedError


class ResponsesJudge(BaseJudge):
    """The official protocol: the Files API, then one Responses API call per leaf."""

    def _upload(self, path: str) -> str | None:
        """A file's id, or ``None`` where it cannot be read or the upload fails (as officially)."""
        try:
            with open(path, "rb") as handle:
                return self.client().files.create(file=handle, purpose="user_data").id
        except Exception:
            return None

    def call(self, prompt: str, files: Any, log: CallLog, workdir: str) -> tuple[str, int, int]:
        """Upload each file as the official evaluator does, then one Responses API call."""
        blocks: list[dict[str, Any]] = [{"type": "input_text", "text": prompt}]
        for item in attached(files):
            name = PurePath(item.path).name
            how = handling(item.path)
            final = item.path if how == "upload" else None
            if how == "convert":
                final = convert_to_pdf(item.path, workdir)
            if final is None:
                log.files.append({"name": name, "sent": "skipped" if how == "skip" else "failed"})
                continue
            file_id = self._upload(final)
            if file_id is None:
                log.files.append({"name": name, "sent": "not uploaded"})
                continue
            if item.kind == "image":
                blocks.append({"type": "input_image", "file_id": file_id})
                sent = "input_image"
            elif item.kind == "audio":
                blocks.append({"type": "input_text", "text": audio_note(item.path)})
                sent = "note"
            elif item.kind == "video":
                frames = 0
                for frame in video_frames(item.path, workdir):
                    frame_id = self._upload(frame)
                    if frame_id:
                        blocks.append({"type": "input_image", "file_id": frame_id})
                        frames += 1
                sent = f"frames:{frames}"
            else:
                blocks.append({"type": "input_file", "file_id": file_id})
                sent = "input_file" if final == item.path else f"input_file:{Path(final).name}"
            log.files.append({"name": name, "sent": sent})
        response = self.client().responses.create(
            model=self.model,
            input=[{"role": "user", "content": blocks}],  # type: ignore[list-item,misc]
            temperature=TEMPERATURE,
        )
        usage = response.usage
        tokens_in = usage.input_tokens if usage is not None else 0
        tokens_out = usage.output_tokens if usage is not None else 0
        return response.output_text, tokens_in, tokens_out


def _data_url(path: str) -> str:
    suffix = PurePath(path).suffix.lower().lstrip(".")
    mime = "jpeg" if suffix in ("jpg", "jpeg") else suffix
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return f"data:image/{mime};base64,{data}"


def pdf_text(path: str) -> str | None:
    """A PDF's text, with ``pypdf`` where it is installed (``None``: not readable here)."""
    try:
        import pypdf
    except ImportError:
        return None
    try:
        reader = pypdf.PdfReader(path)
        return "\n".join(page.extract_text() or "" for page in reader.pages[:50])
    except Exception:
        return None


class ChatJudge(BaseJudge):
    """Not the official protocol: files rendered here into one chat-completions message.

    For judges that only speak chat completions (a local vLLM, llama.cpp or transformers
    server): images (and video frames) go as image parts, text files and PDFs as their text,
    audio as the official note; the same files are left out as officially. Every output marks
    a run judged this way as not the official protocol.
    """

    protocol = "chat"
    official = False

    def call(self, prompt: str, files: Any, log: CallLog, workdir: str) -> tuple[str, int, int]:
        """Render each file here, then one chat-completions call."""
        parts: list[dict[str, Any]] = [{"type": "text", "text": prompt}]
        for item in attached(files):
            name = PurePath(item.path).name
            how = handling(item.path)
            if how == "skip" or not os.path.isfile(item.path):
                log.files.append({"name": name, "sent": "skipped" if how == "skip" else "failed"})
                continue
            if item.kind == "image":
                parts.append({"type": "image_url", "image_url": {"url": _data_url(item.path)}})
                sent = "image"
            elif item.kind == "audio":
                parts.append({"type": "text", "text": audio_note(item.path)})
                sent = "note"
            elif item.kind == "video":
                frames = video_frames(item.path, workdir)
                parts += [{"type": "image_url", "image_url": {"url": _data_url(f)}} for f in frames]
                sent = f"frames:{len(frames)}"
            else:
                text = file_text(item.path) if how == "convert" else pdf_text(item.path)
                shown = text if text is not None else "(a PDF this judge cannot read)"
                parts.append({"type": "text", "text": f"[Attached file: {name}]\n{shown}"})
                sent = "text"
            log.files.append({"name": name, "sent": sent})
        completion = self.client().chat.completions.create(
            model=self.model,
            messages=[{"role": "user", "content": parts}],  # type: ignore[list-item,misc]
            temperature=TEMPERATURE,
        )
        usage = completion.usage
        text = completion.choices[0].message.content if completion.choices else ""
        tokens_in = usage.prompt_tokens if usage is not None else 0
        tokens_out = usage.completion_tokens if usage is not None else 0
        return text or "", tokens_in, tokens_out

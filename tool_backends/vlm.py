"""``vlm=<model>``: the GTA perception and creativity tools served by a vision-language model.

The official deployment needs a GPU for LLaVA-1.5 (ImageDescription, RegionAttributeDescription,
CountGivenObject), GLIP (TextToBbox), SDXL (TextToImage) and InstructPix2Pix
(ImageStylization). This backend stands in for them with any OpenAI-compatible endpoint, so a
run without a GPU still exercises every tool. The prompts are the ones AgentLego's LLaVA tools
send, and the answers are shaped like the official tools' outputs (a bare integer for
CountGivenObject, ``(x1, y1, x2, y2), score S`` lines for TextToBbox), so agents see the same
observation formats. Scores are not comparable with the leaderboard: a different model answers.

``--gta-tools=vlm=openai/gpt-4o-mini`` names the chat model; the endpoint comes from
``GTA_VLM_BASE_URL`` or ``OPENAI_BASE_URL`` and the key from ``OPENAI_API_KEY``. Images go
inline as base64 data URLs. The two image tools use ``images.generate`` / ``images.edit`` with
the model in ``GTA_VLM_IMAGE_MODEL`` (``gpt-image-1``; ``none`` turns them off).
"""

from __future__ import annotations

import base64
import io
import json
import mimetypes
import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pytest_gta.endpoint import bound_client, reply_limit_of
from pytest_gta.errors import GtaInfrastructureError, GtaToolError, GtaUsageError
from pytest_gta.flags import OPT_TOOLS
from pytest_gta.tools import (
    BaseToolBackend,
    ToolBackendContext,
    ToolContext,
    ToolInvocation,
    ToolSpec,
)
from pytest_gta.types import ResultItem, ToolResult
from pytest_gta.urls import check_url
from tool_backends.paths import image_size, open_rgb, resolve_image, save_output_file

if TYPE_CHECKING:
    import openai

CHAT_TOOLS = ("ImageDescription", "RegionAttributeDescription", "CountGivenObject", "TextToBbox")
IMAGE_TOOLS = ("TextToImage", "ImageStylization")
DEFAULT_IMAGE_MODEL = "gpt-image-1"
#: Seconds one request may take (the OpenAI SDK's default), or less near the case's deadline.
VLM_TIMEOUT_S = 600.0

DESCRIBE_PROMPT = "Describe the image in detail"
ATTRIBUTE_PROMPT = "Describe {attribute} on the image in detail"
COUNT_PROMPT = "How many {text} are in the image? Reply a digit"
BBOX_PROMPT = (
    "Find every {text} in the image. The image is {width}x{height} pixels. Reply with only a "
    'JSON list, best match first, like [{{"bbox": [x1, y1, x2, y2], "score": 0.9}}], with '
    "pixel coordinates (x1, y1 top-left, x2, y2 bottom-right) and a confidence score between 0 "
    "and 1. Reply [] if there is none."
)
NUMBER_WORDS = {
    word: value
    for value, word in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
        "fifteen sixteen seventeen eighteen nineteen twenty".split()
    )
}


def parse_count(reply: str) -> int:
    """The first integer (digits or an English number word up to twenty) in a reply.

    Raises:
        GtaToolError: the reply holds no number; the model sees it, as with a failing tool.
    """
    match = re.search(r"\d+|\b(" + "|".join(NUMBER_WORDS) + r")\b", reply.lower())
    if match is None:
        raise GtaToolError(f"CountGivenObject: cannot read a number from the reply {reply!r}")
    text = match.group(0)
    return int(text) if text.isdigit() else NUMBER_WORDS[text]


def parse_bbox(text: str) -> tuple[int, int, int, int]:
    """``"(x1, y1, x2, y2)"`` as the official tools parse it: four numbers, rounded.

    Raises:
        GtaToolError: not four numbers, or an empty box.
    """
    numbers = re.findall(r"-?\d+(?:\.\d+)?", text)
    if len(numbers) != 4:
        raise GtaToolError(f"bbox must be '(x1, y1, x2, y2)', got {text!r}")
    x1, y1, x2, y2 = (round(float(n)) for n in numbers)
    if x2 <= x1 or y2 <= y1:
        raise GtaToolError(f"bbox {text!r} is empty: x2 must exceed x1 and y2 exceed y1")
    return x1, y1, x2, y2


def format_boxes(reply: str, width: int, height: int, top1: bool) -> str:
    """A model's JSON boxes as GLIP's TextToBbox text: ``(x1, y1, x2, y2), score S`` lines.

    Boxes are clipped to the image and rounded to whole pixels; scores to two decimals.

    Raises:
        GtaToolError: the reply is not the JSON list the prompt asked for.
    """
    match = re.search(r"\[.*\]", reply, re.DOTALL)
    try:
        found = json.loads(match.group(0)) if match else None
    except ValueError:
        found = None
    if not isinstance(found, list):
        raise GtaToolError(f"TextToBbox: cannot read boxes from the reply {reply[:200]!r}")
    lines = []
    for entry in found:
        box = entry.get("bbox") if isinstance(entry, Mapping) else entry
        if not isinstance(box, list) or len(box) != 4:
            continue
        try:
            x1, y1, x2, y2 = (float(v) for v in box)
            score = float(entry.get("score", 1.0)) if isinstance(entry, Mapping) else 1.0
        except (TypeError, ValueError):
            continue
        x1, x2 = (round(min(max(v, 0), width)) for v in (x1, x2))
        y1, y2 = (round(min(max(v, 0), height)) for v in (y1, y2))
        if x2 > x1 and y2 > y1:
            lines.append(f"({x1}, {y1}, {x2}, {y2}), score {round(score, 2)}")
    if not lines:
        return "No object found."
    return lines[0] if top1 else "\n".join(lines)


def data_url(data: bytes, mime: str) -> str:
    """Bytes as a ``data:`` URL, the inline image form chat endpoints accept."""
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


class VlmBackend(BaseToolBackend):
    """Runs the model-backed GTA tools through an OpenAI-compatible endpoint.

    One backend serves concurrent episodes' threads: it holds no state a call changes, and its
    ``openai`` client sends through one thread-safe httpx connection pool. (The ``agentlego`` and
    ``api`` backends open a client per request instead; see :mod:`tool_backends.http_client`.)
    """

    name = "vlm"

    def __init__(
        self, client: openai.OpenAI, model: str, image_model: str = DEFAULT_IMAGE_MODEL
    ) -> None:
        """Use ``client`` with the chat ``model`` and the images ``image_model`` (or ``none``)."""
        self.client = client
        self.model = model
        self.image_model = image_model
        self.tools = set(CHAT_TOOLS)
        if image_model.lower() != "none":
            self.tools.update(IMAGE_TOOLS)

    def offers(self, tool: str) -> bool:
        """Whether ``tool`` is one the model stands in for."""
        return tool in self.tools

    def call(self, invocation: ToolInvocation, context: ToolContext) -> ToolResult:
        """Run the tool: build the official prompt, ask the model, shape the answer."""
        import openai

        args = invocation.converted
        # A call started near the case's deadline gets the time left (the SDK's default else).
        timeout = context.time_left(VLM_TIMEOUT_S)
        try:
            if invocation.name == "ImageDescription":
                image = self._image(args, context)
                return ToolResult.text(self._ask(DESCRIBE_PROMPT, image, timeout))
            if invocation.name == "RegionAttributeDescription":
                prompt = ATTRIBUTE_PROMPT.format(attribute=args["attribute"])
                image = self._crop(args, context, parse_bbox(str(args["bbox"])))
                return ToolResult.text(self._ask(prompt, image, timeout))
            if invocation.name == "CountGivenObject":
                prompt = COUNT_PROMPT.format(text=args["text"])
                reply = self._ask(prompt, self._image(args, context), timeout)
                return ToolResult.text(str(parse_count(reply)))
            if invocation.name == "TextToBbox":
                return ToolResult.text(self._boxes(args, context, timeout))
            if invocation.name == "TextToImage":
                response = self.client.images.generate(
                    model=self.image_model,
                    prompt=str(args["keywords"]),
                    timeout=timeout,
                    **self._b64(),
                )
                return self._image_result(invocation.name, response, context)
            if invocation.name == "ImageStylization":
                path = resolve_image(str(args["image"]), context)
                response = self.client.images.edit(
                    model=self.image_model,
                    image=(path.name, path.read_bytes(), _mime(path.name)),
                    prompt=str(args["instruction"]),
                    timeout=timeout,
                    **self._b64(),
                )
                return self._image_result(invocation.name, response, context)
        except openai.APIConnectionError as exc:
            oversized = reply_limit_of(exc)
            if oversized is not None:
                raise GtaInfrastructureError(
                    f"vlm endpoint {self.client.base_url} answered {invocation.name}, but "
                    f"{oversized}"
                ) from None
            raise GtaInfrastructureError(
                f"vlm endpoint {self.client.base_url} is unreachable: {exc}"
            ) from exc
        except (
            openai.AuthenticationError,
            openai.PermissionDeniedError,
            openai.NotFoundError,
        ) as e:
            raise GtaInfrastructureError(f"vlm endpoint refused {invocation.name}: {e}") from e
        except openai.APIStatusError as exc:
            if exc.status_code >= 500:
                raise GtaInfrastructureError(f"vlm endpoint failed: {exc}") from exc
            raise GtaToolError(f"{invocation.name} failed: {exc.message}") from exc
        raise GtaToolError(f"the vlm backend does not serve {invocation.name}")

    def _b64(self) -> dict[str, Any]:
        """Ask DALL-E models for base64 (they default to URLs); gpt-image-1 rejects the option."""
        return {"response_format": "b64_json"} if self.image_model.startswith("dall-e") else {}

    @staticmethod
    def _image(args: Mapping[str, Any], context: ToolContext) -> str:
        path = resolve_image(str(args["image"]), context)
        return data_url(path.read_bytes(), _mime(path.name))

    @staticmethod
    def _crop(args: Mapping[str, Any], context: ToolContext, box: tuple[int, int, int, int]) -> str:
        """The bbox region as a PNG data URL, so the model looks only where it was asked to."""
        region = open_rgb(resolve_image(str(args["image"]), context)).crop(box)
        buffer = io.BytesIO()
        region.save(buffer, format="PNG")
        return data_url(buffer.getvalue(), "image/png")

    def _boxes(self, args: Mapping[str, Any], context: ToolContext, timeout: float) -> str:
        width, height = image_size(resolve_image(str(args["image"]), context))
        prompt = BBOX_PROMPT.format(text=args["text"], width=width, height=height)
        reply = self._ask(prompt, self._image(args, context), timeout)
        return format_boxes(reply, width, height, bool(args.get("top1", True)))

    def _ask(self, prompt: str, image_url: str, timeout: float) -> str:
        completion = self.client.chat.completions.create(
            model=self.model,
            timeout=timeout,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": image_url}},
                        {"type": "text", "text": prompt},
                    ],
                }
            ],
        )
        if not completion.choices:
            raise GtaToolError("the vlm endpoint returned no answer")
        return (completion.choices[0].message.content or "").strip()

    def _image_result(self, tool: str, response: Any, context: ToolContext) -> ToolResult:
        data = getattr(response, "data", None) or []
        b64 = getattr(data[0], "b64_json", None) if data else None
        if not b64:
            raise GtaToolError(f"{tool}: the images endpoint returned no b64_json image")
        path = save_output_file(base64.b64decode(b64), tool, ".png", context)
        return ToolResult((ResultItem("image", path),))


def _mime(name: str) -> str:
    return mimetypes.guess_type(name)[0] or "image/png"


def make_vlm(spec: ToolSpec, context: ToolBackendContext) -> VlmBackend:
    """Entry point for ``--gta-tools=vlm=<provider/model>``."""
    try:
        import openai
    except ImportError as exc:  # pragma: no cover - openai is a dependency
        raise GtaUsageError(
            "the vlm tool backend needs the openai SDK: pip install openai"
        ) from exc
    model = spec.argument.removeprefix("openai/")
    if not model:
        raise GtaUsageError(
            f"{OPT_TOOLS}={spec.raw}: name the vision model, e.g. "
            f"{OPT_TOOLS}=vlm=openai/gpt-4o-mini"
        )
    base_url = None
    for variable in ("GTA_VLM_BASE_URL", "OPENAI_BASE_URL"):
        if os.environ.get(variable, "").strip():
            base_url = check_url(os.environ[variable], variable)
            break
    key = os.environ.get("OPENAI_API_KEY", "").strip()
    if not key and base_url is None:
        raise GtaUsageError(
            f"{OPT_TOOLS}={spec.raw}: set OPENAI_API_KEY, or GTA_VLM_BASE_URL for a local "
            "OpenAI-compatible server"
        )
    client = openai.OpenAI(
        api_key=key or "EMPTY",
        base_url=base_url,
        # The SDK's own client, with the reply cap and a deadline on each whole request.
        http_client=bound_client(
            context.max_reply_bytes,
            timeout=openai.DEFAULT_TIMEOUT,
            limits=openai.DEFAULT_CONNECTION_LIMITS,
            follow_redirects=True,
        ),
    )
    image_model = os.environ.get("GTA_VLM_IMAGE_MODEL", "").strip() or DEFAULT_IMAGE_MODEL
    return VlmBackend(client, model, image_model)

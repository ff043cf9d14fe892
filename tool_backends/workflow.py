"""``workflow``: the 24 tools GTA-2 adds for GTA-Workflow, on this machine's CPU.

``--gta-tools=workflow`` (after ``local`` for the 13 atomic tools GTA-Workflow keeps): the file
generators (CSV, DOCX, PDF, PPTX, XLSX, HTML) and readers, ImageQualityTest, the audio tools,
Prover (Z3), VideoClip, AddTextVideoTool, TextToVideoTool and VideoOCR. Their names, inputs and
outputs are the official ones (``agentlego/benchmark.py`` of open-compass/GTA), described in
``workflow_toolmeta.json`` beside this module (with the 13 atomic tools: the Workflow sample's
``toolmeta.json``). Each tool is a function ``(invocation, context) -> ToolResult`` in a module
imported on first use; one whose module, library or program (``ffmpeg``) is missing is not
offered, so routing falls through to the next backend in ``--gta-tools``.

VideoDescription, VideoObjectDetection and SpeechToText need large models (BLIP, YOLO,
Whisper); they are never offered here, and a case that needs one is skipped with
:data:`PERCEPTION_HINT` unless a backend listed in ``--gta-tools`` serves it (``agentlego=URL``
with GTA-2's tool server, ``api``, or ``vlm``), since a tool that is not configured is the
harness's gap, not the model's mistake.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_gta.errors import GtaToolError
from pytest_gta.flags import OPT_TOOLS
from pytest_gta.tools import (
    BaseToolBackend,
    ToolBackendContext,
    ToolContext,
    ToolInvocation,
    ToolSpec,
)
from pytest_gta.types import ToolMeta, ToolParam, ToolResult
from pytest_gta.vocabulary import SandboxMode
from tool_backends.sandbox import configured_sandbox, describe_backend

ToolFunction = Callable[[ToolInvocation, ToolContext], ToolResult]
#: The official tool metas of GTA-Workflow's 37 tools (13 atomic, 24 new).
TOOLMETA = Path(__file__).with_name("workflow_toolmeta.json")


@dataclass(frozen=True)
class WorkflowTool:
    """Where a tool's function lives and what it needs installed."""

    module: str
    function: str
    modules: tuple[str, ...] = ()
    programs: tuple[str, ...] = ()

    def missing(self) -> str | None:
        """What is missing here for this tool, or ``None``."""
        for name in (self.module, *self.modules):
            try:
                found = importlib.util.find_spec(name) is not None
            except ModuleNotFoundError:
                found = False
            if not found:
                return f"the Python module {name} (pip install 'pytest-gta[workflow]')"
        for program in self.programs:
            if shutil.which(program) is None:
                return f"the program {program} (Debian: apt-get install {program})"
        return None


_FILES = "tool_backends.workflow_files"
_READERS = "tool_backends.workflow_readers"
_AUDIO = "tool_backends.workflow_audio"
_MEDIA = "tool_backends.workflow_media"
_SOUND = ("numpy", "scipy", "soundfile")

#: Tool name -> its function and needs.
WORKFLOW_TOOLS: dict[str, WorkflowTool] = {
    "CsvFileGenerator": WorkflowTool(_FILES, "csv_file"),
    "DocxFileGenerator": WorkflowTool(_FILES, "docx_file", ("docx", "PIL")),
    "PdfFileGenerator": WorkflowTool(_FILES, "pdf_file", ("reportlab", "PIL")),
    "PptxFileGenerator": WorkflowTool(_FILES, "pptx_file", ("pptx", "PIL")),
    "XlsxFileGenerator": WorkflowTool(_FILES, "xlsx_file", ("openpyxl",)),
    "HtmlFileGenerator": WorkflowTool(_FILES, "html_file"),
    "ReadCSV": WorkflowTool(_READERS, "read_csv"),
    "ReadDOCX": WorkflowTool(_READERS, "read_docx", ("docx",)),
    "ReadPDF": WorkflowTool(_READERS, "read_pdf", ("pypdf",)),
    "ReadPPTX": WorkflowTool(_READERS, "read_pptx", ("pptx",)),
    "ReadXLSX": WorkflowTool(_READERS, "read_xlsx", ("openpyxl",)),
    "Prover": WorkflowTool(_READERS, "prover", ("z3",)),
    "ImageQualityTest": WorkflowTool(_MEDIA, "image_quality", ("PIL",)),
    "AudioClipTool": WorkflowTool(_AUDIO, "audio_clip", _SOUND),
    "NoiseReduction": WorkflowTool(_AUDIO, "noise_reduction", _SOUND),
    "PitchShifting": WorkflowTool(_AUDIO, "pitch_shifting", _SOUND),
    "SoundCharacteristicExtraction": WorkflowTool(_AUDIO, "sound_characteristics", _SOUND),
    "VideoClip": WorkflowTool(_MEDIA, "video_clip", ("PIL",), ("ffmpeg", "ffprobe")),
    "AddTextVideoTool": WorkflowTool(_MEDIA, "add_text_video", ("PIL",), ("ffmpeg", "ffprobe")),
    "TextToVideoTool": WorkflowTool(_MEDIA, "text_to_video", ("PIL",), ("ffmpeg",)),
    "VideoOCR": WorkflowTool(
        _MEDIA, "video_ocr", ("PIL", "rapidocr_onnxruntime"), ("ffmpeg", "ffprobe")
    ),
}

#: The tools that parse model-chosen input in the code sandbox.
SANDBOXED = frozenset({"ReadCSV", "ReadDOCX", "ReadPDF", "ReadPPTX", "ReadXLSX", "Prover"})
#: The GTA-Workflow tools that need a large model: served by another backend, never here.
PERCEPTION_TOOLS = frozenset({"VideoDescription", "VideoObjectDetection", "SpeechToText"})
#: What a case that needs one of them is told (``{tool}`` is its name).
PERCEPTION_HINT = (
    "{tool} needs a large model, which the workflow backend does not run: list a backend that "
    f"serves it before workflow in {OPT_TOOLS} (agentlego=URL of a GTA-2 AgentLego tool server, "
    "or an api/vlm backend configured for it; see docs/tools.md)"
)


def workflow_metas() -> dict[str, ToolMeta]:
    """The 37 tool metas of ``workflow_toolmeta.json``, by name."""
    raw: dict[str, Any] = json.loads(TOOLMETA.read_text(encoding="utf-8"))

    def param(item: dict[str, Any]) -> ToolParam:
        return ToolParam(
            item["type"],
            item["name"],
            item["description"],
            item["optional"],
            item["default"],
            item["filetype"],
        )

    return {
        name: ToolMeta(
            meta["name"],
            meta["description"],
            tuple(param(p) for p in meta["inputs"]),
            tuple(param(p) for p in meta["outputs"]),
        )
        for name, meta in raw.items()
    }


class WorkflowBackend(BaseToolBackend):
    """Serves the GTA-Workflow tools whose implementation and dependencies are installed."""

    name = "workflow"

    def __init__(self, sandbox: SandboxMode = "auto", hidden: tuple[Path, ...] = ()) -> None:
        self.missing = {tool: spec.missing() for tool, spec in WORKFLOW_TOOLS.items()}
        self.tools = {tool for tool, reason in self.missing.items() if reason is None}
        self._functions: dict[str, ToolFunction] = {}
        self.isolation = None
        if SANDBOXED & self.tools:
            self.isolation = configured_sandbox(sandbox, hidden)

    def describe(self) -> dict[str, object]:
        """For the report: the tools served here and how parsing is isolated."""
        return describe_backend(self.tools, self.isolation)

    def offers(self, tool: str) -> bool:
        """Whether ``tool`` runs here."""
        return tool in self.tools

    def unavailable_reason(self, tool: str) -> str | None:
        """Why a GTA-Workflow tool is not served here: a model it needs, or a missing install."""
        if tool in PERCEPTION_TOOLS:
            return PERCEPTION_HINT.format(tool=tool)
        reason = self.missing.get(tool)
        return f"workflow serves {tool} once {reason} is installed" if reason else None

    def call(self, invocation: ToolInvocation, context: ToolContext) -> ToolResult:
        """Run the tool's function (imported on first use).

        Raises:
            GtaToolError: the tool is not served here (a perception tool names what serves it).
        """
        if invocation.name not in self.tools:
            why = self.unavailable_reason(invocation.name)
            raise GtaToolError(why or f"workflow does not serve {invocation.name}")
        function = self._functions.get(invocation.name)
        if function is None:
            spec = WORKFLOW_TOOLS[invocation.name]
            function = getattr(importlib.import_module(spec.module), spec.function)
            self._functions[invocation.name] = function
        return function(invocation, context)


def make_workflow(spec: ToolSpec, context: ToolBackendContext) -> WorkflowBackend:
    """Entry point for ``--gta-tools=workflow`` (``--gta-sandbox`` is ``context.sandbox``)."""
    return WorkflowBackend(context.sandbox, (context.dataset.root,))

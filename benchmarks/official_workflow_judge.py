"""Record what the official GTA-2 Workflow judge makes of the bundled eval packs (ground truth).

Usage (from the repository root)::

    python benchmarks/official_workflow_judge.py --official /path/to/open-compass/GTA

For each pack (``tests/data/workflow/pack.json`` and ``pack_edge.json`` by default) it builds a
temporary root laid out like the official repository, copying the two official files it needs
there at run time (``agent_app_eval/score_with_gpt52.py`` and
``opencompass/opencompass/datasets/gta_bench_v2.py``; nothing official is kept in this
repository), stubs what ``gta_bench_v2`` imports but judging does not need (OpenCompass's base
classes and registry, ``datasets``, ``sentence_transformers``), starts the scripted judge
(``tests/helpers/judge_server.py`` with ``tests/data/workflow/judge_script.json``), points the
official code at it (``OPENAI_BASE_URL``, a dummy key, ``EVAL_DEBUG=false``) and runs the
official ``score_pack_incremental``. The official scorer resolves relative ``attached_files``
against ``Path(score_with_gpt52.py).parents[2]``: the directory *above* its checkout, so the
pack and its deliverables are copied there.

It writes ``official_scores.json`` (``official_scores_edge.json`` for the edge pack) beside the
pack: per task the status, root score, error and the detail nodes exactly as the official
scorer produced them; its summary; its printed log (temporary paths as ``<root>``); the
official loader's view of ``fixtures/gta_workflow_sample/end.json``; and the ordered requests
the judge saw. Uploads keep file name and content type (``mimetypes``' guess, as the SDK sends
it), and sha256 only when the bytes are a deliverable's own (wkhtmltopdf's PDFs and ffmpeg's
frames differ between machines); response requests keep model, temperature and the input
blocks, each ``file_id`` replaced by the file name of the upload it names. Needs ``ffmpeg`` and
``wkhtmltopdf`` on PATH (as the official code does) and the ``openai`` and ``numpy`` packages.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import io
import json
import os
import shutil
import sys
import tempfile
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.helpers.judge_server import JudgeServer, ResponseCall, Upload  # noqa: E402

DATA = ROOT / "tests" / "data" / "workflow"
SAMPLE = ROOT / "fixtures" / "gta_workflow_sample"
SCORER = Path("agent_app_eval") / "score_with_gpt52.py"
EVALUATOR = Path("opencompass") / "opencompass" / "datasets" / "gta_bench_v2.py"
OUT_NAMES = {"pack.json": "official_scores.json", "pack_edge.json": "official_scores_edge.json"}
#: Environment variables the official code reads that could send it elsewhere.
CLEARED_ENV = (
    "EVAL_OPENAI_BASE_URL",
    "EVAL_OPENAI_MODEL",
    "EVAL_PROXY",
    "OPENAI_PROXY",
    "ALL_PROXY",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "all_proxy",
    "https_proxy",
    "http_proxy",
    "OPENCOMPASS_TOOLMETA_PATH",
)


# -- the official code, by path ------------------------------------------------------------------


def module(name: str, **attrs: Any) -> types.ModuleType:
    made = types.ModuleType(name)
    for key, value in attrs.items():
        setattr(made, key, value)
    sys.modules[name] = made
    return made


class Registry:
    """OpenCompass's registry, reduced to a ``register_module()`` that returns the class."""

    def register_module(self, *args: Any, **kwargs: Any) -> Callable[[type], type]:
        return lambda cls: cls


class Dataset:
    """``datasets.arrow_dataset.Dataset`` reduced to ``from_list`` (the rows themselves)."""

    @staticmethod
    def from_list(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return rows


def install_stubs(root: Path) -> None:
    """Make ``opencompass.datasets.gta_bench_v2`` importable from ``root`` without OpenCompass."""
    package = root / EVALUATOR.parent
    module("opencompass", __path__=[str(package.parent)])
    module("opencompass.datasets", __path__=[str(package)])
    module("opencompass.datasets.base", BaseDataset=type("BaseDataset", (), {}))
    module("opencompass.openicl", __path__=[])
    module("opencompass.openicl.icl_evaluator", BaseEvaluator=type("BaseEvaluator", (), {}))
    module("opencompass.registry", ICL_EVALUATORS=Registry(), LOAD_DATASET=Registry())
    module("datasets", __path__=[])
    module("datasets.arrow_dataset", Dataset=Dataset)
    module("sentence_transformers", SentenceTransformer=object, util=types.SimpleNamespace())


def load_by_path(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot import {path}")
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[name] = loaded
    spec.loader.exec_module(loaded)
    return loaded


def lay_out(official: Path, top: Path) -> Path:
    """Copy the two official files under ``top/GTA`` (the official layout); return that root."""
    root = top / "GTA"
    for relative in (SCORER, EVALUATOR):
        source = official / relative
        if not source.is_file():
            raise SystemExit(f"{source} not found: --official must be a checkout of GTA")
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, root / relative)
    return root


# -- what to record ------------------------------------------------------------------------------


def deliverable_hashes(pack_dir: Path) -> set[str]:
    return {
        hashlib.sha256(p.read_bytes()).hexdigest()
        for p in (pack_dir / "deliverables").rglob("*")
        if p.is_file()
    }


def recorded_requests(judge: JudgeServer, unconverted: set[str]) -> list[dict[str, Any]]:
    names = {u.file_id: u.filename for u in judge.uploads() if u.file_id is not None}
    out: list[dict[str, Any]] = []
    for request in judge.requests:
        if isinstance(request, Upload):
            out.append(
                {
                    "kind": "file",
                    "filename": request.filename,
                    "content_type": request.content_type,
                    "sha256": request.sha256 if request.sha256 in unconverted else None,
                    "purpose": request.purpose,
                    "status": request.status,
                }
            )
        elif isinstance(request, ResponseCall):
            out.append(
                {
                    "kind": "response",
                    "requirement": request.requirement,
                    "status": request.status,
                    "model": request.body.get("model"),
                    "temperature": request.body.get("temperature"),
                    "input": [
                        {"role": m.get("role"), "content": [block(b, names) for b in m["content"]]}
                        for m in request.body.get("input", [])
                    ],
                }
            )
        else:
            out.append({"kind": "other", "path": request.path, "status": request.status})
    return out


def block(content: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    if "file_id" not in content:
        return dict(content)
    rest = {k: v for k, v in content.items() if k != "file_id"}
    return {**rest, "file": names.get(content["file_id"], content["file_id"])}


def task_record(result: dict[str, Any]) -> dict[str, Any]:
    detail = result.get("detail") or {}
    record = {
        "status": result.get("status"),
        "score": result.get("score"),
        "nodes": detail.get("nodes") if isinstance(detail, dict) else None,
    }
    if "error" in result:
        record["error"] = result["error"]
    return record


def loader_view(evaluator_module: types.ModuleType) -> dict[str, Any]:
    """What the official ``GTABenchDataset.load(path, mode='end')`` makes of the sample."""
    os.environ["OPENCOMPASS_TOOLMETA_PATH"] = str(SAMPLE / "toolmeta.json")
    with contextlib.redirect_stdout(io.StringIO()):
        rows = evaluator_module.GTABenchDataset.load(str(SAMPLE), mode="end")
    del os.environ["OPENCOMPASS_TOOLMETA_PATH"]
    prefix = str(SAMPLE.absolute()) + os.sep
    end = json.loads((SAMPLE / "end.json").read_text(encoding="utf-8"))
    view: dict[str, Any] = {}
    for row in rows:
        resources = row["resources_parsed"]
        view[row["id"]] = {
            "n_tools": sum(1 for r in resources if r.get("type") == "tool"),
            "files": [
                {"filetype": r["filetype"], "path": r["path"].replace(prefix, "")}
                for r in resources
                if r.get("type") == "file"
            ],
            "dialog_roles": [d.get("role") for d in row["dialogs_parsed"]],
            "tool_call_arguments": [
                {
                    k: v.replace(prefix, "<sample>/") if isinstance(v, str) else v
                    for k, v in args.items()
                }
                for d in row["dialogs_parsed"]
                if d.get("tool_calls")
                for args in [d["tool_calls"][0]["function"]["arguments"]]
            ],
            # A key whose values differ in type between rows (a dict tree among lists) is turned
            # into JSON text for every row by the loader's _diagnose_and_coerce.
            "full_tree_parsed_type": type(row["full_tree_parsed"]).__name__,
            "full_tree_equals_sub_tasks": tree_of(row["full_tree_parsed"])
            == end[row["id"]]["sub_tasks"],
        }
    return view


def tree_of(parsed: Any) -> Any:
    return json.loads(parsed) if isinstance(parsed, str) else parsed


# -- the run -------------------------------------------------------------------------------------


@contextlib.contextmanager
def environment(base_url: str) -> Iterator[None]:
    saved = dict(os.environ)
    for key in CLEARED_ENV:
        os.environ.pop(key, None)
    os.environ.update(
        EVAL_OPENAI_API_KEY="sk-dummy",
        OPENAI_API_KEY="sk-dummy",
        OPENAI_BASE_URL=base_url,
        EVAL_DEBUG="false",
        NO_PROXY="127.0.0.1,localhost",
    )
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def score_pack(scorer: types.ModuleType, pack: Path, script: Path) -> dict[str, Any]:
    """Run the official scorer over ``pack`` against the scripted judge; the record to keep."""
    repo = Path(scorer._repo_root())
    for stale in ("deliverables", "out"):
        shutil.rmtree(repo / stale, ignore_errors=True)
    shutil.copytree(pack.parent / "deliverables", repo / "deliverables")
    copied = repo / pack.name
    shutil.copyfile(pack, copied)
    printed = io.StringIO()
    with JudgeServer.from_script(script) as judge, environment(judge.base_url):
        base_url = judge.base_url
        with contextlib.redirect_stdout(printed):
            state = scorer.score_pack_incremental(
                pack_path=copied,
                out_path=repo / "out" / "scores.json",
                summary_out=repo / "out" / "summary.json",
                proxy=None,
                dry_run=False,
                overwrite=True,
                force_resume=False,
                max_tasks=None,
            )
    summary = json.loads((repo / "out" / "summary.json").read_text(encoding="utf-8"))
    log = [
        line.replace(str(repo), "<root>").replace(base_url, "<judge>")
        for line in printed.getvalue().splitlines()
        if line.strip()
    ]
    return {
        "pack": str(pack.relative_to(ROOT)),
        "script": str(script.relative_to(ROOT)),
        "tasks": {tid: task_record(r) for tid, r in state["task_results"].items()},
        "summary": summary["summary"],
        "per_task": summary["per_task"],
        "requests": recorded_requests(judge, deliverable_hashes(pack.parent)),
        "log": log,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--official", type=Path, required=True, help="a checkout of GTA")
    parser.add_argument("--pack", type=Path, action="append", help="default: both packs")
    parser.add_argument("--script", type=Path, default=DATA / "judge_script.json")
    args = parser.parse_args(argv)
    for tool in ("ffmpeg", "wkhtmltopdf"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is needed on PATH (the official judge calls it)")
    os.environ.pop("EVAL_OPENAI_MODEL", None)  # read when the evaluator is imported
    packs = [p.resolve() for p in args.pack or [DATA / "pack.json", DATA / "pack_edge.json"]]
    with tempfile.TemporaryDirectory(prefix="gta-official-") as top:
        root = lay_out(args.official.resolve(), Path(top))
        install_stubs(root)
        scorer = load_by_path("gta_official_score_with_gpt52", root / SCORER)
        evaluator = load_by_path("opencompass.datasets.gta_bench_v2", root / EVALUATOR)
        loader = loader_view(evaluator)
        for pack in packs:
            record = score_pack(scorer, pack, args.script.resolve())
            record["official_root_layout"] = {
                "scorer": str(SCORER),
                "evaluator": str(EVALUATOR),
                "attached_files_resolved_against": "Path(score_with_gpt52.py).parents[2]",
            }
            if pack.name == "pack.json":
                record["loader"] = loader
            out = pack.parent / OUT_NAMES.get(pack.name, f"official_scores_{pack.stem}.json")
            text = json.dumps(record, indent=2, ensure_ascii=False, allow_nan=True)
            out.write_text(text + "\n", encoding="utf-8")
            print(f"{out.relative_to(ROOT)}: {record['summary']}")


if __name__ == "__main__":
    main()

"""Hostile paths in GTA-Workflow's outside data: a task's files, an eval pack's attachments.

Issue 38's findings 10 and 9. An ``end.json`` whose task names ``../x``, an absolute path or a
link leading out of the dataset (or the dataset's own ``end.json``) is a usage error at load,
naming the task, the field and the path, as GTA-Atomic's loader refuses such files: the agent's
sandbox would show it the file and the tools would read it. An eval pack's ``attached_files``
are looked up under the pack's directory and ``--gta-evalpack-root`` only, never by climbing to
``/``; a pack that attaches a file outside them is refused before anything reaches the judge.
Hypothesis drives both loaders with hostile entries: each ends as a usage error or as files
inside the allowed tree, never a traceback.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_gta.errors import GtaUsageError
from pytest_gta.evalpack import DEVIATION, read_pack, resolve_files
from pytest_gta.files import inside
from pytest_gta.workflow_data import load_workflow
from tests.helpers.gta_run import gta
from tests.helpers.judge_server import JudgeServer
from tests.helpers.paths import ROOT

SAMPLE = ROOT / "fixtures" / "gta_workflow_sample"
#: What only a file outside the tree holds: finding it in an upload is a leak.
SECRET = "aws_secret_access_key = planted-3c9f1b7e"


def make_world(base: Path) -> Path:
    """``base/data`` (a copy of the Workflow sample), a secret beside it, links both ways."""
    data = base / "data"
    shutil.copytree(SAMPLE, data)
    (base / "secret.txt").write_text(SECRET)
    (data / "files" / "out-link.txt").symlink_to(base / "secret.txt")
    (data / "files" / "dangling-out").symlink_to(base / "nowhere.txt")
    (data / "files" / "in-link.pdf").symlink_to(data / "files" / "report.pdf")
    return data


@pytest.fixture
def world(tmp_path: Path) -> Path:
    return make_world(tmp_path)


def with_files(data: Path, task: str, *paths: Any) -> Path:
    """``data`` with task ``task``'s ``files`` replaced by entries naming ``paths``."""
    end = json.loads((data / "end.json").read_text("utf-8"))
    end[task]["files"] = [{"type": "file", "path": path} for path in paths]
    (data / "end.json").write_text(json.dumps(end), encoding="utf-8")
    return data


# -- end.json: a task's files ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "leads"),
    [
        ("../secret.txt", "secret.txt"),
        ("files/../../secret.txt", "secret.txt"),
        ("files/out-link.txt", "secret.txt"),
        ("files/dangling-out", "nowhere.txt"),
        ("/etc/hostname", "/etc/hostname"),
    ],
)
def test_a_task_file_outside_the_dataset_is_a_usage_error_naming_task_field_and_path(
    world: Path, path: str, leads: str
) -> None:
    with_files(world, "3", "files/sales.csv", path)
    with pytest.raises(GtaUsageError) as refused:
        load_workflow(world)
    message = str(refused.value)
    assert message.startswith(f"{world / 'end.json'}: task '3': files[1].path {path!r} leads out")
    assert leads in message
    assert "copy the file there" in message


@pytest.mark.parametrize("path", ["end.json", "files/../toolmeta.json", "files/hard-end.json"])
def test_a_task_file_that_is_the_datasets_own_is_refused(world: Path, path: str) -> None:
    os.link(world / "end.json", world / "files" / "hard-end.json")
    with_files(world, "1", path)
    with pytest.raises(GtaUsageError, match=r"task '1': files\[0\]\.path .* dataset's own files"):
        load_workflow(world)


def test_files_inside_the_dataset_load_as_the_official_loader_spells_them(world: Path) -> None:
    inside_absolute = str(world / "files" / "logo.png")
    paths = ["files/report.pdf", "files/../files/sales.csv", "files/in-link.pdf", inside_absolute]
    with_files(world, "1", *paths, "files/missing.pdf")  # missing: the run's business, officially
    task = load_workflow(world).get("1")
    assert task is not None
    assert [path for _, path in task.files] == [
        str(world / "files" / "report.pdf"),
        str(world / "files" / ".." / "files" / "sales.csv"),
        str(world / "files" / "in-link.pdf"),
        inside_absolute,
        str(world / "files" / "missing.pdf"),
    ]


#: Pieces of a hostile path: escapes, links both ways, the dataset's own files, odd characters.
PIECES = st.sampled_from(
    ["..", "files", ".", "", "report.pdf", "out-link.txt", "in-link.pdf", "dangling-out",
     "end.json", "toolmeta.json", "/etc", "/", "hostname", "x\x00y", "\ud800", "~"]
)  # fmt: skip
ENTRIES = st.one_of(
    st.lists(PIECES, min_size=1, max_size=5).map(lambda parts: {"path": "/".join(parts)}),
    st.builds(lambda value: {"path": value}, st.integers() | st.none() | st.lists(st.text())),
    st.text(max_size=5),
    st.dictionaries(st.sampled_from(["type", "url"]), st.text(max_size=5)),
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(entries=st.lists(ENTRIES, max_size=4))
def test_property_hostile_task_files_load_inside_or_are_a_usage_error(
    tmp_path_factory: pytest.TempPathFactory, entries: list[Any]
) -> None:
    data = make_world(tmp_path_factory.mktemp("hostile"))
    end = json.loads((data / "end.json").read_text("utf-8"))
    end["2"]["files"] = entries
    (data / "end.json").write_text(json.dumps(end), encoding="utf-8")
    try:
        loaded, refused = load_workflow(data), ""
    except GtaUsageError as exc:
        loaded, refused = None, str(exc)
    if loaded is None:
        assert refused.startswith(f"{data / 'end.json'}: task '2'"), refused
        return
    own = {os.path.realpath(data / name) for name in ("end.json", "toolmeta.json")}
    for task in loaded:
        for _, path in task.files:
            real = os.path.realpath(path)
            assert inside(real, os.path.realpath(data)), path
            assert real not in own, path


def test_a_download_whose_task_names_a_file_outside_is_refused_and_installs_nothing(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """An unverified mirror's dataset used to install, then its agent read the host's file."""
    mirror = tmp_path / "mirror"
    shutil.copytree(SAMPLE, mirror)  # no link in it: the copy itself refuses links out
    with_files(mirror, "2", "../secret.txt")
    target = tmp_path / "installed"
    result = pytester.runpytest(
        "--gta-download=workflow", f"--gta-download-url={mirror}", f"--gta-data-dir={target}"
    )
    assert result.ret == 1  # the installer's refusal, as for any dataset that does not load
    refusal = "task '2': files[[]0[]].path '../secret.txt' leads out"
    result.stderr.fnmatch_lines([f"*not a usable GTA-Workflow dataset*{refusal}*"])
    assert not (target / "gta_workflow_dataset").exists()


# -- eval packs: attached files -------------------------------------------------------------------


def pack_at(folder: Path, *attached: Any, task: int = 1) -> Path:
    """A one-task pack in ``folder`` attaching ``attached``; a deliverable beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "out").mkdir(exist_ok=True)
    (folder / "out" / "summary.md").write_text("# Summary\n")
    pack = {
        "schema_version": 1,
        "tasks": [
            {
                "task_id": task,
                "origin_prompt": ["Summarise."],
                "assistant_outputs": [[{"role": "assistant", "content": "Done."}]],
                "attached_files": list(attached),
                "full_tree": [{"id": "1.1", "requirements": "A summary is delivered."}],
            }
        ],
    }
    path = folder / "pack.json"
    path.write_text(json.dumps(pack), encoding="utf-8")
    return path


@pytest.fixture
def packs(tmp_path: Path) -> Path:
    """``tmp_path/repo/runs`` for packs, a secret in ``tmp_path``, a link out in the runs."""
    (tmp_path / "secret.txt").write_text(SECRET)
    runs = tmp_path / "repo" / "runs"
    runs.mkdir(parents=True)
    (runs / "link.txt").symlink_to(tmp_path / "secret.txt")
    return runs


@pytest.mark.parametrize(
    "attached",
    [
        "../../secret.txt",
        "link.txt",
        "{secret}",  # an absolute path that exists here, outside the pack's tree
        "out/../../../secret.txt",
    ],
)
def test_a_pack_attaching_a_file_outside_its_tree_is_refused(packs: Path, attached: str) -> None:
    named = attached.format(secret=packs.parent.parent / "secret.txt")
    path = pack_at(packs, "out/summary.md", named)
    with pytest.raises(GtaUsageError) as refused:
        read_pack(path)
    message = str(refused.value)
    assert message.startswith(f"evalpack:{path}: tasks[0] (task 1): attached_files: ")
    assert repr(named) in message
    assert "--gta-evalpack-root" in message


def test_a_pack_finds_its_own_files_and_those_under_a_named_root(packs: Path) -> None:
    repo = packs.parent
    (repo / "results").mkdir()
    (repo / "results" / "chart.png").write_bytes(b"\x89PNG")
    other_machine = "/home/someone/GTA/runs/out/summary.md"  # found by its tail, in the tree
    path = pack_at(packs, "out/summary.md", "results/chart.png", other_machine, "gone.pdf")
    (alone,) = read_pack(path).values()
    # results/ is beside the pack's directory, not in it: not looked for there unless named.
    assert alone.files[1] == str(packs / "results" / "chart.png")
    assert not Path(alone.files[1]).exists()
    (task,) = read_pack(path, roots=[repo]).values()
    assert task.files == [
        str(packs / "out" / "summary.md"),
        str(repo / "results" / "chart.png"),
        str(packs / "out" / "summary.md"),
        str(packs / "gone.pdf"),  # found nowhere: judged without, as officially
    ]


def test_nothing_is_looked_up_above_the_pack_or_in_the_working_directory(
    packs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old lookup climbed the pack's parents to ``/`` and tried the working directory."""
    monkeypatch.chdir(packs.parent.parent)
    path = pack_at(packs, "secret.txt", "/nowhere/tmp/secret.txt")
    (task,) = read_pack(path).values()
    assert task.files == [str(packs / "secret.txt"), "/nowhere/tmp/secret.txt"]
    assert not any(Path(f).is_file() for f in task.files)


#: Pieces of a hostile attachment.
PACK_PIECES = st.sampled_from(
    ["..", "out", ".", "", "summary.md", "link.txt", "secret.txt", "/", "tmp", "x\x00y", "\udcff"]
)
ATTACHED = st.one_of(
    st.lists(PACK_PIECES, min_size=1, max_size=6).map("/".join),
    st.integers(),
    st.none(),
    st.lists(st.lists(PACK_PIECES, max_size=3).map("/".join), max_size=3),
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(attached=st.lists(ATTACHED, max_size=4) | ATTACHED)
def test_property_attached_files_stay_in_the_tree_or_the_pack_is_refused(
    tmp_path_factory: pytest.TempPathFactory, attached: Any
) -> None:
    base = tmp_path_factory.mktemp("pack")
    (base / "secret.txt").write_text(SECRET)
    runs = base / "repo" / "runs"
    runs.mkdir(parents=True)
    (runs / "link.txt").symlink_to(base / "secret.txt")
    (runs / "out").mkdir()
    (runs / "out" / "summary.md").write_text("# Summary\n")
    try:
        files, refused = resolve_files(attached, runs), ""
    except GtaUsageError as exc:
        files, refused = None, str(exc)
    if refused:
        assert "outside the eval pack's directory" in refused
        return
    found = files if isinstance(files, list) else [files]
    for each in found:
        if isinstance(each, str) and os.path.lexists(each):
            assert inside(os.path.realpath(each), os.path.realpath(runs)), each


def test_a_refused_pack_sends_nothing_and_a_named_root_lets_it_through(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, packs: Path
) -> None:
    """Black box: the judge gets no request from a refused pack; the deviation is said."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    secret = packs.parent.parent / "secret.txt"
    path = pack_at(packs, "out/summary.md", str(secret))
    with JudgeServer() as judge:
        refused = gta(
            pytester,
            f"--gta-data={SAMPLE}",
            f"--gta-model=evalpack:{path}",
            "--gta-ids=1",
            f"--gta-judge-base-url={judge.base_url}",
        )
        assert refused.ret == pytest.ExitCode.USAGE_ERROR
        assert "attached_files" in refused.output
        assert judge.requests == []
        allowed = gta(
            pytester,
            f"--gta-data={SAMPLE}",
            f"--gta-model=evalpack:{path}",
            "--gta-ids=1",
            f"--gta-judge-base-url={judge.base_url}",
            f"--gta-evalpack-root={secret.parent}",
            "--gta-cache=off",
        )
        uploaded = [u.filename for u in judge.uploads()]
    assert allowed.ret in (0, 1), allowed.output[-3000:]
    assert "secret.pdf" in uploaded or "secret.txt" in uploaded, uploaded
    assert f"gta: {DEVIATION}" in allowed.output
    assert allowed.report["notes"] == [DEVIATION]


def test_an_evalpack_root_that_is_no_directory_is_a_usage_error(
    pytester: pytest.Pytester, packs: Path
) -> None:
    path = pack_at(packs, "out/summary.md")
    result = pytester.runpytest(
        f"--gta-data={SAMPLE}", f"--gta-model=evalpack:{path}", "--gta-evalpack-root=nope,"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gta-evalpack-root: 'nope' (*nope) is not a directory*"])

"""Wall time against model latency with episodes run concurrently (issue 12, SPEC section 7).

A real model endpoint answers many requests at once, so a run's ideal wall time is
``calls x latency / requests in flight``; this script measures how close the harness gets, side
by side in one run, for several ``-n`` (xdist workers) x ``--gta-concurrency`` configurations:

* the data is the real GTA release (``--data PATH``; by default ``$PYTEST_GTA_RELEASE``, else
  ``../shared/gta_release`` beside the checkout), its 229 queries and 557 reference calls, or,
  with ``--generated``, a dataset of GTA shape generated in a temporary directory from the
  bundled sample's chains (its queries cycled under new ids, each query text with a
  ``[copy N]`` suffix so no two collide; images copied; nothing downloaded);
* a fake OpenAI-compatible model on 127.0.0.1 (``tests/helpers/oracle_server.py``) answers every
  chat completion after a fixed latency, like a perfect model: it finds the query among the messages
  and the turn by the assistant messages so far (the reference prefix in step mode, its own
  earlier replies in end-to-end mode, which equal the reference because it answers correctly),
  and replies with that reference step rendered as ReAct text (the ``oracle`` model's renderer);
  past a chain that ends on a call it closes the episode with a short final answer, as the
  ``oracle`` does. It counts the requests, the most ever in flight at once and the usage tokens
  it reported;
* each (mode, config) is one ``python -m pytest --gta-model=openai/...`` subprocess (end-to-end
  with ``--gta-tools=replay``), timed from start to exit.

The calls are known beforehand: step mode makes one per reference assistant message (770 on
the release: its 557 calls and 213 final answers), end to end one per reference assistant
message plus one closing answer per chain that ends on a call (786 on the release: 770 + 16).
A run whose server count differs is reported as a problem.

The table has, per run: model calls, the peak of requests in flight the server saw, wall and
ideal seconds and their ratio, harness CPU (user + system of every process of the run) per model
call, and the peak RSS of the controller and of the largest other process (an xdist worker). The
ideal is ``calls x latency / slots`` with ``slots = processes x concurrency`` capped by what the
workload allows (step prompts are independent; an end-to-end episode's turns are sequential, so
at most one request per episode is in flight and the longest episode is a floor). Wall time
includes start-up (pytest, torch, the similarity model), so wall/ideal falls as runs grow.
Finally the per-case results (outcome, score, raw replies) and metrics of every config are
compared: they must be identical, and the script exits 1 when they are not or a run broke.

The serial config (``-n 0 --gta-concurrency 1``) takes ``calls x latency`` by construction, over
12 minutes per mode at 1 s on 229 queries, so it runs on the first ``--serial-queries`` queries
(default 40) and the table says so; ``--serial-queries 229`` runs it in full.

    python benchmarks/concurrency.py [--latency 1.0] [--data PATH | --generated] [--queries N]
        [--modes step,e2e] [--configs 0x32,2x16,0x1] [--serial-queries 40]
        [--sim-model all-mpnet-base-v2]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.release import RELEASE_ENV, release_path  # noqa: E402
from pytest_gta.dataset import Dataset, Query, bundled_sample_path  # noqa: E402
from pytest_gta.validation import load_dataset  # noqa: E402
from tests.helpers.oracle_server import PerfectModel  # noqa: E402
from tests.helpers.scripted_server import ScriptedServer  # noqa: E402

SERVED = "fake-gta"
DEFAULT_CONFIGS = "0x32,2x16,0x1"
MODES = ("step", "e2e")


# --------------------------------------------------------------------------------------------
# The dataset


def make_dataset(dest: Path, queries: int) -> Path:
    """A GTA-shaped dataset of ``queries`` queries under ``dest``, cycled from the sample.

    Query ``N`` is sample query ``N % S`` (``S`` queries in the sample) with the text suffixed
    ``[copy N]``: the fake model tells queries apart by their text, and a real dataset has no two
    queries alike either.
    """
    sample = bundled_sample_path()
    source = json.loads((sample / "dataset.json").read_text())
    chains = list(source.values())
    data = {}
    for n in range(queries):
        entry = json.loads(json.dumps(chains[n % len(chains)]))
        entry["dialogs"][0]["content"] = f"{entry['dialogs'][0]['content']} [copy {n}]"
        data[str(n)] = entry
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "dataset.json").write_text(json.dumps(data, indent=1))
    shutil.copy(sample / "toolmeta.json", dest / "toolmeta.json")
    shutil.copytree(sample / "image", dest / "image", dirs_exist_ok=True)
    return dest


def episode_calls(dataset: Dataset, query: Query, mode: str) -> int:
    """The model calls a perfect model makes on one query in one mode.

    Step mode asks once per reference assistant message. End to end the episode replays them
    and, when the chain ends on a call (the release's image-generation chains, mostly), one
    closing answer more (``pytest_gta.models.oracle.end_to_end_turn``).
    """
    turns = len(query.assistant_indices)
    if mode == "step":
        return turns
    last = dataset.reference_dialogs(query)[query.assistant_indices[-1]]
    return turns + (1 if last.get("tool_calls") else 0)


def expected_calls(dataset: Dataset, queries: int, mode: str) -> int:
    """The model calls of a run on the first ``queries`` queries."""
    return sum(episode_calls(dataset, q, mode) for q in list(dataset)[:queries])


# --------------------------------------------------------------------------------------------
# Per-process peak memory


def _status(pid: int) -> dict[str, str]:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


class PeakRss:
    """Samples ``VmHWM`` (a process's own peak RSS) of a process tree from ``/proc``.

    ``getrusage`` only gives the largest process of a whole tree; this tells the controller
    from its descendants (xdist workers). It reads the high-water mark, so a sample taken any
    time before a process exits is its peak up to then. Linux only; elsewhere it stays empty.
    """

    def __init__(self, root: int, every: float = 0.25) -> None:
        self.root = root
        self.every = every
        self.peak_kb: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> None:
        """Record the high-water mark of the root and of every descendant alive now."""
        parents: dict[int, int] = {}
        for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
            if entry.isdigit():
                ppid = _status(int(entry)).get("PPid", "").strip()
                if ppid.isdigit():
                    parents[int(entry)] = int(ppid)
        tree = {self.root}
        grew = True
        while grew:
            more = {pid for pid, ppid in parents.items() if ppid in tree} - tree
            tree |= more
            grew = bool(more)
        for pid in tree:
            hwm = _status(pid).get("VmHWM", "").split()
            if hwm and hwm[0].isdigit():
                self.peak_kb[pid] = max(self.peak_kb.get(pid, 0), int(hwm[0]))

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()

    def controller_mb(self) -> float | None:
        """Peak RSS of the pytest process itself."""
        kb = self.peak_kb.get(self.root)
        return None if kb is None else kb / 1024

    def others_mb(self) -> float | None:
        """Peak RSS of the largest other process of the run (an xdist worker), if any."""
        kb = [v for pid, v in self.peak_kb.items() if pid != self.root]
        return max(kb) / 1024 if kb else None


# --------------------------------------------------------------------------------------------
# Runs


@dataclass(frozen=True)
class Config:
    """One ``-n W --gta-concurrency C`` configuration."""

    workers: int
    concurrency: int

    @classmethod
    def parse(cls, text: str) -> Config:
        """``"2x16"``: two xdist workers, 16 episodes at once in each."""
        match = re.fullmatch(r"\s*(\d+)\s*x\s*(\d+)\s*", text)
        if match is None or int(match[2]) < 1:
            raise SystemExit(
                f"--configs: {text!r} is not WORKERSxCONCURRENCY, e.g. 0x32 (no xdist, 32 "
                "episodes at once) or 2x16"
            )
        return cls(int(match[1]), int(match[2]))

    @property
    def serial(self) -> bool:
        """Today's default: one process, one episode at a time."""
        return self.workers == 0 and self.concurrency == 1

    @property
    def processes(self) -> int:
        return max(self.workers, 1)

    def label(self) -> str:
        return f"-n {self.workers} --gta-concurrency {self.concurrency}"


@dataclass
class Run:
    """What one pytest run measured."""

    mode: str
    config: Config
    queries: int
    returncode: int
    calls: int
    expected_calls: int
    peak: int
    wall: float
    ideal: float
    cpu_s: float
    controller_mb: float | None
    worker_mb: float | None
    report: dict[str, Any] = field(repr=False)
    output: str = field(repr=False, default="")


def ideal_seconds(
    dataset: Dataset, queries: int, mode: str, config: Config, latency: float
) -> float:
    """``calls x latency / slots``, slots capped by the workload, floored by the longest chain."""
    chosen = list(dataset)[:queries]
    chains = [episode_calls(dataset, q, mode) for q in chosen]
    calls = sum(chains)
    # Step prompts are independent; an episode has one request in flight at a time.
    units = calls if mode == "step" else len(chosen)
    slots = max(1, min(config.processes * config.concurrency, units))
    longest = 1 if mode == "step" else max(chains, default=0)
    return max(calls * latency / slots, longest * latency)


def _report_rss(report: dict[str, Any], controller: bool) -> float | None:
    """Per-process ``peak_rss_mb`` from the report's ``timings``, when the harness records it."""
    timings = report.get("timings") or {}
    values = [
        float(t["peak_rss_mb"])
        for name, t in timings.items()
        if isinstance(t, dict)
        and isinstance(t.get("peak_rss_mb"), (int, float))
        and (name == "main") == controller
    ]
    return max(values) if values else None


#: ``python -m pytest`` as every benchmark run starts it.
PYTEST = [
    sys.executable,
    "-m",
    "pytest",
    "-p",
    "no:randomly",
    "-p",
    "no:cacheprovider",
    # Hypothesis (a dev extra here) spends over a second in its terminal summary: not ours.
    "-p",
    "no:hypothesispytest",
    "-q",
]


def timed(command: list[str], cwd: Path, log_path: Path) -> tuple[float, int, Any, PeakRss]:
    """Run ``command`` (output to ``log_path``): wall seconds, exit status, rusage, peak RSS.

    The fake model needs no key, but the OpenAI adapter wants one set.
    """
    env = {**os.environ, "OPENAI_API_KEY": "dummy", "HF_HUB_OFFLINE": "1"}
    with log_path.open("wb") as log:
        start = time.perf_counter()
        # Popen + wait4 rather than run: wait4 gives this run's own rusage (the children's
        # totals of getrusage are cumulative over every run of the script).
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=log)
        with PeakRss(process.pid) as rss:
            _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
    return wall, os.waitstatus_to_exitcode(status), usage, rss


def run_pytest(
    *,
    url: str,
    data: Path,
    mode: str,
    config: Config,
    queries: int,
    sim_model: str,
    model: PerfectModel,
    dataset: Dataset,
    workdir: Path,
) -> Run:
    """One benchmark run as a subprocess, timed, with its CPU and memory."""
    name = f"{mode}-{config.workers}x{config.concurrency}"
    report_path = workdir / f"{name}.json"
    log_path = workdir / f"{name}.log"
    command = [
        *PYTEST,
        f"--gta-model=openai/{SERVED}",
        f"--gta-base-url={url}",
        f"--gta-served-model={SERVED}",
        f"--gta-data={data}",
        f"--gta-mode={mode}",
        f"--gta-limit={queries}",
        "--gta-cache=off",
        f"--gta-concurrency={config.concurrency}",
        f"--gta-max-concurrency={config.concurrency}",
        f"--gta-sim-model={sim_model}",
        f"--gta-report={report_path}",
        "-n",
        str(config.workers),
        *(["--gta-tools=replay"] if mode == "e2e" else []),
    ]
    model.reset()
    wall, returncode, usage, rss = timed(command, workdir, log_path)
    output = log_path.read_text(errors="replace")
    report = json.loads(report_path.read_text()) if report_path.is_file() else {}
    controller = _report_rss(report, True) or rss.controller_mb()
    worker = _report_rss(report, False) or rss.others_mb()
    if controller is None and worker is None:
        controller = usage.ru_maxrss / 1024  # Linux: KiB; the largest process of the run
    return Run(
        mode=mode,
        config=config,
        queries=queries,
        returncode=returncode,
        calls=model.calls,
        expected_calls=expected_calls(dataset, queries, mode),
        peak=model.peak,
        wall=wall,
        ideal=ideal_seconds(dataset, queries, mode, config, model.latency),
        cpu_s=usage.ru_utime + usage.ru_stime,
        controller_mb=controller,
        worker_mb=worker,
        report=report,
        output=output,
    )


# --------------------------------------------------------------------------------------------
# Checks and the table


def problems(run: Run) -> list[str]:
    """Why a run cannot be trusted: pytest broke, cases errored, calls went uncounted."""
    out = []
    where = f"{run.mode} {run.config.label()}"
    if run.returncode not in (0, 1) or not run.report:
        tail = "\n".join(run.output.splitlines()[-15:])
        out.append(f"{where}: pytest exited {run.returncode} without a report:\n{tail}")
        return out
    outcomes = run.report.get("outcomes") or {}
    if outcomes.get("error"):
        out.append(f"{where}: {outcomes['error']} case(s) errored (see the report's cases)")
    usage = run.report.get("usage") or {}
    if usage.get("calls") != run.calls:
        out.append(f"{where}: the report counts {usage.get('calls')} calls, the server {run.calls}")
    if run.calls != run.expected_calls:
        out.append(
            f"{where}: the server counted {run.calls} calls, a perfect model makes "
            f"{run.expected_calls} on these queries"
        )
    return out


def case_results(report: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    """Per case: what must not depend on how the run was scheduled."""
    return {
        str(c["id"]): (c.get("outcome"), c.get("score"), json.dumps(c.get("replies")))
        for c in report.get("cases") or []
    }


def compare(runs: list[Run]) -> list[str]:
    """Differences between configs of one mode: per case, and whole metrics on equal query sets."""
    out = []
    for mode in dict.fromkeys(r.mode for r in runs):
        same_mode = [r for r in runs if r.mode == mode and r.report]
        if len(same_mode) < 2:
            continue
        base = max(same_mode, key=lambda r: r.queries)
        base_cases = case_results(base.report)
        for other in same_mode:
            if other is base:
                continue
            cases = case_results(other.report)
            for case_id, result in cases.items():
                if base_cases.get(case_id) != result:
                    out.append(
                        f"{mode}: case {case_id} differs between {base.config.label()} and "
                        f"{other.config.label()}: {base_cases.get(case_id)} vs {result}"
                    )
            if other.queries == base.queries and other.report.get("metrics") != base.report.get(
                "metrics"
            ):
                pair = f"{base.config.label()} and {other.config.label()}"
                out.append(f"{mode}: metrics differ between {pair}")
    return out


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def table(runs: list[Run], full_queries: int) -> str:
    """The markdown table, one row per run."""
    header = (
        "| mode | config | calls | peak in flight | wall s | ideal s | wall/ideal "
        "| CPU ms/call | peak RSS MB (controller / worker) |"
    )
    lines = [header, "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for run in runs:
        config = run.config.label()
        if run.queries != full_queries:
            config += f" ({run.queries} queries)"
        per_call = run.cpu_s * 1000 / run.calls if run.calls else float("nan")
        lines.append(
            f"| {run.mode} | `{config}` | {run.calls} | {run.peak} | {run.wall:.1f} "
            f"| {run.ideal:.1f} | {run.wall / run.ideal:.2f} | {per_call:.0f} "
            f"| {_mb(run.controller_mb)} / {_mb(run.worker_mb)} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--latency", type=float, default=1.0, help="model latency, seconds")
    parser.add_argument(
        "--data",
        metavar="PATH",
        help=f"the GTA release (default: ${RELEASE_ENV}, else ../shared/gta_release)",
    )
    parser.add_argument(
        "--generated",
        action="store_true",
        help="run on a dataset generated from the bundled sample's chains instead",
    )
    parser.add_argument(
        "--queries",
        type=int,
        help="the first N queries (--gta-limit; default: all; --generated: 229)",
    )
    parser.add_argument("--modes", default="step,e2e", help="step, e2e or both")
    parser.add_argument(
        "--configs",
        default=DEFAULT_CONFIGS,
        help=f"WORKERSxCONCURRENCY list (default: {DEFAULT_CONFIGS})",
    )
    parser.add_argument(
        "--serial-queries",
        type=int,
        default=40,
        help="queries for the serial config 0x1 (default: 40; it takes calls x latency)",
    )
    parser.add_argument(
        "--sim-model",
        default="all-mpnet-base-v2",
        help="--gta-sim-model of the runs (default: the official all-mpnet-base-v2)",
    )
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes):
        parser.error(f"--modes: {args.modes!r}: give step, e2e or step,e2e")
    if args.generated and args.data is not None:
        parser.error("--data and --generated: give one")
    if (args.queries is not None and args.queries < 1) or args.serial_queries < 1:
        parser.error("--queries and --serial-queries need a positive number of queries")
    if args.latency < 0:
        parser.error("--latency: give a number of seconds >= 0")
    configs = [Config.parse(c) for c in args.configs.split(",") if c.strip()]

    with tempfile.TemporaryDirectory(prefix="gta-concurrency-") as tmp:
        if args.generated:
            data = make_dataset(Path(tmp) / "gta_dataset", args.queries or 229)
            source = "generated from the bundled sample"
        else:
            data = release_path(args.data)
            source = f"of the GTA release at {data}"
        dataset = load_dataset(data)
        total = len(dataset.queries)
        full = min(args.queries or total, total)
        model = PerfectModel(dataset, args.latency, served=SERVED)
        expected = ", ".join(f"{m} {expected_calls(dataset, full, m)}" for m in modes)
        print(
            f"fake model latency {args.latency:g} s; {full} queries {source}; "
            f"similarity model {args.sim_model}; {os.cpu_count()} CPUs; "
            f"model calls expected: {expected}",
            flush=True,
        )
        runs: list[Run] = []
        with ScriptedServer(models=[SERVED], default=model) as server:
            for mode in modes:
                for config in configs:
                    queries = min(args.serial_queries, full) if config.serial else full
                    run = run_pytest(
                        url=server.url,
                        data=data,
                        mode=mode,
                        config=config,
                        queries=queries,
                        sim_model=args.sim_model,
                        model=model,
                        dataset=dataset,
                        workdir=Path(tmp),
                    )
                    print(
                        f"  {mode} {config.label()}: {run.calls} calls in {run.wall:.1f} s",
                        flush=True,
                    )
                    runs.append(run)
        print()
        print(table(runs, full))
        print()
        broken = [p for run in runs for p in problems(run)]
        if model.unknown:
            broken.append(f"the fake model did not recognise {model.unknown} request(s)")
        differences = compare(runs)
        compared = sum(len(case_results(r.report)) for r in runs)
        if differences:
            print(f"per-case results DIFFER across configs ({len(differences)}):")
            print("\n".join(f"  {d}" for d in differences[:20]))
        else:
            print(f"per-case results identical across configs ({compared} cases compared)")
        for problem in broken:
            print(f"PROBLEM: {problem}")
    return 1 if differences or broken else 0


if __name__ == "__main__":
    sys.exit(main())

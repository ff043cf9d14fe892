"""The sandbox worker's own parts, imported in-process: framing, replies, errors, limits' words.

tests/test_sandbox.py and tests/test_code_tools.py run the same file as the real worker inside
each sandbox; these tests reach the parts that need no sandbox (and no fork of the pytest
process), plus one run of the bare program over its pipes, which pins the wire protocol.
"""

from __future__ import annotations

import base64
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers.optional import require
from tests.helpers.paths import ROOT
from tool_backends import sandbox_worker
from tool_backends.sandbox_pool import worker_source
from tool_backends.sandbox_tree import sandbox_environment
from tool_backends.sandbox_worker import (
    Settings,
    announced,
    answer,
    calculate,
    calculator_namespace,
    checked_reply,
    encode,
    error_text,
    extract_code,
    no_reply,
    processes_of,
    receive,
    run_code,
    send,
)

SETTINGS = Settings("/scratch", 10_000, 1 << 20, 1 << 16, 8, True)


# -- command line and framing ---------------------------------------------------------------------


def test_settings_travel_on_the_command_line_in_a_fixed_order():
    assert SETTINGS.to_argv() == ["/scratch", "10000", "1048576", "65536", "8", "1", "0", "[]"]
    assert Settings.from_argv(SETTINGS.to_argv()) == SETTINGS
    assert not Settings.from_argv(["/s", "1", "2", "3", "4", "0", "9"]).pid_namespace
    assert Settings.from_argv(["/s", "1", "2", "3", "4", "0", "9"]).scratch_limit == 9
    confined = Settings("/s", 1, 2, 3, 4, False, 9, ("/usr", "/opt/py"))
    assert Settings.from_argv(confined.to_argv()) == confined


def test_a_frame_is_a_big_endian_length_and_json():
    assert encode({"ready": True}) == b'\x00\x00\x00\x0f{"ready": true}'
    assert encode({"text": "é"}) == b'\x00\x00\x00\x12{"text": "\\u00e9"}'


def test_frames_round_trip_in_order_until_end_of_stream():
    stream = io.BytesIO()
    messages = [{"ready": True}, {"kind": "solver", "code": "x = 1\n", "timeout": 2.5}, {}]
    for message in messages:
        send(stream, message)
    stream.seek(0)
    assert [receive(stream) for _ in messages] == messages
    assert receive(stream) is None


@pytest.mark.parametrize("tail", [b"", b"\x00", b"\x00\x00\x00"])
def test_a_stream_that_ends_inside_a_header_is_the_end(tail):
    assert receive(io.BytesIO(tail)) is None


def test_frames_cross_a_real_pipe():
    reader, writer = os.pipe()
    with os.fdopen(writer, "wb") as out, os.fdopen(reader, "rb") as into:
        send(out, {"png": "aGk="})
        assert receive(into) == {"png": "aGk="}


def test_announced_waits_for_the_whole_header():
    frame = encode({"text": "14"})
    assert announced(frame[:3]) is None
    assert announced(frame[:4]) == len(frame) - 4
    assert announced(bytearray(frame)) == len(frame) - 4


# -- what the model sees --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (NameError("name 'x' is not defined"), "NameError(\"name 'x' is not defined\")"),
        (ZeroDivisionError(), "ZeroDivisionError()"),
        (SystemExit(3), "SystemExit(3)"),
        (MemoryError("a huge list"), "MemoryError('the memory limit was exceeded')"),
        (ValueError("v" * 50), "ValueError('" + "v" * 28),
    ],
)
def test_error_text_is_the_official_repr(error, expected):
    assert error_text(error, 40) == expected


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("2+3*4", "14"),
        ("sqrt(16)", "4.0"),
        ("round(pi, 3)", "3.142"),
        ("max(3, 7) - fabs(-2)", "5.0"),
        ("29,000 + 32,900", "(29, 32, 900)"),
        ("math.floor(2.5) + sum([1, 2])", "5"),
        ("math.nope", "{}"),
        ("[n * n for n in (1, 2)]", "[1, 4]"),
    ],
)
def test_calculate(expression, expected):
    assert calculate(expression) == expected


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        ("1/0", ZeroDivisionError),
        # With __builtins__ None, a name that is not in the namespace is looked up in None.
        ("__import__('os').getcwd()", TypeError),
        ("x + 1", TypeError),
        ("abs(-2)", TypeError),
        ("math.nope(1)", TypeError),
        ("2 +", SyntaxError),
        ("", SyntaxError),
    ],
)
def test_calculate_raises_what_eval_raises(expression, error):
    with pytest.raises(error):
        calculate(expression)


def test_the_calculator_namespace_is_the_official_one():
    """``python_calculator.safe_eval``: math's public names, ``math``, four builtins, no others."""
    import math

    names = calculator_namespace()
    public = {name for name in vars(math) if not name.startswith("_")}
    assert set(names) == public | {"math", "max", "min", "round", "sum", "__builtins__"}
    assert names["__builtins__"] is None
    assert set(names["math"]) == public
    assert names["math"].tau == math.tau
    with pytest.raises(TypeError, match=r"^'Dict' object is not callable$"):
        names["math"].nope()


@pytest.mark.parametrize(
    ("command", "program"),
    [
        ("x = 1", "x = 1"),
        ("Here:\n```python\nx = 1\n```\nThat is all.", "\nx = 1\n"),
        ("```\nx = 1\n```", "\nx = 1\n"),
        ("```python\nx = 1", "\nx = 1"),
        ("```\na\n```\n```python\nb\n```", "\nb\n"),
    ],
)
def test_extract_code_takes_the_first_fence_as_the_official_tools(command, program):
    assert extract_code(command) == program


FENCE_FREE = st.text(st.characters(blacklist_characters="`"), max_size=40)


@given(before=FENCE_FREE, program=FENCE_FREE, after=FENCE_FREE, tag=st.sampled_from(["python", ""]))
def test_extract_code_returns_the_fenced_program(before, program, after, tag):
    command = f"{before}```{tag}{program}```{after}"
    assert extract_code(command) == program
    assert extract_code(before) == before


def test_solver_returns_the_text_of_solution_cut_to_the_limit():
    assert run_code("solver", "def solution():\n    return [1, 2]", 100) == {"text": "[1, 2]"}
    assert run_code("solver", "def solution():\n    return 'y' * 50", 10) == {"text": "y" * 10}


@pytest.mark.parametrize(
    ("code", "error"),
    [
        ("x = 1", NameError),
        ("solution = 3", TypeError),
        ("def solution(:", SyntaxError),
        ("def solution():\n    raise KeyError('k')", KeyError),
    ],
)
def test_solver_errors_are_raised(code, error):
    with pytest.raises(error):
        run_code("solver", code, 100)


def test_plot_returns_a_png_of_the_figure():
    require("matplotlib")
    code = "from matplotlib.figure import Figure\ndef solution():\n    return Figure()"
    reply = run_code("plot", code, 100)
    assert reply["png"].startswith("iVBORw0KGgo")  # base64 of the PNG signature


def test_a_generator_returns_its_file_or_the_official_failure_text():
    built = "def solution():\n    return b'PK\\x03\\x04 deck'"
    assert run_code("generator", built, 10) == {
        "file": base64.b64encode(b"PK\x03\x04 deck").decode()
    }
    failed = "def solution():\n    return 'An error occurred: ' + 'x' * 50"
    assert run_code("generator", failed, 30) == {"error": ("An error occurred: " + "x" * 50)[:30]}
    with pytest.raises(TypeError, match="returns bytes, not int"):
        run_code("generator", "def solution():\n    return 3", 10)


def test_plot_must_return_a_figure():
    require("matplotlib")
    with pytest.raises(
        TypeError, match=r"^The `solution` function must return the matplotlib figure\.$"
    ):
        run_code("plot", "def solution():\n    return 3", 100)


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        ({"kind": "calculator", "code": "2**10"}, {"text": "1024"}),
        ({"kind": "calculator", "code": "1/0"}, {"error": "ZeroDivisionError('division by zero')"}),
        ({"kind": "solver", "code": "def solution():\n    return 7"}, {"text": "7"}),
        ({"kind": "solver", "code": "import sys\nsys.exit(3)"}, {"error": "SystemExit(3)"}),
        ({"kind": "solver", "code": "raise KeyboardInterrupt"}, {"error": "KeyboardInterrupt()"}),
        ({"kind": "solver", "code": "def solution():\n    return 'y' * 99"}, {"text": "y" * 40}),
    ],
)
def test_answer_turns_everything_the_code_raises_into_an_error_reply(request_, expected):
    assert answer(request_, 40) == expected


def test_answer_names_an_error_that_cannot_be_printed():
    code = "class Odd(Exception):\n    def __repr__(self):\n        raise RuntimeError\nraise Odd"
    assert answer({"kind": "solver", "code": code}, 100) == {"error": "Odd"}


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (signal.SIGKILL, "CPU time limit exceeded"),
        (signal.SIGXCPU, "CPU time limit exceeded"),
        (signal.SIGSEGV, "the code was killed by signal SIGSEGV"),
        (3 << 8, "the code ended without a result (memory limit exceeded?)"),
        (0, "the code ended without a result (memory limit exceeded?)"),
    ],
)
def test_no_reply_says_which_limit(status, expected):
    """Wait statuses as Linux encodes them: the signal number, or the exit code shifted by 8."""
    assert no_reply(status) == {"limit": expected}


def test_processes_of_counts_a_uids_processes():
    assert processes_of(os.getuid()) >= 1
    assert processes_of(2**31 - 7) == 0


# -- the program on its own -----------------------------------------------------------------------


def test_importing_the_worker_runs_nothing():
    """The host and these tests import it: no argv read, no fd touched, no heavy import."""
    code = (
        "import sys\n"
        "import tool_backends.sandbox_worker\n"
        "heavy = {'sympy', 'matplotlib', 'PIL'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
        "print('clean')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (out.returncode, out.stdout) == (0, "clean\n"), out.stderr


def test_the_host_runs_the_module_file_itself():
    assert worker_source() == Path(sandbox_worker.__file__).read_text(encoding="utf-8")


@pytest.mark.slow
def test_the_bare_program_speaks_the_protocol():
    """``python -I -c <text>`` outside the checkout: ready, replies, limits, exit on EOF."""
    with tempfile.TemporaryDirectory(prefix="gta-worker-test-") as scratch:
        os.chmod(scratch, 0o755)  # a call runs as CALL_UID when the tests run as root
        settings = Settings(scratch, 100, 400, 1 << 16, 8, False)
        process = subprocess.Popen(
            [sys.executable, "-I", "-c", worker_source(), *settings.to_argv()],
            cwd=scratch,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=sandbox_environment(scratch),
        )
        assert process.stdin is not None
        assert process.stdout is not None

        def ask(**request):
            send(process.stdin, {"timeout": 2.0, "memory": 1 << 30, **request})
            return receive(process.stdout)

        try:
            assert receive(process.stdout) == {"ready": True}
            assert ask(kind="calculator", code="2+3*4") == {"text": "14"}
            loud = "import sys\ndef solution():\n    print('noise')\n    return 'quiet'"
            assert ask(kind="solver", code=loud) == {"text": "quiet"}
            loop = "def solution():\n    while True:\n        pass"
            assert ask(kind="solver", code=loop, timeout=0.5) == {
                "limit": "time limit exceeded (0.5 s wall clock)"
            }
            big = "def solution():\n    return 'y' * 10**6"
            assert ask(kind="solver", code=big) == {"text": "y" * 100}
            exits = "import os\ndef solution():\n    os._exit(0)"
            assert ask(kind="solver", code=exits) == {
                "limit": "the code ended without a result (memory limit exceeded?)"
            }
            kills = "import os, signal\ndef solution():\n    os.kill(os.getpid(), signal.SIGTERM)"
            assert ask(kind="solver", code=kills) == {
                "limit": "the code was killed by signal SIGTERM"
            }
            # A reply is held to the limit once it outgrows one read (64 KiB), so this PNG of
            # noise is large. No numpy.random: outside a sandbox, a call as root runs as CALL_UID,
            # who cannot read a Python under /root (pyenv) and imports only what is preloaded.
            noise = (
                "import numpy\n"
                "from matplotlib.figure import Figure\n"
                "def solution():\n"
                "    figure = Figure()\n"
                "    pixels = numpy.arange(90_000) * 2_654_435_761 % 4_093\n"
                "    figure.add_subplot().imshow(pixels.reshape(300, 300))\n"
                "    return figure"
            )
            assert ask(kind="plot", code=noise) == {"limit": "output limit exceeded (400 bytes)"}
        finally:
            process.stdin.close()
            assert process.wait(timeout=30) == 0
            process.stdout.close()


# -- what a call's child writes into its reply pipe -----------------------------------------------

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 8).decode()
FILE = base64.b64encode(b"%PDF-1.4 " * 20).decode()


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (b'{"text": "42"}', {"text": "42"}),
        (b'{"error": "NameError()"}', {"error": "NameError()"}),
        (b'{"limit": "CPU time limit exceeded"}', {"limit": "CPU time limit exceeded"}),
        (json.dumps({"png": PNG}).encode(), {"png": PNG}),
        (b'{"text": "' + b"y" * 50 + b'"}', {"text": "y" * 40}),
        (b"[1]", {"error": sandbox_worker.FORGED}),
        (b"{not json", {"error": sandbox_worker.FORGED}),
        (b'{"text": 1}', {"error": sandbox_worker.FORGED}),
        (b'{"text": "a", "png": "b"}', {"error": sandbox_worker.FORGED}),
        (b'{"broken": "the harness"}', {"error": sandbox_worker.FORGED}),
        (b'{"ready": true}', {"error": sandbox_worker.FORGED}),
        (b'{"png": "not base64!"}', {"error": sandbox_worker.FORGED}),
        (json.dumps({"png": base64.b64encode(b"GIF89a").decode()}).encode(), None),
        # A generator's file is any bytes, never cut to the text limit.
        (json.dumps({"file": FILE}).encode(), {"file": FILE}),
        (b'{"file": "not base64!"}', {"error": sandbox_worker.FORGED}),
        (b'{"file": 7}', {"error": sandbox_worker.FORGED}),
        (b"[" * 100_000, {"error": sandbox_worker.FORGED}),
        (b"\xff\xfe", {"error": sandbox_worker.FORGED}),
    ],
)
def test_a_reply_is_trusted_only_as_far_as_the_code_could_have_returned_it(payload, expected):
    assert checked_reply(payload, 40) == (expected or {"error": sandbox_worker.FORGED})


@given(
    st.one_of(
        st.binary(max_size=200),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=20),
            lambda children: (
                st.lists(children, max_size=3)
                | st.dictionaries(
                    st.sampled_from(["text", "png", "file", "error", "limit", "x"]),
                    children,
                    max_size=3,
                )
            ),
            max_leaves=10,
        ).map(lambda value: json.dumps(value).encode()),
    )
)
def test_any_bytes_in_the_reply_pipe_end_as_one_reply_the_host_can_use(payload):
    reply = checked_reply(payload, 100)
    ((key, value),) = reply.items()
    assert key in sandbox_worker.REPLY_KEYS
    assert isinstance(value, str)
    assert key in sandbox_worker.BINARY_KEYS or len(value) <= 100


def test_a_call_directory_goes_whatever_its_code_left_in_it(tmp_path):
    calldir = tmp_path / "call-1-1"
    (calldir / "a" / "b").mkdir(parents=True)
    (calldir / "a" / "b" / "f").write_text("x")
    (calldir / "link").symlink_to(tmp_path)
    (calldir / "a" / "b").chmod(0)
    (calldir / "a").chmod(0)
    sandbox_worker.remove_tree(str(calldir))
    assert not calldir.exists()
    assert tmp_path.is_dir()  # the link was removed, not followed
    sandbox_worker.remove_tree(str(calldir))  # gone already: nothing to do


def test_usage_counts_the_blocks_a_call_wrote(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"x" * (1 << 20))
    assert (1 << 20) <= sandbox_worker.usage(str(tmp_path)) < (2 << 20)


def test_nobody_is_mapped_here_unless_in_a_user_namespace_that_maps_only_root():
    if not _in_user_namespace():
        assert sandbox_worker.mapped(sandbox_worker.NOBODY)
    program = "from tool_backends import sandbox_worker as w; print(w.mapped(65534))"
    inside = subprocess.run(
        ["unshare", "--user", "--map-root-user", sys.executable, "-c", program],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    if inside.returncode != 0:
        pytest.skip(f"user namespaces do not work here: {inside.stderr[-300:]}")
    assert inside.stdout.strip() == "False"


def _in_user_namespace() -> bool:
    return Path("/proc/self/uid_map").read_text().split()[:3] != ["0", "0", "4294967295"]

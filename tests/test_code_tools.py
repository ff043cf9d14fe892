"""Calculator, Solver and Plot on the local backend, and the sandbox they run model code in."""

from __future__ import annotations

import socket
import textwrap
import time
from pathlib import Path

import pytest

from pytest_gta.errors import GtaToolError
from pytest_gta.tools import ToolContext, ToolInvocation
from tool_backends import code_tools
from tool_backends.sandbox import Sandbox, SandboxWorker, default_sandbox

pytestmark = pytest.mark.slow

#: Short limits keep the attack tests quick; the host gives up after the limit plus this slack.
LIMIT_S = 2.0
#: A generous bound on how long an attack may take to end: the sandbox's own limits are what end
#: it (2 s wall clock); the slack absorbs a loaded CI machine and the host-side deadline.
WITHIN_S = LIMIT_S + 13.0


@pytest.fixture(autouse=True)
def short_limits(monkeypatch):
    monkeypatch.setattr(code_tools, "CALCULATOR_TIMEOUT_S", LIMIT_S)
    monkeypatch.setattr(code_tools, "CODE_TIMEOUT_S", LIMIT_S)


@pytest.fixture
def context(sample_dataset, tmp_path):
    query = next(iter(sample_dataset.queries.values()))
    return ToolContext(sample_dataset, query, tmp_path / "out")


def call(dataset, context, tool, **arguments):
    meta = dataset.toolmeta[tool]
    function = {"Calculator": code_tools.calculator, "Solver": code_tools.solver}.get(
        tool, code_tools.plot
    )
    return function(ToolInvocation(meta, arguments, arguments), context)


def text_of(result):
    assert len(result.items) == 1
    assert result.items[0].type == "text"
    return result.items[0].content


def program(body: str) -> dict[str, str]:
    return {"command": textwrap.dedent(body)}


def attack(dataset, context, tool, code, match=None):
    key = "expression" if tool == "Calculator" else "command"
    start = time.monotonic()
    with pytest.raises(GtaToolError, match=match) as info:
        call(dataset, context, tool, **{key: textwrap.dedent(code)})
    assert time.monotonic() - start < WITHIN_S  # bound: catches a runaway
    return str(info.value)


def test_sandbox_kind_is_reported():
    assert default_sandbox().kind() in ("bubblewrap", "rlimit")


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("2+3*4", "14"),
        ("sqrt(16)", "4.0"),
        ("(3.5 + 2) * 4", "22.0"),
        ("round(pi, 3)", "3.142"),
        ("log(e) + cos(0)", "2.0"),
        ("max(3, 7) - fabs(-2)", "5.0"),
        ("10 / 4", "2.5"),
        # Python's eval, as the official tool: a comma makes a tuple (the release's query 104)
        ("29,000 + 32,900", "(29, 32, 900)"),
        ("math.sqrt(16) + sum([1, 2])", "7.0"),
        ("().__class__.__bases__", "(<class 'object'>,)"),
    ],
)
def test_calculator(sample_dataset, context, expression, expected):
    assert text_of(call(sample_dataset, context, "Calculator", expression=expression)) == expected


def test_solver_solves_an_equation(sample_dataset, context):
    code = """
        from sympy import symbols, solve
        def solution():
            x = symbols('x')
            return solve(x**2 - 5*x + 6, x)
    """
    assert text_of(call(sample_dataset, context, "Solver", **program(code))) == "[2, 3]"


def test_plot_returns_a_png(sample_dataset, context):
    from PIL import Image

    code = """
        import matplotlib.pyplot as plt
        def solution():
            figure = plt.figure()
            plt.plot([1, 2, 3], [1, 4, 9])
            return figure
    """
    result = call(sample_dataset, context, "Plot", **program(code))
    (item,) = result.items
    assert item.type == "image"
    path = Path(item.content)
    assert path.is_absolute()
    assert path.parent == context.output_dir.resolve()
    with Image.open(path) as image:
        assert image.format == "PNG"
        assert image.size[0] > 100
        assert image.size[1] > 100
    second = call(sample_dataset, context, "Plot", **program(code)).items[0].content
    assert second != item.content


@pytest.mark.parametrize(
    ("tool", "code", "match"),
    [
        ("Solver", "def solution():\n    return x", r"^NameError\(\"name 'x' is not defined\"\)$"),
        ("Solver", "def solution(:\n    pass", "SyntaxError"),
        ("Solver", "x = 1", "solution"),
        ("Solver", "def solution():\n    raise SystemExit(3)", "SystemExit"),
        ("Plot", "def solution():\n    return 42", "must return the matplotlib figure"),
        ("Calculator", "1/0", "ZeroDivisionError"),
        ("Calculator", "2 +", "SyntaxError"),
    ],
)
def test_errors_in_the_code_are_tool_errors(sample_dataset, context, tool, code, match):
    attack(sample_dataset, context, tool, code, match)


@pytest.mark.parametrize(
    "expression",
    [
        "9**9**9",
        "factorial(10**6)",
        "__import__('os')",
        "'a' * 10**10",
        "open('/etc/passwd').read()",
    ],
)
def test_calculator_attacks(sample_dataset, context, expression):
    attack(sample_dataset, context, "Calculator", expression)


#: The os module, reached from the Calculator's expression as the official tool allows: with
#: ``__builtins__`` None, introspection still reaches every class of the interpreter.
OS = "[c for c in ().__class__.__base__.__subclasses__() if c.__name__ == '_wrap_close'][0]"
OS += ".__init__.__globals__"


def test_calculator_introspection_reaches_os_but_not_the_host(
    sample_dataset, context, tmp_path, monkeypatch
):
    """The expression means what it means to Python's eval; the sandbox is what confines it."""
    monkeypatch.setenv("GTA_TEST_SECRET", "TOP-SECRET-4711")
    seen = text_of(
        call(sample_dataset, context, "Calculator", expression=f"{OS}['environ'].get('HOME')")
    )
    assert seen.startswith("/")  # the sandbox's own scratch home
    expression = f"{OS}['environ'].get('GTA_TEST_SECRET', 'absent')"
    assert text_of(call(sample_dataset, context, "Calculator", expression=expression)) == "absent"
    target = tmp_path / "escaped.txt"
    writes = f"{OS}['open']({str(target)!r}, {OS}['O_WRONLY'] | {OS}['O_CREAT'])"
    attack(sample_dataset, context, "Calculator", writes)
    assert not target.exists()


LOOP = """
    def solution():
        while True:
            pass
"""
MEMORY = """
    def solution():
        x = 'a' * 10**10
        return len(x)
"""
BIG_LIST = """
    def solution():
        x = []
        while True:
            x.append([0] * 10**6)
"""
FORK_BOMB = """
    import os
    def solution():
        while True:
            os.fork()
"""
SPAWN = """
    import subprocess
    def solution():
        while True:
            subprocess.Popen(['sleep', '100'])
"""
PRINT_FLOOD = """
    def solution():
        while True:
            print('x' * 10**6)
"""


@pytest.mark.parametrize("tool", ["Solver", "Plot"])
@pytest.mark.parametrize(
    ("code", "match"),
    [
        (LOOP, "time limit"),
        (MEMORY, "MemoryError"),
        # Growing a list hits the memory limit, or on a slow machine the wall clock first:
        # either way the limit ended it.
        (BIG_LIST, "MemoryError|memory|time limit"),
        (FORK_BOMB, None),
        (SPAWN, None),
        (PRINT_FLOOD, "time limit"),
    ],
    ids=["loop", "memory", "big-list", "fork-bomb", "spawn", "print-flood"],
)
def test_code_attacks_end_as_tool_errors(sample_dataset, context, tool, code, match):
    attack(sample_dataset, context, tool, code, match)


def test_writing_outside_the_scratch_directory_fails(sample_dataset, context, tmp_path):
    target = tmp_path / "escaped.txt"
    code = f"""
        def solution():
            with open({str(target)!r}, 'w') as handle:
                handle.write('escaped')
            return 'written'
    """
    attack(sample_dataset, context, "Solver", code)
    assert not target.exists()


def test_the_scratch_directory_is_writable_but_small(sample_dataset, context):
    code = """
        def solution():
            with open('small.txt', 'w') as handle:
                handle.write('ok')
            with open('big.bin', 'wb') as handle:
                handle.write(b'0' * (64 << 20))
    """
    attack(sample_dataset, context, "Solver", code, "File too large|Errno 27")


def test_files_outside_cannot_be_read(sample_dataset, context, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-4711")
    code = f"""
        def solution():
            return open({str(secret)!r}).read()
    """
    message = attack(sample_dataset, context, "Solver", code)
    assert "TOP-SECRET-4711" not in message


def test_no_network(sample_dataset, context):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(0.5)
        port = listener.getsockname()[1]
        code = f"""
            import socket
            def solution():
                socket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'hi')
                return 'connected'
        """
        attack(sample_dataset, context, "Solver", code)
        with pytest.raises(TimeoutError):
            listener.accept()


def test_huge_results_are_capped(sample_dataset, context):
    code = """
        def solution():
            return 'y' * 10**8
    """
    text = text_of(call(sample_dataset, context, "Solver", **program(code)))
    assert text == "y" * default_sandbox().limits.max_text_chars


def test_the_worker_recovers(sample_dataset, context):
    attack(sample_dataset, context, "Solver", FORK_BOMB)
    attack(sample_dataset, context, "Solver", LOOP)
    solve = "import sympy\ndef solution():\n    return sympy.sqrt(8)"
    assert text_of(call(sample_dataset, context, "Solver", command=solve)) == "2*sqrt(2)"
    # Dead workers are replaced on the next call.
    processes = [w._process for w in default_sandbox().pool().workers() if w._process is not None]
    assert processes
    for process in processes:
        process.kill()
        process.wait()
    assert text_of(call(sample_dataset, context, "Solver", command=solve)) == "2*sqrt(2)"


def test_rlimit_fallback(tmp_path):
    """Without bubblewrap the same worker runs as a plain subprocess with the rlimits."""
    host = Sandbox("rlimit")
    worker = SandboxWorker(host)
    try:
        solve = "import sympy\ndef solution():\n    return sympy.sqrt(8)"
        assert worker.run("solver", solve).text == "2*sqrt(2)"
        assert worker.run("calculator", "sqrt(16)").text == "4.0"
        for code in (LOOP, MEMORY, FORK_BOMB):
            start = time.monotonic()
            with pytest.raises(GtaToolError):
                worker.run("solver", textwrap.dedent(code), timeout=LIMIT_S)
            assert time.monotonic() - start < WITHIN_S  # bound: catches a runaway
        assert worker.run("solver", solve).text == "2*sqrt(2)"
    finally:
        worker.close()
        host.close()

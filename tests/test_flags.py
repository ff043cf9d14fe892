"""Every ``--gta-*`` flag is named once, in ``pytest_gta/flags.py``, and registered once.

A message, help text or command line elsewhere takes the name from :mod:`pytest_gta.flags`
(``f"{OPT_MODEL}=oracle"``), so renaming an option is one line and no message can name an option
that does not exist. The check reads the code, not the text: docstrings and comments are exempt
(they document, and nothing prints them); every other string constant, the literal parts of
f-strings and string literals inside their ``{...}`` included, may not hold a ``--gta-x`` flag.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

from pytest_gta import flags
from pytest_gta.options import OPTIONS
from pytest_gta.options.table import FEATURES, HELP_ORDER

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pytest_gta", "tool_backends")
HOME = ROOT / "pytest_gta" / "flags.py"
#: A flag's name; ``--gta-*`` (the namespace itself, in prose) is not one.
FLAG = re.compile(r"--gta-[a-z0-9]")
DEFINED = {name: value for name, value in vars(flags).items() if name.startswith("OPT_")}


def docstrings(tree: ast.AST) -> set[int]:
    """The ids of docstring nodes: a string that is a statement of its own.

    That is a module's, class's or function's docstring, or an attribute's (the string under a
    field, which pydantic turns into the field's description in the published JSON Schema).
    """
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            for statement in node.body:
                if (
                    isinstance(statement, ast.Expr)
                    and isinstance(statement.value, ast.Constant)
                    and isinstance(statement.value.value, str)
                ):
                    found.add(id(statement.value))
    return found


def raw_flags(source: str) -> list[tuple[int, str]]:
    """(line, text) of every string constant of ``source`` that holds a flag's name."""
    tree = ast.parse(source)
    exempt = docstrings(tree)
    return sorted(
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in exempt
        and FLAG.search(node.value)
    )


def test_no_flag_is_spelled_outside_flags_py():
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {text[:80]!r}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != HOME
        for line, text in raw_flags(path.read_text(encoding="utf-8"))
    ]
    assert offenders == [], "name flags through pytest_gta.flags:\n" + "\n".join(offenders)


def test_the_checker_sees_raw_flags_and_lets_docs_and_names_pass():
    source = '''
"""Module docstring naming --gta-model is fine."""
from pytest_gta.flags import OPT_MODEL

A = "--gta-model=oracle"
B = f"{OPT_MODEL}=oracle and --gta-mode too"
C = f"{'--gta-agent' if A else OPT_MODEL}"
D = "any --gta-* option"  # the namespace, not a flag; a comment with --gta-data is fine


def f():
    """A docstring with --gta-report."""
    return f"{OPT_MODEL}={A}"
'''
    assert [line for line, _ in raw_flags(source)] == [5, 6, 7]


def test_every_flag_is_defined_once_and_registered_once():
    values = Counter(DEFINED.values())
    assert [flag for flag, count in values.items() if count > 1] == []
    for name, flag in DEFINED.items():
        assert re.fullmatch(r"--gta-[a-z0-9]+(-[a-z0-9]+)*", flag), name
        assert name == "OPT_" + flag.removeprefix("--gta-").replace("-", "_").upper()
    registered = Counter(spec.flag for feature in FEATURES for spec in feature.rows)
    assert [flag for flag, count in registered.items() if count > 1] == []
    assert set(registered) == set(DEFINED.values())
    assert len(HELP_ORDER) == len(set(HELP_ORDER)) == len(registered)
    assert [spec.flag for spec in OPTIONS] == list(HELP_ORDER)


def test_dests_and_ini_keys_derive_from_the_flag():
    for spec in OPTIONS:
        assert spec.dest == flags.dest(spec.flag) == spec.flag[2:].replace("-", "_")
        assert spec.ini in (None, spec.dest)

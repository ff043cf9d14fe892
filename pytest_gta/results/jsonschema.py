"""The published JSON Schemas of the reports, the comparison and the erratum (docs/schema/).

Dashboards and other tools ingest ``--gta-report`` files (a run's report,
``pytest-gta-report/1``; a comparison of runs, ``pytest-gta-comparison/1``) and can validate
them against these schemas; ``erratum.schema.json`` describes the erratum that ships with the
package (``gta-erratum/1``, :mod:`pytest_gta.results.erratum`); ``workflow-report.schema.json``
and ``scored-report.schema.json`` the reports of a GTA-Workflow run and of a scored benchmark
(a report's ``benchmark`` field says which kind it is). The schemas are generated
from the classes that read and write the files (:class:`~pytest_gta.results.report.RunReport`,
:class:`~pytest_gta.results.comparison.Comparison`), in serialization mode and by alias, so
they describe the JSON exactly as written, each field's docstring as its description (read
from the classes' source here, when a schema is made: pydantic's ``use_attribute_docstrings``
would read every class's source at import, in every run, for a schema nobody asked for).

The committed files are kept in step with the classes by a test; after changing a class, write
them again::

    python -m pytest_gta.results.jsonschema docs/schema
    python -m pytest_gta.results.jsonschema --check docs/schema   # exit status 1 when stale
"""

from __future__ import annotations

import argparse
import ast
import functools
import inspect
import itertools
import json
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from pytest_gta.results.base import Doc
from pytest_gta.results.comparison import Comparison
from pytest_gta.results.erratum import ErratumFile
from pytest_gta.results.report import RunReport
from pytest_gta.results.scored import ScoredReport
from pytest_gta.results.workflow import WorkflowReport

__all__ = [
    "COMMAND",
    "SCHEMA_DIALECT",
    "SCHEMA_FILES",
    "comparison_schema",
    "json_schema",
    "main",
    "report_schema",
    "schema_text",
    "stale_files",
]

#: The JSON Schema dialect pydantic generates.
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
#: Each published file and the class it describes.
SCHEMA_FILES: dict[str, type[Doc]] = {
    "report.schema.json": RunReport,
    "comparison.schema.json": Comparison,
    "erratum.schema.json": ErratumFile,
    # The other benchmarks' reports (each says its ``benchmark``; one reader reads every kind).
    "workflow-report.schema.json": WorkflowReport,
    "scored-report.schema.json": ScoredReport,
}
#: What a stale file's message says to run.
COMMAND = "python -m pytest_gta.results.jsonschema"


@functools.cache
def _own_field_docs(cls: type) -> dict[str, str]:
    """{field: docstring} of the fields ``cls``'s own body documents.

    An attribute docstring (PEP 257) is the string literal right under the annotated name.
    """
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # a class made at run time (a generic's parametrization)
        return {}
    tree = ast.parse(source)
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs = {}
    for field, after in itertools.pairwise(body):
        if (
            isinstance(field, ast.AnnAssign)
            and isinstance(field.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[field.target.id] = inspect.cleandoc(after.value.value)
    return docs


def field_docs(cls: type[BaseModel]) -> dict[str, str]:
    """{field: docstring} of every field of ``cls``, a subclass's own winning over its bases'."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if issubclass(klass, BaseModel):
            docs.update(_own_field_docs(klass))
    return {name: doc for name, doc in docs.items() if name in cls.model_fields}


class _Described(GenerateJsonSchema):
    """Pydantic's generator, each field's docstring added as its description."""

    def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
        json_schema = super().model_schema(schema)
        cls = cast(type[BaseModel], schema["cls"])
        properties = json_schema.get("properties", {})
        for name, doc in field_docs(cls).items():
            info = cls.model_fields[name]
            key = info.serialization_alias or info.alias or name
            shown = properties.get(key)
            if shown is not None and "description" not in shown:
                properties[key] = _described(shown, doc)
        return json_schema


def _described(shown: dict[str, Any], doc: str) -> dict[str, Any]:
    """``shown`` with its description where pydantic puts one: before the title it adds next.

    (Pydantic sorts every schema's keys at the end, except those under a ``properties`` key:
    a field named ``properties`` keeps this order in the file.)
    """
    out: dict[str, Any] = {}
    for key, value in shown.items():
        if key == "title":
            out["description"] = doc
        out[key] = value
    out.setdefault("description", doc)
    return out


def json_schema(cls: type[Doc]) -> dict[str, Any]:
    """The JSON Schema of the JSON ``cls`` writes (serialization mode, by alias)."""
    schema = cls.model_json_schema(mode="serialization", by_alias=True, schema_generator=_Described)
    return {"$schema": SCHEMA_DIALECT, **schema}


def report_schema() -> dict[str, Any]:
    """The JSON Schema of a run's report (``pytest-gta-report/1``)."""
    return json_schema(RunReport)


def comparison_schema() -> dict[str, Any]:
    """The JSON Schema of a comparison of runs (``pytest-gta-comparison/1``)."""
    return json_schema(Comparison)


def schema_text(cls: type[Doc]) -> str:
    """A schema file's text: stable formatting, so the committed file diffs line by line."""
    return json.dumps(json_schema(cls), indent=2, sort_keys=False) + "\n"


def stale_files(directory: Path) -> list[Path]:
    """The schema files in ``directory`` that are missing or differ from the classes."""
    stale = []
    for name, cls in SCHEMA_FILES.items():
        path = directory / name
        try:
            current = path.read_text(encoding="utf-8")
        except OSError:
            current = None
        if current != schema_text(cls):
            stale.append(path)
    return stale


def main(argv: Sequence[str] | None = None) -> int:
    """Write the schema files into DIR, or with ``--check`` say which are stale (exit 1)."""
    parser = argparse.ArgumentParser(
        prog=COMMAND, description="Write (or check) the JSON Schemas of pytest-gta's reports."
    )
    parser.add_argument("directory", metavar="DIR", type=Path, help="docs/schema")
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 naming any stale file"
    )
    args = parser.parse_args(argv)
    directory: Path = args.directory
    if args.check:
        stale = stale_files(directory)
        for path in stale:
            print(f"{path} is stale: run {COMMAND} {directory}", file=sys.stderr)
        return 1 if stale else 0
    directory.mkdir(parents=True, exist_ok=True)
    for name, cls in SCHEMA_FILES.items():
        (directory / name).write_text(schema_text(cls), encoding="utf-8")
        print(f"wrote {directory / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

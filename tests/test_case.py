"""A case's id, its parsing back from ids and node ids, and its marks (``pytest_gta.case``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pytest_gta.case import EPOCH_TAG, Case, describe_mark, mark_name, static_marks
from pytest_gta.vocabulary import CATEGORIES, MODES

modes = st.sampled_from(MODES)
#: Query ids as dataset.json keys may spell them: anything but the ']' that ends a node id's
#: parameters (lone surrogates and newlines included).
qids = st.text(min_size=1).filter(lambda q: "]" not in q)


def test_the_id_is_mode_then_query_id(sample_dataset):
    case = Case("e2e", sample_dataset["3"])
    assert case.id == f"e2e-{case.query.qid}"
    assert repr(case) == f"Case(e2e-{case.query.qid})"
    assert Case.find_in_nodeid(f"gta::test_query[{case.id}]") == ("e2e", case.query.qid, None)


@given(mode=modes, qid=qids, test=st.sampled_from(["gta::test_query", "tests/t.py::test_x"]))
def test_a_node_id_names_its_case(mode, qid, test):
    assert Case.find_in_nodeid(f"{test}[{Case.format_id(mode, qid)}]") == (mode, qid, None)


@given(text=st.text().filter(lambda t: "[" not in t))
def test_text_without_a_bracket_is_not_a_case(text):
    assert Case.find_in_nodeid(text) is None


@given(
    before=st.text().filter(lambda t: "[" not in t),
    mode=modes,
    qid=qids.filter(lambda q: EPOCH_TAG not in q),
    after=st.text(),
)
def test_the_first_bracketed_case_id_is_found_wherever_it_sits(before, mode, qid, after):
    """Every example asserts (no ``if found``): the id is found exactly, whatever surrounds it."""
    assert Case.find_in_nodeid(f"{before}[{mode}-{qid}]{after}") == (mode, qid, None)


def test_not_cases():
    assert Case.find_in_nodeid("t.py::test[train-3]") is None
    assert Case.find_in_nodeid("t.py::test[e2e-]") is None
    assert Case.find_in_nodeid("tests/test_x.py::test_plain") is None
    assert Case.find_in_nodeid("t.py::test[step-1-extra]") == ("step", "1-extra", None)


def test_marks_come_from_the_data(sample_dataset):
    query = sample_dataset["3"]
    assert Case("step", query).marks() == [
        "gta",
        "gta_mode_step",
        "gta_type_objective",
        "gta_category_logic",
        "gta_category_perception",
        "gta_tool_CountGivenObject",
        "gta_tool_OCR",
        "gta_tool_Calculator",
    ]


def test_static_marks_cover_every_mode_type_category_and_tool():
    marks = static_marks()
    assert len(marks) == len(set(marks)) == 1 + 2 + 3 + 4 + 14
    assert {mark_name("gta_tool", t) for tools in CATEGORIES.values() for t in tools} <= set(marks)
    assert describe_mark("gta_tool_OCR") == "GTA queries whose reference chain calls OCR"
    assert "perception tool (OCR, ImageDescription" in describe_mark("gta_category_perception")
    assert mark_name("gta_tool", "My Tool-2") == "gta_tool_My_Tool_2"

"""Every relative link in README.md and docs/*.md leads somewhere: a file, and a heading there.

Anchors follow GitHub's slugs: the heading's text (markup removed) in lowercase, punctuation
other than '-' and '_' dropped, spaces turned into '-', and '-1', '-2', ... on repeats.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.M | re.S)
INLINE_CODE = re.compile(r"(`+)(?!`).+?(?<!`)\1(?!`)", re.S)
COMMENT = re.compile(r"<!--.*?-->", re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$", re.M)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def prose(text: str) -> str:
    """The text without code blocks, code spans and comments, where links are not links."""
    return INLINE_CODE.sub("", FENCE.sub("", COMMENT.sub("", text)))


def slug(heading: str) -> str:
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays
    text = re.sub(r"<[^>]+>", "", text).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", COMMENT.sub("", path.read_text()))):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(f"{base}-{count}" if count else base)
    return found


def links(path: Path) -> list[str]:
    return LINK.findall(prose(path.read_text()))


def broken_links(path: Path) -> list[str]:
    """Each relative link of ``path`` whose file or heading does not exist, with the reason."""
    broken = []
    for target in links(path):
        if SCHEME.match(target) or target.startswith("//"):
            continue  # a URL, not checked offline
        file, _, anchor = target.partition("#")
        destination = (path.parent / file).resolve() if file else path
        if not destination.exists():
            broken.append(f"{target}: no such file {destination}")
        elif anchor and destination.suffix != ".md":
            broken.append(f"{target}: an anchor into a file that is not markdown")
        elif anchor and anchor not in anchors(destination):
            broken.append(f"{target}: no heading with the slug {anchor!r} in {destination.name}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_relative_links_lead_to_a_file_and_heading(page):
    assert broken_links(page) == []


def test_the_pages_link_to_each_other():
    checked = [t for page in PAGES for t in links(page) if not SCHEME.match(t)]
    assert len(checked) >= 2 * len(PAGES)
    assert any(re.match(r"[^#]+\.md#.", target) for target in checked)  # into other pages


@pytest.mark.parametrize(
    ("heading", "expected"),
    [
        (
            "The demo: a real model, offline, in a few minutes",
            "the-demo-a-real-model-offline-in-a-few-minutes",
        ),
        ("llama.cpp", "llamacpp"),
        ("Metrics and their quirks", "metrics-and-their-quirks"),
        ("Adding a `pytest_gta.tools` backend", "adding-a-pytest_gtatools-backend"),
        ("[Models](models.md) & *more*", "models--more"),
    ],
)
def test_slugs_follow_github(heading, expected):
    assert slug(heading) == expected


def test_a_broken_link_is_caught(tmp_path):
    (tmp_path / "other.md").write_text(
        "# Other page\n\n## Same\n\n## Same\n\n```\n# not a heading\n```\n"
    )
    page = tmp_path / "page.md"
    page.write_text(
        "# Top\n\n"
        "[ok](other.md) [ok](other.md#other-page) [ok](other.md#same-1) [ok](#top)\n"
        "[url](https://example.com/x.md#nope) `[code](missing.md)`\n\n"
        "```\n[in a block](missing.md)\n```\n\n"
        "[no file](missing.md) [no heading](other.md#not-a-heading) [repeat](other.md#same-2)\n"
        "[self](#nowhere)\n"
    )
    assert [line.split(":")[0] for line in broken_links(page)] == [
        "missing.md",
        "other.md#not-a-heading",
        "other.md#same-2",
        "#nowhere",
    ]

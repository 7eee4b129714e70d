"""docs/ are references, not lab notebooks (docs/decisions.md's opening; run history lives in
git and bench/results.csv): no heading of a doc carries a date, docs/benchmarks.md stays within
its page budget, and every citation of a doc section from the code and the tests — a doc path,
a comma (or a space or a parenthesis) and the heading in double quotes — names a doc that
exists and a heading in it. A citation may name a prefix of the heading (ending in "…" or not);
headings of any level count, compared case-sensitively, code blocks apart."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CITING = ("services", "shared", "bench", "tests", "session_core_client")
BENCHMARKS_MAX_LINES = 400

DATE = re.compile(r"20\d\d-\d\d")  # 2026-12-06, 2026-12-0x: a run's date, not a reference's
HEADING = re.compile(r"#{1,6}\s+(.*)")
FENCE = re.compile(r"\s*(```|~~~)")
# a citation, once a comment's or docstring's line breaks are joined: the heading may wrap
CITATION = re.compile(r'(?<![\w./-])docs/(?P<doc>[\w./-]+?\.md)(?:,\s*|\s+\(?|\()'
                      r'"(?P<heading>[^"]+)"')
LINE_BREAK = re.compile(r"[ \t]*\n[ \t]*(?:#[ \t]*)?")
ELLIPSIS = re.compile(r"[\s,]*(…|\.\.\.)$")


def headings(doc: Path) -> list[str]:
    """The text after the #'s of every heading of ``doc``, outside fenced code blocks."""
    out: list[str] = []
    fenced = False
    for line in doc.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and (m := HEADING.match(line)):
            out.append(m.group(1).strip())
    return out


def dated_headings(docs: Path) -> list[str]:
    return [f"{doc.relative_to(docs.parent)}: {h}" for doc in sorted(docs.glob("*.md"))
            for h in headings(doc) if DATE.search(h)]


def citations(text: str) -> list[tuple[str, str]]:
    """(doc, heading) of each citation in ``text``, its lines joined (comments' ``#`` dropped)."""
    joined = LINE_BREAK.sub(" ", text)
    return [(m["doc"], ELLIPSIS.sub("", " ".join(m["heading"].split())))
            for m in CITATION.finditer(joined)]


def broken_citations(root: Path, dirs: tuple[str, ...] = CITING) -> list[str]:
    """Each citation under ``root``'s ``dirs`` whose doc or heading does not exist."""
    docs = root / "docs"
    known: dict[str, list[str] | None] = {}
    out: list[str] = []
    for d in dirs:
        for src in sorted((root / d).rglob("*.py")):
            for doc, heading in citations(src.read_text(errors="replace")):
                if doc not in known:
                    path = docs / doc
                    known[doc] = headings(path) if path.is_file() else None
                found = known[doc]
                where = f"{src.relative_to(root)}: docs/{doc}, {heading!r}"
                if found is None:
                    out.append(f"{where}: no such doc")
                elif not any(h.startswith(heading) for h in found):
                    out.append(f"{where}: no such heading")
    return out


def test_no_doc_heading_carries_a_date() -> None:
    assert dated_headings(DOCS) == [], "a dated section is history: git log and bench/results.csv"


def test_benchmarks_page_within_its_budget() -> None:
    lines = len((DOCS / "benchmarks.md").read_text().splitlines())
    assert lines <= BENCHMARKS_MAX_LINES, (
        f"docs/benchmarks.md has {lines} lines (at most {BENCHMARKS_MAX_LINES}): cut history, "
        "not reference")


def test_every_cited_doc_section_exists() -> None:
    assert broken_citations(ROOT) == []


def test_the_checks_see_what_they_are_for(tmp_path: Path) -> None:
    """The checks themselves: a dated heading, a missing heading and a missing doc are caught;
    a wrapped comment citation, a prefix with an ellipsis and a code block's ``#`` are not."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text(
        "# A\n\n## The writer is paced, and held back\n\n```sh\n# not a heading 2026-12-06\n"
        "```\n\n### Run at abc, 2026-12-06T17:35 — medians\n")
    (tmp_path / "pkg").mkdir()
    quote = '"'
    (tmp_path / "pkg" / "m.py").write_text(
        f"# held back (docs/a.md, {quote}The writer is paced,\n#  and held{quote}).\n"
        f"X = 1  # docs/a.md, {quote}The writer is paced, …{quote}\n"
        f'"""docs/a.md ({quote}Nothing like it{quote}); docs/b.md, {quote}A{quote}"""\n')
    assert dated_headings(tmp_path / "docs") == [
        "docs/a.md: Run at abc, 2026-12-06T17:35 — medians"]
    assert broken_citations(tmp_path, ("pkg",)) == [
        "pkg/m.py: docs/a.md, 'Nothing like it': no such heading",
        "pkg/m.py: docs/b.md, 'A': no such doc",
    ]

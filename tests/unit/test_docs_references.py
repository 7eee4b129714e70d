"""docs/ are references, not lab notebooks (docs/decisions.md's opening; run history lives in
git and bench/results.csv): no heading of a doc carries a date, docs/benchmarks.md stays within
its page budget, and every citation of a doc section names a doc that exists and a heading in it.

A citation is a doc path (``docs/storage.md``, or ``storage.md`` alone: the docs folder either
way), a comma, a space or a parenthesis, and the heading in double quotes; several headings may
follow, comma-separated (``docs/admission.md ("Waiting for the Turn", "Metadata, tags, …")``).
It may name a prefix of the heading (ending in "…" or not); headings of any level count, compared
case-sensitively, code blocks apart. A markdown link's anchor (``[x](storage.md#large-values)``,
``[x](#sessioncoredeadletters)``) must be GitHub's slug of a heading of the doc it points at.
Citations are checked in the code and the tests (services/, shared/, runtimes/,
scripted_model/, demo/, bench/, tests/, session_core_client/), the docs, README.md, the Makefile
and deploy/ (its text files)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CITING = ("services", "shared", "runtimes", "scripted_model", "demo", "bench", "tests",
          "session_core_client")  # their *.py
# besides docs/*.md, README.md and the Makefile: deploy/'s text files
DEPLOY_TEXT = (".py", ".go", ".yaml", ".yml", ".tpl", ".sh", ".md", ".json")
BENCHMARKS_MAX_LINES = 400

DATE = re.compile(r"20\d\d-\d\d")  # 2026-12-06, 2026-12-0x: a run's date, not a reference's
HEADING = re.compile(r"#{1,6}\s+(.*)")
FENCE = re.compile(r"\s*(```|~~~)")
# a citation, once a comment's or docstring's line breaks are joined: the heading may wrap
CITATION = re.compile(r'(?<![\w./-])(?:docs/)?(?P<doc>[\w./-]+?\.md)(?:,\s*|\s+\(?|\()'
                      r'(?P<headings>"[^"]+"(?:,\s*"[^"]+")*)')
QUOTED = re.compile(r'"([^"]+)"')
# a line break and the next line's comment marker (#, //) or a block comment's or list's *
LINE_BREAK = re.compile(r"[ \t]*\n[ \t]*(?:(?:#|//|\*(?!\*))[ \t]*)?")
ELLIPSIS = re.compile(r"[\s,]*(…|\.\.\.)$")
ANCHOR = re.compile(r"\]\((?P<doc>[\w./-]*?\.md)?#(?P<anchor>[^)\s]+)\)")
NOT_IN_SLUG = re.compile(r"[^\w\- ]")


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


def slugs(titles: list[str]) -> set[str]:
    """GitHub's anchors of ``titles``: lower case, punctuation out, spaces to hyphens, and a
    repeated slug numbered -1, -2, … ."""
    out: set[str] = set()
    for title in titles:
        slug = NOT_IN_SLUG.sub("", title.lower()).replace(" ", "-")
        base, n = slug, 0
        while slug in out:
            n += 1
            slug = f"{base}-{n}"
        out.add(slug)
    return out


def dated_headings(docs: Path) -> list[str]:
    return [f"{doc.relative_to(docs.parent)}: {h}" for doc in sorted(docs.glob("*.md"))
            for h in headings(doc) if DATE.search(h)]


def citations(text: str) -> list[tuple[str, str]]:
    """(doc, heading) of each citation in ``text``, its lines joined (comments' ``#`` dropped)."""
    joined = LINE_BREAK.sub(" ", text.replace('\\"', '"'))  # a JSON string's quotes
    return [(m["doc"], ELLIPSIS.sub("", " ".join(heading.split())))
            for m in CITATION.finditer(joined) for heading in QUOTED.findall(m["headings"])]


def anchors(text: str) -> list[tuple[str, str]]:
    """(doc, anchor) of each markdown link with an anchor; doc "" for the page itself."""
    return [(m["doc"] or "", m["anchor"]) for m in ANCHOR.finditer(text)]


def citing_files(root: Path, dirs: tuple[str, ...]) -> Iterator[Path]:
    """The *.py under ``dirs``, then docs/*.md, README.md, the Makefile and deploy/'s text."""
    for d in dirs:
        yield from sorted((root / d).rglob("*.py"))
    yield from sorted((root / "docs").glob("*.md"))
    yield from (root / name for name in ("README.md", "Makefile") if (root / name).is_file())
    yield from sorted(p for p in (root / "deploy").rglob("*") if p.is_file()
                      and (p.suffix in DEPLOY_TEXT or p.name == "Makefile"))


def broken_citations(root: Path, dirs: tuple[str, ...] = CITING) -> list[str]:
    """Each citation (or link anchor, in markdown) of a doc or heading that does not exist, in
    ``root``'s ``dirs``, docs, README.md, Makefile and deploy/."""
    docs = root / "docs"
    known: dict[Path, list[str] | None] = {}

    def found(path: Path) -> list[str] | None:
        if path not in known:
            known[path] = headings(path) if path.is_file() else None
        return known[path]

    out: list[str] = []
    for src in citing_files(root, dirs):
        text = src.read_text(errors="replace")
        for doc, heading in citations(text):
            where = f"{src.relative_to(root)}: {doc}, {heading!r}"
            titles = found(docs / doc)
            if titles is None:
                out.append(f"{where}: no such doc")
            elif not any(h.startswith(heading) for h in titles):
                out.append(f"{where}: no such heading")
        if src.suffix != ".md":
            continue
        for doc, anchor in anchors(text):
            where = f"{src.relative_to(root)}: {doc}#{anchor}"
            titles = found((src.parent / doc).resolve() if doc else src)
            if titles is None:
                out.append(f"{where}: no such doc")
            elif anchor not in slugs(titles):
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
    """The checks themselves: a dated heading, a missing heading, a missing doc and an anchor
    of no heading are caught; a wrapped comment citation (``#`` or ``//``), a prefix with an
    ellipsis, a code block's ``#``, a bare doc name, a list of headings, a JSON string's quotes
    and GitHub's slugs (punctuation out, a repeat numbered) are not."""

    def write(path: str, text: str) -> None:  # ' for ": no citation in this file's own text
        (tmp_path / path).parent.mkdir(exist_ok=True)
        (tmp_path / path).write_text(text.replace("'", '"'))

    write("docs/a.md",
          "# A\n\n## The writer is paced, and held back\n\n```sh\n# not a heading 2026-12-06\n"
          "```\n\n### Run at abc, 2026-12-06T17:35 — medians\n\n## `_id` `$in`: pushed down\n\n"
          "## A\n\nSee [it](#_id-in-pushed-down), [again](#a-1) and [not](#run-at-abc).\n")
    write("docs/c.md", "a.md ('A', 'The writer is paced,\n and held back', 'Nor this'); "
                       "[up](a.md#a), [no](a.md#b);\ndocs/a.md, 'Nothing here either'\n")
    write("pkg/m.py", "# held back (docs/a.md, 'The writer is paced,\n#  and held').\n"
                      "X = 1  # docs/a.md, 'The writer is paced, …'\n"
                      "'''docs/a.md ('Nothing like it'); docs/b.md, 'A''''\n")
    write("deploy/p.go", "// patched (docs/a.md, '`_id` `$in`:\n// pushed down'; a.md, 'Gone')\n")
    write("deploy/s.json", "{'d': '(docs/a.md, \\'Nor in JSON\\')'}\n")
    assert dated_headings(tmp_path / "docs") == [
        "docs/a.md: Run at abc, 2026-12-06T17:35 — medians"]
    assert broken_citations(tmp_path, ("pkg",)) == [
        "pkg/m.py: a.md, 'Nothing like it': no such heading",
        "pkg/m.py: b.md, 'A': no such doc",
        "docs/a.md: #run-at-abc: no such heading",
        "docs/c.md: a.md, 'Nor this': no such heading",
        "docs/c.md: a.md, 'Nothing here either': no such heading",
        "docs/c.md: a.md#b: no such heading",
        "deploy/p.go: a.md, 'Gone': no such heading",
        "deploy/s.json: a.md, 'Nor in JSON': no such heading",
    ]

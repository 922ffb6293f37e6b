"""Every relative link in README.md and docs/*.md resolves (docs/development.md "The docs").

A link to a local file must name a file of the repository; a ``#anchor`` (in the same page or
after a ``.md`` path) must be the GitHub slug of a heading of that page. Links in code blocks and
code spans are not links and are not checked. The repository is self-contained
(docs/development.md "The docs"): a relative path a page names in its prose or code spans
(``../README.md``) resolves to a file of the repository.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto:, ...


def _prose_lines(text: str):
    """(line number, line) of the lines outside fenced code blocks, code spans blanked out."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, _CODE_SPAN.sub(lambda m: "code", line)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text without markup, lower case, punctuation dropped
    (letters, digits, ``_`` and ``-`` stay), each space a ``-``.

    >>> slug("Where the ingest job's id comes from: one rule, with or without Airflow")
    'where-the-ingest-jobs-id-comes-from-one-rule-with-or-without-airflow'
    >>> slug("`ns.to_batches(filter=None, columns=None, *, batch_size=None)`")
    'nsto_batchesfilternone-columnsnone--batch_sizenone'
    >>> slug("8c. Fairness: a commit that keeps losing asks the others to wait")
    '8c-fairness-a-commit-that-keeps-losing-asks-the-others-to-wait'
    """
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link counts as its text
    text = text.replace("`", "").replace("*", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor GitHub gives the headings of a markdown file (a repeated slug gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    text = path.read_text(encoding="utf-8")
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        found.update(_HTML_ANCHOR.findall(line))
        m = _HEADING.match(line)
        if m:
            s = slug(m.group(2))
            n = seen.get(s, 0)
            seen[s] = n + 1
            found.add(s if n == 0 else f"{s}-{n}")
    return found


def broken_links(doc: Path) -> list[str]:
    """The links of one page that do not resolve, each as ``page:line: target (why)``."""
    problems = []
    text = doc.read_text(encoding="utf-8")
    for number, line in _prose_lines(text):
        for target in _LINK.findall(line):
            if _EXTERNAL.match(target):
                continue
            where = f"{doc.relative_to(REPO)}:{number}: {target}"
            path_part, _, anchor = target.partition("#")
            file = (doc.parent / unquote(path_part)).resolve() if path_part else doc
            if not file.exists():
                problems.append(f"{where} (no such file)")
                continue
            if REPO not in file.parents and file != REPO:
                problems.append(f"{where} (outside the repository)")
                continue
            if anchor:
                if file.suffix != ".md":
                    problems.append(f"{where} (an anchor into a file that is not markdown)")
                elif unquote(anchor) not in anchors(file):
                    problems.append(f"{where} (no heading with that anchor in {file.relative_to(REPO)})")
    return problems


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(doc):
    problems = broken_links(doc)
    assert not problems, "broken links:\n" + "\n".join(problems)


_RELATIVE_PATH = re.compile(r"(?<![\w./])(\.\./[\w./-]*[\w-])")


def paths_outside(doc: Path) -> list[str]:
    """The ``../`` paths ``doc`` names (links, prose, code spans) that do not resolve to a file of
    the repository, each as ``page:line: path``."""
    out = []
    for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
        for path in _RELATIVE_PATH.findall(line):
            file = (doc.parent / path).resolve()
            if not file.exists() or (REPO not in file.parents and file != REPO):
                out.append(f"{doc.relative_to(REPO)}:{number}: {path}")
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_path_names_a_file_of_the_repository(doc):
    problems = paths_outside(doc)
    assert not problems, "paths that leave the repository or name no file:\n" + "\n".join(problems)


def test_the_development_page_maps_every_doc():
    """docs/development.md "The docs" lists every page, each with the line saying what it is for."""
    text = (REPO / "docs" / "development.md").read_text(encoding="utf-8")
    assert "\n## The docs\n" in text, 'docs/development.md has no "The docs" section'
    section = text.split("\n## The docs\n", 1)[1].split("\n## ", 1)[0]
    listed = {(REPO / "docs" / target).resolve() for target in _LINK.findall(section)}
    missing = [str(doc.relative_to(REPO)) for doc in DOCS if doc.resolve() not in listed]
    assert not missing, f'docs/development.md "The docs" does not list: {missing}'


def test_a_broken_link_is_found(tmp_path, monkeypatch):
    """The checker itself: a missing file, a missing anchor and a link in code (not a link)."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Title\n\n## Some `code` here\n", encoding="utf-8")
    page = docs / "b.md"
    page.write_text(
        "[ok](a.md) [ok](a.md#some-code-here) [ok](#b) [gone](missing.md) [bad anchor](a.md#nope)\n"
        "`[not a link](nowhere.md)`\n\n```\n[not a link](nowhere.md)\n```\n# B\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    problems = broken_links(page)
    assert [p.split(": ", 1)[1] for p in problems] == [
        "missing.md (no such file)",
        "a.md#nope (no heading with that anchor in docs/a.md)",
    ]


def test_a_path_leaving_the_repository_is_found(tmp_path, monkeypatch):
    """The path checker itself: ``../`` paths to files of the repository pass; one that names no
    file, or leaves the repository, is reported wherever it stands (prose, code span, link)."""
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "README.md").write_text("# R\n", encoding="utf-8")
    (tmp_path / "notes.md").write_text("outside\n", encoding="utf-8")
    page = repo / "docs" / "p.md"
    page.write_text("see ../README.md and [r](../README.md)\n"
                    "decisions: `../docs/gone.md`\n"
                    "as ../../notes.md says\n", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "REPO", repo)
    assert [p.split(": ", 1)[1] for p in paths_outside(page)] == ["../docs/gone.md", "../../notes.md"]

"""Every relative link in README.md and docs/ points at a file inside the repository (a clone has nothing beside it)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def broken_links(markdown: Path) -> list[str]:
    broken = []
    for target in LINK.findall(markdown.read_text(encoding="utf-8")):
        if target.startswith(("http://", "https://", "mailto:", "#")):
            continue
        path = (markdown.parent / target.split("#")[0]).resolve()
        # an absolute path names this machine's files, which another clone does not have
        if Path(target).is_absolute() or not path.exists() or not path.is_relative_to(ROOT):
            broken.append(target)
    return broken


def test_links_resolve_inside_the_repository():
    documents = [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]
    assert len(documents) > 5
    broken = {str(doc.relative_to(ROOT)): links for doc in documents if (links := broken_links(doc))}
    assert not broken, broken


def test_a_link_out_of_the_repository_is_caught(tmp_path):
    doc = ROOT / "docs" / "science.md"
    outside = tmp_path / "doc.md"
    outside.write_text(f"[science]({doc}) [shared](../shared/docs/SCIENCE.md) [web](https://example.org)\n")
    assert broken_links(outside) == [str(doc), "../shared/docs/SCIENCE.md"]

"""The project's docs cite only files that exist: every repository path in backticks, and every relative link,
in docs/ARCHITECTURE.md and README.md (issue 10: "tests cite only files inside the repository")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ("docs/ARCHITECTURE.md", "docs/training.md", "README.md")
TOP_LEVEL = ("app/", "core/", "models/", "training/", "tests/", "bench/", "docs/", "resources/")  # the repository's own
FENCE = re.compile(r"^```.*?^```", re.S | re.M)  # command examples: paths there are the user's, not ours
INLINE = re.compile(r"`([^`\s]+)`")
LINK = re.compile(r"\]\(([^)\s#]+)\)")
WRITTEN_AT_RUN_TIME = ("bench/out/",)  # output folders, absent from a fresh checkout


def exists(path: str, base: Path) -> bool:
    """A path (or glob) relative to the repository root, or a link relative to the document's folder."""
    if path in WRITTEN_AT_RUN_TIME:
        return True
    if "*" in path:
        return any(ROOT.glob(path))
    return (ROOT / path.rstrip("/")).exists() or (base / path).exists()


def cited_paths(text: str) -> list[str]:
    """Repository paths a Markdown text names: `app/x.py`-like spans outside code fences, relative links."""
    prose = FENCE.sub("", text)
    spans = [s for s in INLINE.findall(prose) if s.startswith(TOP_LEVEL) or s in ("README.md", "Makefile")]
    links = [t for t in LINK.findall(prose) if "://" not in t]
    return spans + links


def test_cited_paths_finds_spans_and_links_but_not_commands() -> None:
    text = "see `core/audio.py` and [card](resources/x.md); `python -m bench` `<out>/x`\n```\nbench/out/\n```\n"
    assert cited_paths(text) == ["core/audio.py", "resources/x.md"]


@pytest.mark.parametrize("doc", DOCS)
def test_docs_cite_only_existing_files(doc: str) -> None:
    cited = cited_paths((ROOT / doc).read_text(encoding="utf-8"))
    assert len(cited) > 10, f"{doc}: expected it to name the project's files"
    base = (ROOT / doc).parent
    missing = sorted({p for p in cited if not exists(p, base)})
    assert not missing, f"{doc} names files that do not exist: {missing}"


def test_the_architecture_map_stays_short() -> None:
    """A newcomer reads it in one sitting: details belong in the docs it links to."""
    lines = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150, f"docs/ARCHITECTURE.md has {len(lines)} lines (at most 150)"


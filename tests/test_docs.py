"""The project's docs cite only files that exist: every repository path in backticks, and every relative link,
in docs/ARCHITECTURE.md, README.md and the docs the modules point to (issue 10); the product's docstrings cite
only paths and dotted names that exist, and stay short (issue 37: one map)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ("docs/ARCHITECTURE.md", "docs/training.md", "README.md")
# where module docstrings send their details (issue 37): they cite fewer files, but only ones that exist
DETAIL_DOCS = ("docs/library.md", "docs/models.md", "docs/corpora.md", "docs/runtime.md", "docs/units.md",
               "docs/speech-eval.md", "docs/search-fusion.md")
TOP_LEVEL = ("app/", "core/", "models/", "training/", "tests/", "bench/", "docs/", "resources/", "tools/")  # ours
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


@pytest.mark.parametrize("doc", DOCS + DETAIL_DOCS)
def test_docs_cite_only_existing_files(doc: str) -> None:
    cited = cited_paths((ROOT / doc).read_text(encoding="utf-8"))
    assert len(cited) > (10 if doc in DOCS else 2), f"{doc}: expected it to name the project's files"
    base = (ROOT / doc).parent
    missing = sorted({p for p in cited if not exists(p, base)})
    assert not missing, f"{doc} names files that do not exist: {missing}"


MAP_WORDS = 1300  # a newcomer reads it in one sitting; a word cap, since a line cap is defeated by wide lines
MAP_WIDTH = 120


def test_the_architecture_map_stays_short() -> None:
    """A newcomer reads it in one sitting: details belong in the docs it links to."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    assert len(text.split()) <= MAP_WORDS, f"docs/ARCHITECTURE.md has {len(text.split())} words (at most {MAP_WORDS})"
    wide = [n for n, line in enumerate(text.splitlines(), 1) if len(line) > MAP_WIDTH]
    assert not wide, f"docs/ARCHITECTURE.md lines over {MAP_WIDTH} characters: {wide}"


def test_the_map_names_only_modules_that_exist() -> None:
    """Every `module.py` the map names by its bare name is a file of the repository (a renamed or removed module
    leaves the map behind otherwise)."""
    text = FENCE.sub("", (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8"))
    files = {p.name for top in TOP_LEVEL[:-3] + ("tools/",) for p in (ROOT / top).rglob("*.py")}
    named = {s.rpartition("/")[2] for s in INLINE.findall(text) if s.endswith(".py") and "*" not in s}
    assert len(named) > 50 and sorted(named - files) == []



# ------------------------------------------------------------------ what the product's docstrings cite (issue 37)

PRODUCT = ("app", "core", "models", "training")
CITABLE = (*PRODUCT, "tests", "bench", "docs", "resources", "tools")
DOC_PATH = re.compile(rf"(?<![\w./-])((?:{'|'.join(CITABLE)})/[\w./*-]*\w)")  # app/x.py, tests/test_y.py:12
BARE_FILE = re.compile(r"(?<![\w./*>-])([a-z_]\w*\.py)\b")  # records.py: beside the module, else in the repository
DOTTED = re.compile(rf"(?<![\w./-])((?:{'|'.join((*PRODUCT, 'tests', 'bench'))})(?:\.[A-Za-z_]\w*)+)")


def product_modules(root: Path = ROOT) -> list[Path]:
    return sorted(p for top in PRODUCT for p in (root / top).rglob("*.py") if "__pycache__" not in p.parts)


def docstrings(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, text) of the module's docstring and of every class's and function's in it."""
    nodes = [n for n in ast.walk(tree) if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef
                                                    | ast.AsyncFunctionDef)]
    return [(getattr(n, "lineno", 1), d) for n in nodes if (d := ast.get_docstring(n, clean=False))]


def defined_names(statements: list[ast.stmt]) -> set[str]:
    """Names a module (or class) body binds: definitions, assignments, imports, also under `if` and `try`."""
    names: set[str] = set()
    for n in statements:
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(n.name)
        elif isinstance(n, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            names |= {e.id for t in targets for e in ast.walk(t) if isinstance(e, ast.Name)}
        elif isinstance(n, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, ast.If | ast.Try):
            handlers = [s for h in getattr(n, "handlers", []) for s in h.body]
            names |= defined_names([*n.body, *n.orelse, *handlers, *getattr(n, "finalbody", [])])
    return names


def class_members(cls: ast.ClassDef) -> set[str]:
    """A class's own names and every `self.x` its methods set or read."""
    attrs = {n.attr for n in ast.walk(cls) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
             and n.value.id == "self"}
    return defined_names(cls.body) | attrs


def resolves(dotted: str, root: Path = ROOT) -> bool:
    """`core.audio.decode`, `app.services.search.session`, `models.vqvae.VQVAE.encode`: the longest prefix that
    is a module file, then a name it binds, then a member of that class. Read with ast: nothing is imported."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        base = root.joinpath(*parts[:i])
        module = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if not module.is_file():
            continue
        rest = parts[i:]
        if not rest:
            return True
        tree = ast.parse(module.read_text(encoding="utf-8"))
        if rest[0] not in defined_names(tree.body):
            return False
        classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == rest[0]]
        return len(rest) == 1 or not classes or rest[1] in class_members(classes[0])
    return False


def stale_citations(path: Path, root: Path = ROOT) -> list[str]:
    """What the docstrings of `path` cite that is not there: repository paths, bare file names, dotted names."""
    missing = []
    for line, text in docstrings(ast.parse(path.read_text(encoding="utf-8"))):
        for cited in DOC_PATH.findall(text):
            bare = re.sub(r":\d+(-\d+)?$", "", cited).rstrip("/.")
            if not (any(root.glob(bare)) if "*" in bare else (root / bare).exists()):
                missing.append(f"{line}: {cited}")
        for name in BARE_FILE.findall(text):
            if not (path.parent / name).exists() and not any(any((root / top).glob(f"**/{name}")) for top in CITABLE):
                missing.append(f"{line}: {name}")
        missing += [f"{line}: {name}" for name in DOTTED.findall(text) if not resolves(name, root)]
    return missing


def test_the_citation_check_catches_a_missing_test_module_and_name(tmp_path: Path) -> None:
    (tmp_path / "core").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("")
    (tmp_path / "core" / "a.py").write_text("class A:\n    def go(self):\n        self.size = 1\n\nB = 2\n")
    cited = tmp_path / "core" / "b.py"
    cited.write_text('"""Uses `core.a.A.go`, core.a.A.size and core.a.B (tests/test_a.py:3, a.py); see\n'
                     'tests/test_gone.py, `core.a.C`, core.a.A.gone and gone.py."""\n')
    assert stale_citations(cited, tmp_path) == ["1: tests/test_gone.py", "1: gone.py", "1: core.a.C",
                                                "1: core.a.A.gone"]


@pytest.mark.parametrize("path", product_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_product_docstrings_cite_only_what_exists(path: Path) -> None:
    missing = stale_citations(path)
    assert not missing, f"{path.relative_to(ROOT)} cites what does not exist: {missing}"


# ------------------------------------------------------------------ one map: short docstrings (issue 37, item 7)

def module_docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False) or ""


def test_package_inits_are_one_line_and_define_nothing() -> None:
    """The map is docs/ARCHITECTURE.md and the modules' own docstrings; a package's `__init__` only names it."""
    wordy = []
    for init in (p for p in product_modules() if p.name == "__init__.py"):
        body = ast.parse(init.read_text(encoding="utf-8")).body
        code = [n for n in body[1:] if not (isinstance(n, ast.ImportFrom) and n.module == "__future__")]
        if init == ROOT / "app" / "__init__.py":  # the one exception: `__version__`, which --version and About show
            code = [n for n in code if not (isinstance(n, ast.Assign) and ast.unparse(n).startswith("__version__"))]
        if len(module_docstring(init).splitlines()) != 1 or code:
            wordy.append(str(init.relative_to(ROOT)))
    assert not wordy, f"package __init__ files with more than a one-line docstring: {wordy}"


def test_module_docstrings_stay_about_ten_lines() -> None:
    """What a module is for, its main names, one why; derivations, history and measurements live in docs/."""
    long = {str(p.relative_to(ROOT)): n for p in product_modules() if (n := len(module_docstring(p).splitlines())) > 15}
    assert not long, f"module docstrings over 15 lines (lines each): {long}"

"""Layer rules from DESIGN.md: models/ stays pure PyTorch; core/ (the runtime) never imports training/, app/ or Qt;
models/, core/ and training/ never import Qt or app/; nothing the app reaches, through imports or the kinds
table's strings, is a trainer; the settings the app reads import no torch."""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STDLIB_OK = {"__future__", "dataclasses", "math", "typing", "collections", "functools", "itertools", "pathlib",
             "importlib", "json", "os", "re", "string", "unicodedata", "warnings", "logging", "contextlib",
             "enum", "abc", "types", "copy", "random", "struct", "tempfile", "threading", "time", "csv",
             "hashlib", "sys", "shutil", "subprocess", "signal", "datetime", "platform", "io", "bisect",
             "heapq", "statistics", "argparse", "socket", "traceback", "weakref", "queue", "glob", "uuid"}
MODELS_OK = {"torch", "torchaudio", "transformers", "numpy", "models"} | STDLIB_OK
FORBIDDEN_EVERYWHERE_BELOW_APP = {"PySide6", "PyQt5", "PyQt6", "pyqtgraph", "app", "sounddevice"}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def python_files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize("path", python_files("models") + python_files("core") + python_files("training"),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_models_core_and_training_never_import_qt_or_app(path: Path) -> None:
    bad = imported_modules(path) & FORBIDDEN_EVERYWHERE_BELOW_APP
    assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


@pytest.mark.parametrize("path", python_files("core"), ids=lambda p: p.name)
def test_the_runtime_core_never_imports_training(path: Path) -> None:
    """core/ is what both the app and the trainers stand on: it may import models/, never training/."""
    assert "training" not in imported_modules(path), f"{path.relative_to(ROOT)} imports training/"


@pytest.mark.parametrize("path", python_files("models"), ids=lambda p: p.name)
def test_models_import_only_torch_family(path: Path) -> None:
    extra = imported_modules(path) - MODELS_OK
    assert not extra, f"{path.relative_to(ROOT)} imports {sorted(extra)}; models/ may use only {sorted(MODELS_OK)}"


def test_services_have_no_widgets() -> None:
    for path in python_files("app/services"):
        bad = imported_modules(path) & {"PySide6", "pyqtgraph"}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}: services must not use Qt"


@pytest.mark.parametrize("path", python_files("app/ui"), ids=lambda p: p.name)
def test_widgets_never_call_torch_faiss_or_sounddevice(path: Path) -> None:
    bad = imported_modules(path) & {"torch", "faiss", "sounddevice", "torchaudio", "models", "training"}
    assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}: go through services and workers"


@pytest.mark.parametrize("path", python_files("app") + python_files("core") + python_files("models")
                         + python_files("training"), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_product_never_imports_the_tools(path: Path) -> None:
    """tools/ (the README screenshots) is not installed with the product: nothing there may be needed by it."""
    assert "tools" not in imported_modules(path), f"{path.relative_to(ROOT)} imports tools/"


def test_the_checker_catches_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from PySide6.QtCore import QObject\nimport app.workers\nfrom . import sibling\n")
    assert imported_modules(bad) == {"PySide6", "app"}


# ------------------------------------------------------------------------------------------------ import cycles

PACKAGES = ("app", "core", "models", "training")


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return isinstance(test, ast.Name | ast.Attribute) and ast.unparse(test).endswith("TYPE_CHECKING")


def _imports(path: Path, package: str, type_only: bool = False) -> list[tuple[str, list[str]]]:
    """(module, names) per import statement in `path`, lazy ones inside functions included (they run too);
    relative imports resolved against `package`; `if TYPE_CHECKING:` blocks left out (they never run) unless
    `type_only`: a reader follows those too."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[str, list[str]]] = []

    def visit(node: ast.AST) -> None:
        if _type_checking_only(node) and not type_only:
            return
        if isinstance(node, ast.Import):
            found.extend((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            found.append((base, [alias.name for alias in node.names]))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES, type_only: bool = False
                 ) -> dict[str, set[str]]:
    """Module -> the modules of `packages` it imports (statically, through ast; nothing is executed), and the
    `__init__` of every package above it: importing `a.b.c` runs `a/__init__` and `a/b/__init__` first, so a
    package `__init__` that imports its own submodules closes a cycle."""
    files = {module_name(p, root): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        graph[name].update(parent for parent in parent_packages(name) if parent in files)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for module, names in _imports(path, package, type_only):
            targets = [f"{module}.{n}" for n in names if f"{module}.{n}" in files] or [module]
            for target in targets:
                while target and target not in files:  # `import a.b.c` where a.b.c is a name: its module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def parent_packages(name: str) -> list[str]:
    """'a.b.c' -> ['a', 'a.b']: the packages whose `__init__` runs before the module does."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None (depth-first search with colours)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := dfs(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := dfs(start)):
            return cycle
    return None


def test_no_import_cycles_among_app_core_models_training() -> None:
    graph = import_graph()
    assert "app.services.training.runs" in graph["app.ui.train_tab"]  # the graph sees `from pkg import module`
    assert "app.ui.main_window" in graph["app.cli.gui_command"]  # and imports inside functions (they run when called)
    assert "app.services.library" in graph["app.services.library.library"]  # and the package __init__ above
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_no_file_circle_even_through_type_only_imports() -> None:
    """A reader follows `if TYPE_CHECKING:` imports too: no set of files that can only be read together."""
    cycle = find_cycle(import_graph(type_only=True))
    assert cycle is None, "a circle of files (type-only imports included): " + " -> ".join(cycle or [])


LIBRARY_NEVER_IMPORTS = ("app.services.devices", "app.services.search", "app.services.units", "app.services.words",
                         "app.services.training", "app.ui", "app.cli")


def test_the_library_imports_no_devices_and_no_feature_above_it() -> None:
    """The library (catalog, indexes, indexing) stands below search and knows no audio device: it runs headless
    under torchrun and in the CLI without PortAudio."""
    graph = import_graph(type_only=True)
    bad = {m: sorted(t for t in deps if t.startswith(LIBRARY_NEVER_IMPORTS))
           for m, deps in graph.items() if m.startswith("app.services.library")}
    assert {m: t for m, t in bad.items() if t} == {}


def test_the_cycle_finder_catches_a_cycle(tmp_path: Path) -> None:
    pkg = tmp_path / "app"
    (pkg / "ui").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "ui" / "__init__.py").write_text("")
    (pkg / "cli.py").write_text("def gui():\n    from app.ui.window import run\n")
    (pkg / "ui" / "window.py").write_text("from . import tab\n")
    (pkg / "ui" / "tab.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import app.cli\n")
    graph = import_graph(tmp_path, ("app",))
    assert find_cycle(graph) is None  # type-only imports never run
    assert find_cycle(import_graph(tmp_path, ("app",), type_only=True)) == [  # but a reader follows them
        "app.cli", "app.ui.window", "app.ui.tab", "app.cli"]
    (pkg / "ui" / "tab.py").write_text("from app.cli import gui\n")
    assert find_cycle(import_graph(tmp_path, ("app",))) == ["app.cli", "app.ui.window", "app.ui.tab", "app.cli"]


def test_the_cycle_finder_catches_a_package_init_importing_its_own_submodule(tmp_path: Path) -> None:
    """`lib/__init__.py` re-exporting `lib.core`: importing `lib.core` runs `lib/__init__` first, which imports
    `lib.core` again (half-initialised): a package-internal cycle, though no two modules import each other."""
    pkg = tmp_path / "app" / "lib"
    pkg.mkdir(parents=True)
    (tmp_path / "app" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text('"""Only a docstring."""\n')
    (pkg / "core.py").write_text("from app.lib import records\n")  # a sibling, through the package: fine
    (pkg / "records.py").write_text("X = 1\n")
    assert find_cycle(import_graph(tmp_path, ("app",))) is None
    (pkg / "__init__.py").write_text("from app.lib.core import X\n")
    assert find_cycle(import_graph(tmp_path, ("app",))) == ["app.lib", "app.lib.core", "app.lib"]


@pytest.mark.parametrize("name", ["kinds.py", "events.py", "config.py"])
def test_the_kinds_table_events_and_settings_are_cheap_to_import(name: str) -> None:
    """The CLI reads them for every command and the run service in the GUI: no torch, numpy or Qt."""
    heavy = imported_modules(ROOT / "core" / name) & {"torch", "torchaudio", "numpy", "models", "PySide6"}
    assert not heavy, f"core/{name} imports {sorted(heavy)}"


# ------------------------------------------------------------------------------------------------ trainers

TRAINER_DOOR = "trainer_module"  # core.kinds.Kind.trainer_module(): the one way to a trainer, for `earshot train`


def is_trainer(module: str) -> bool:
    """A `training/*_train` module: a training run's code (torch, data loaders), never the app's."""
    return module.startswith("training.") and module.rpartition(".")[2].endswith("_train")


def string_edges(table: Iterable[object]) -> set[str]:
    """The modules that the kinds table names as "module:attr" strings (settings, builder, validator, evaluator):
    core.kinds imports them when asked, so they are its imports too. `trainer` ("module", no attribute) is left
    out on purpose: only `trainer_module()` opens it, and only the command line calls that (checked below)."""
    modules = set()
    for row in table:
        for f in dataclasses.fields(row):  # type: ignore[arg-type]
            value = getattr(row, f.name)
            for text in value if isinstance(value, tuple) else (value,):
                if isinstance(text, str) and ":" in text:
                    modules.add(text.partition(":")[0])
    return modules


def app_graph() -> dict[str, set[str]]:
    from core import kinds

    graph = import_graph()
    graph["core.kinds"] |= string_edges(kinds.KINDS.values())
    return graph


def path_to(graph: dict[str, set[str]], starts: Iterable[str], wanted: object) -> list[str] | None:
    """The shortest import chain from one of `starts` to a module for which `wanted(module)` holds, or None."""
    parent: dict[str, str | None] = {s: None for s in starts}
    queue = list(parent)
    for node in queue:
        if wanted(node):  # type: ignore[operator]
            chain = [node]
            while (up := parent[chain[-1]]) is not None:
                chain.append(up)
            return chain[::-1]
        for nxt in sorted(graph.get(node, ())):
            if nxt not in parent:
                parent[nxt] = node
                queue.append(nxt)
    return None


def test_nothing_the_app_reaches_is_a_trainer() -> None:
    """Static imports (inside functions too) and the kinds table's strings, followed transitively from every app/
    module: the GUI and the command line never load a trainer (and so never a held-out evaluation that does)."""
    graph = app_graph()
    assert {"training.validate", "training.speech_eval"} <= graph["core.kinds"]  # the table's strings are edges
    chain = path_to(graph, [m for m in graph if m == "app" or m.startswith("app.")], is_trainer)
    assert chain is None, "the app reaches a trainer: " + " -> ".join(chain or [])


def test_the_trainer_check_follows_lazy_imports_and_table_strings(tmp_path: Path) -> None:
    for pkg in ("app", "core", "training"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "app" / "tab.py").write_text("def f():\n    from core import kinds\n")
    (tmp_path / "core" / "kinds.py").write_text("")
    (tmp_path / "training" / "eval.py").write_text("def g():\n    from training import words_train\n")
    (tmp_path / "training" / "words_train.py").write_text("")
    graph = import_graph(tmp_path, ("app", "core", "training"))
    assert path_to(graph, ["app.tab"], is_trainer) is None  # nothing names training.eval yet

    @dataclasses.dataclass
    class Row:
        trainer: str = "training.words_train"  # the run's own process: not an edge
        evaluator: tuple[str, str] = ("training.eval:add", "training.eval:run")

    graph["core.kinds"] |= string_edges([Row()])
    assert path_to(graph, ["app.tab"], is_trainer) == ["app.tab", "core.kinds", "training.eval", "training.words_train"]


def test_only_the_command_line_opens_a_trainer() -> None:
    """`Kind.trainer_module()` imports a trainer: `earshot train` (the run's own process) calls it, nothing else in
    the app (core.kinds calls it only for a trainer swapped in by name: tests, plug-ins)."""
    callers = set()
    for path in python_files("app"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        calls = (n.func for n in ast.walk(tree) if isinstance(n, ast.Call))
        if any(isinstance(f, ast.Attribute) and f.attr == TRAINER_DOOR for f in calls):
            callers.add(module_name(path))
    assert callers and all(c == "app.cli" or c.startswith("app.cli.") for c in callers), sorted(callers)


def settings_modules() -> list[str]:
    """What the app imports of training/ for a form or a parser: each kind's settings and eval arguments."""
    from core import kinds

    rows = kinds.KINDS.values()
    named = {path.partition(":")[0] for row in rows for path in (*row.settings, row.evaluator[0])}
    return sorted(named | {"core.kinds"})


@pytest.mark.parametrize("module", settings_modules())
def test_the_settings_the_app_reads_are_torch_free(module: str) -> None:
    """Imported in a fresh interpreter: torch (seconds, hundreds of MB) must not come with them, transitively."""
    code = f"import sys, {module}; print(sorted(m for m in ('torch', 'torchaudio') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", f"{module} imports {out.stdout.strip()}"



@pytest.mark.parametrize("modules", ["app.ui.search_state, app.ui.search_text, app.services.search.search_jobs",
                                     "app.ui.units_state", "app.ui.words_state", "app.ui.train_state"])
def test_the_tab_states_import_no_qt_and_no_torch(modules: str) -> None:
    """Model/view: each tab's state (and the Search tab's texts and jobs) runs and is tested without Qt or torch."""
    code = (f"import sys, {modules}\n"
            "print(sorted(m for m in ('PySide6', 'pyqtgraph', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

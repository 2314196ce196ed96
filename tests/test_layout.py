"""The house's layout (DESIGN.md, "Layout"): features found by folder, one meaning per file name, short functions."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("app", "core", "models", "training")
MAX_FUNCTION_LINES = 80
# app/services/ holds feature packages; loose modules only for what every feature shares
SERVICE_PACKAGES = {"library", "search", "units", "words", "training"}
SERVICE_MODULES = {"__init__.py", "devices.py", "jobs.py", "registry.py", "environment.py"}


def product_files() -> list[Path]:
    return [p for folder in PRODUCT for p in sorted((ROOT / folder).rglob("*.py"))]


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{n.lineno} {n.name} "
            f"({n.end_lineno - n.lineno + 1} lines)"
            for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
            and n.end_lineno - n.lineno + 1 > limit]


def test_no_product_function_is_over_80_lines() -> None:
    assert [f for p in product_files() for f in long_functions(p)] == []


def test_the_length_check_sees_a_long_method(tmp_path: Path) -> None:
    body = "".join(f"        x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "m.py").write_text(f"class A:\n    def f(self):\n{body}\n    def g(self):\n        pass\n")
    assert [f.split(" ")[1] for f in long_functions(tmp_path / "m.py")] == ["f"]


def test_no_two_product_modules_share_a_file_name() -> None:
    seen: dict[str, list[str]] = defaultdict(list)
    for p in product_files():
        if p.name not in ("__init__.py", "__main__.py"):
            seen[p.name].append(str(p.relative_to(ROOT)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}


def test_app_services_has_feature_packages_and_no_loose_feature_modules() -> None:
    services = ROOT / "app" / "services"
    packages = {p.name for p in services.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    modules = {p.name for p in services.glob("*.py")}
    assert packages == SERVICE_PACKAGES and modules <= SERVICE_MODULES, (packages, modules - SERVICE_MODULES)

"""One owner per table: no module writes SQL on a catalog table it does not own (DESIGN.md, "one owner per table").

The library's parts each own their tables and are handed the `Catalog` (storage.py), never the Library; a part
that needs another table changed asks its owner. The storage layer itself (the schema, its migrations and
triggers, and the salvage of a damaged catalog into a new one) writes every table. bench/ is left out: it
builds synthetic catalogs of up to a million rows with bulk inserts, which the parts' per-file API would take
hours to write.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = "app/services/library"
OWNERS = {
    "files": "file_table.py", "mount_points": "file_table.py",
    "models": "vectors.py", "vectors": "vectors.py", "index_files": "vectors.py",
    "texts": "text_channel.py", "text_fts": "text_channel.py",
    "user_tags": "user_tags.py", "favourites": "user_tags.py",
}
STORAGE = {"catalog.py", "salvage.py"}  # the schema, migrations and triggers; salvage rebuilds every table
WRITE = re.compile(r"\b(?:INSERT(?:\s+OR\s+\w+)?\s+INTO|REPLACE\s+INTO|UPDATE|DELETE\s+FROM)\s+(\w+)", re.I)


def sql_strings(source: str) -> list[str]:
    """The string constants of a module (f-strings' literal parts included), docstrings left out."""
    tree = ast.parse(source)
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            out.append(node.value)
    return out


def foreign_writes(path: Path, rel: str) -> list[str]:
    """'module writes TABLE' for each SQL write in `path` on a table another module owns."""
    name = Path(rel).name if rel.startswith(LIBRARY + "/") else rel
    if name in STORAGE and rel.startswith(LIBRARY + "/"):
        return []
    found = []
    for text in sql_strings(path.read_text(encoding="utf-8")):
        for table in WRITE.findall(text):
            owner = OWNERS.get(table.lower())
            if owner is not None and name != owner:
                found.append(f"{rel} writes {table} (owned by {LIBRARY}/{owner})")
    return found


def product_files() -> list[tuple[Path, str]]:
    return [(p, p.relative_to(ROOT).as_posix()) for folder in ("app", "core", "training")
            for p in sorted((ROOT / folder).rglob("*.py"))]


def test_no_module_writes_sql_on_a_table_it_does_not_own() -> None:
    problems = [w for path, rel in product_files() for w in foreign_writes(path, rel)]
    assert problems == []


def test_every_owner_exists_and_writes_its_tables() -> None:
    for table, owner in OWNERS.items():
        texts = sql_strings((ROOT / LIBRARY / owner).read_text(encoding="utf-8"))
        assert any(t.lower() == table for s in texts for t in WRITE.findall(s)), f"{owner} never writes {table}"


@pytest.mark.parametrize("sql", ['db.execute("DELETE FROM vectors WHERE file_id = ?", (1,))',
                                 'db.execute(f"UPDATE user_tags SET tag = ? WHERE file_id IN ({marks})")',
                                 'db.execute("INSERT OR IGNORE INTO favourites(file_id) VALUES (?)")'])
def test_the_checker_catches_a_foreign_write(tmp_path: Path, sql: str) -> None:
    module = tmp_path / "file_table.py"
    module.write_text(f'"""UPDATE vectors in a docstring is prose."""\n\ndef f(db, marks):\n    {sql}\n')
    assert len(foreign_writes(module, f"{LIBRARY}/file_table.py")) == 1
    assert foreign_writes(module, f"{LIBRARY}/salvage.py") == []

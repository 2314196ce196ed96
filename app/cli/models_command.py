"""`earshot models`: list the available model checkpoints (shipped and the user's), the default of each kind."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any


def add_parser(sub: Any, argv: Sequence[str]) -> None:  # noqa: ANN401 - argparse internals
    p = sub.add_parser("models", help="list the available model checkpoints")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from app.services.registry import ModelRegistry

    registry = ModelRegistry()
    entries = registry.scan()
    defaults = {e.kind: e.name for e in map(registry.default_for, {e.kind for e in entries}) if e is not None}
    rows = [
        {"name": e.name, "kind": e.kind, "source": e.source, "default": defaults.get(e.kind) == e.name,
         "path": str(e.path), "metrics": e.training.get("metrics", {})}
        for e in entries
    ]
    if args.json:
        print(json.dumps({"models": rows, "problems": [
            {"path": str(p.path), "message": p.message} for p in registry.problems]}, indent=2))
        return 0
    if not rows:
        print("no models yet; train one with the Train tab or `earshot train`")
    for r in rows:  # source: shipped with Earshot or the user's own; the default is what a tab uses unless told
        source = "shipped" if r["source"] == "default" else r["source"]
        mark = f"default {r['kind']}" if r["default"] else ""
        print(f"{r['name']:<28} {r['kind']:<10} {source:<8} {mark:<18} {r['path']}")
    for p in registry.problems:
        print(f"problem: {p.path}: {p.message}", file=sys.stderr)
    return 0

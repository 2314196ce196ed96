"""`earshot locations`: the library locations Earshot knows by name (shared with the window's File → Library
Locations…): list them, add, remove, rename, and save sets of them for `earshot search --set NAME`."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from app.cli.common import path_arg
from core.display import printable

NAME = "locations"


def add_parser(sub: Any, argv: Sequence[str]) -> None:  # noqa: ANN401 - argparse internals
    p = sub.add_parser(NAME, help="list, add, remove and rename library locations; save sets of them",
                       description="The library folders Earshot knows by name. Each keeps its own index; "
                                   "`earshot search --library NAME --library OTHER` or `--set SET` searches "
                                   "several together.")
    do = p.add_subparsers(dest="action", metavar="ACTION")
    do.add_parser("list", help="the locations and the saved sets (the default)")
    add = do.add_parser("add", help="add a folder as a location")
    add.add_argument("folder", type=path_arg)
    add.add_argument("--name", default=None, help="its name (default: the folder's)")
    remove = do.add_parser("remove", help="forget a location (its folder and index stay)")
    remove.add_argument("name")
    rename = do.add_parser("rename", help="give a location another name")
    rename.add_argument("name")
    rename.add_argument("new_name")
    save = do.add_parser("save-set", help="save locations as a set, for `earshot search --set NAME`")
    save.add_argument("set_name")
    save.add_argument("names", nargs="+", help="the locations in the set")
    p.add_argument("--json", action="store_true", help="print the list as JSON")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from app.services.library.locations import Locations

    saved = Locations.load()
    if saved.problem:
        import sys

        print(f"earshot: {saved.problem}", file=sys.stderr)
    action = args.action or "list"
    if action == "add":
        loc = saved.add(args.folder, args.name)
        saved.save()
        print(f"{printable(loc.name)}: {printable(loc.path)}")
        return 0
    if action == "remove":
        saved.remove(args.name)
    elif action == "rename":
        saved.rename(args.name, args.new_name)
    elif action == "save-set":
        saved.save_set(args.set_name, args.names)
    if action != "list":
        saved.save()
    _print(saved, getattr(args, "json", False))
    return 0


def _print(saved: Any, as_json: bool) -> None:  # noqa: ANN401 - Locations
    if as_json:
        print(json.dumps({"locations": [{"name": loc.name, "path": str(loc.path)} for loc in saved.locations],
                          "sets": saved.sets}, indent=1, ensure_ascii=False))
        return
    if not saved.locations:
        print("no library locations yet: `earshot locations add FOLDER`")
    for loc in saved.locations:
        print(f"{printable(loc.name)}: {printable(loc.path)}")
    for name, members in saved.sets.items():
        print(f"set {printable(name)}: {', '.join(printable(m) for m in members)}")

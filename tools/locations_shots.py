"""Screenshots of two library locations searched together (issue 40's "done when"): the Search tab of the real
window with the shipped model, at 1024x700 and 1600x1000, after a query, into OUT/search-locations-<width>.png.

    python -m tools.locations_shots OUT FOLDER_A FOLDER_B [--query TEXT]

Each folder becomes a location named after it; both are indexed first (their catalogs go to a scratch data
folder when they are read-only). Settings and the list of locations are throw-away (tools/screenshots.py).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from tools.screenshots import STEP_SECONDS, Step, _close, _throwaway_settings, grab_sizes, scratch_home

SIZES = ((1024, 700), (1600, 1000))


def grab_locations(out_dir: Path, folders: list[Path], query: str, step_seconds: float = STEP_SECONDS * 4
                   ) -> list[Path]:
    from app.services.library.locations import Location
    from app.ui.main_window import MainWindow, create_application

    with scratch_home() as scratch:
        os.environ["EARSHOT_LOCATIONS"] = str(scratch / "locations.json")
        create_application()
        _throwaway_settings(scratch)
        window = MainWindow(library=folders[0])
        indexed: list[Any] = []
        window.search_tab.indexing_finished.connect(indexed.append)
        window.show()
        paths: list[Path] = []
        try:
            Step("startup", step_seconds).wait(lambda: window.search_tab.session is not None, "the library")
            indexed.clear()
            window.open_locations([Location(f.name, f) for f in folders])
            Step("index", step_seconds).wait(lambda: any(o is not None for o in indexed),
                                             "both locations to be indexed")
            tab = window.search_tab
            tab.query_edit.setText(query)
            Step("search", step_seconds).wait(lambda: tab.state.results is not None and tab.state.shown_kind
                                              == "text" and bool(tab.state.results.hits), "results")
            tab.table.selectRow(0)
            paths = grab_sizes(window, SIZES, out_dir, "search-locations", 800)
        finally:
            _close(window, step_seconds)
        return paths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.locations_shots", description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("folders", type=Path, nargs=2)
    p.add_argument("--query", default="engine")
    args = p.parse_args(argv)
    for path in grab_locations(args.out, [f.resolve() for f in args.folders], args.query):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

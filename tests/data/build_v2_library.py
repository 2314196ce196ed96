"""Build tests/data/v2_library: a library indexed by Earshot with catalog version 2 (before the text channel).

Run it with the code of a version-2 Earshot on the path (it was made from main at commit 4be4340):
    cd <checkout at 4be4340> && PYTHONPATH=$PWD python <this file> <out folder>
The folder holds four short tones in two folders (one with a UCS name), its `.earshot/` catalog and FAISS index,
embedded by tests/test_library.py's ToneEmbedder (48-d, seed 0). tests/test_library_text.py copies it and
checks that opening it upgrades the catalog in place and that indexing again embeds no audio.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))

from app.services.jobs import drain  # noqa: E402
from app.services.library.catalog import SCHEMA_VERSION  # noqa: E402
from app.services.library.indexer import index_library
from app.services.library.library import Library
from tests.test_library import ToneEmbedder, tone, write  # noqa: E402

NAMES = {"Animals/Birds/lark_01.wav": 880, "Animals/dog-bark.wav": 440, "DOORWood_Creak Slow_01.wav": 220,
         "misc/a3f9c1e2.wav": 1760}


def main(out: Path) -> None:
    assert SCHEMA_VERSION == 2, f"run this with a version-2 Earshot (this one writes version {SCHEMA_VERSION})"
    shutil.rmtree(out, ignore_errors=True)
    for rel, freq in NAMES.items():
        write(out / rel, tone(freq, seconds=0.6))
    emb = ToneEmbedder()
    drain(index_library(out, emb))
    with Library.open(out) as lib:
        lib.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    print(f"wrote {out} with {emb.model_id}")


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve())

"""`python -m bench sfx_heldout` without its caption corpus says what to build, instead of a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import bench_sfx_heldout as bench


def test_a_missing_corpus_names_the_command_that_builds_it(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"no caption corpus \(captions.csv\); build it with python -m "
                                         r"training.sfx_corpus"):
        bench.load_features(tmp_path / "nowhere")
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "captions.csv").write_text("path,caption,split\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="no precomputed features"):
        bench.load_features(tmp_path / "corpus")

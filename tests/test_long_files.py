"""A long file is embedded from a bounded set of evenly spread windows (issue 25 item 2), and the best-matching
moment is still found where it is."""

from __future__ import annotations

import numpy as np
import pytest

from app.services.jobs import drain
from app.services.library import embedding
from app.services.library.embedding import spread_windows, window_count, window_starts
from app.services.library.indexer import index_library
from app.services.library.library import Library
from tests.test_library import ToneEmbedder, sound_search, tone, write, write_retrieval_checkpoint

FREQS = [200 * 1.15 ** i for i in range(20)]  # a tone per 0.5-s window, 200 Hz..2.9 kHz: 20 windows, each its own


def test_spread_windows_keep_the_first_the_last_and_evenly_between() -> None:
    assert spread_windows(18, 6) == [0, 3, 7, 10, 14, 17]
    assert spread_windows(5, 6) == [0, 1, 2, 3, 4]
    assert spread_windows(18, 0) == list(range(18))
    assert spread_windows(18, 1) == [0]
    assert window_count(10.0, 0.5) == 20 and window_count(10.2, 0.5) == 21 and window_count(0.1, 0.5) == 1
    np.testing.assert_allclose(window_starts(10.0, 0.5, 6), [0.0, 2.0, 4.0, 5.5, 7.5, 9.5])
    np.testing.assert_allclose(window_starts(2.0, 0.5, 4), [0.0, 0.5, 1.0, 1.5])


@pytest.mark.parametrize("max_windows, stored", [(6, 6), (0, 20)])
def test_a_long_file_stores_its_spread_windows_and_finds_the_best_moment(tmp_path, max_windows, stored) -> None:
    root = tmp_path / "lib"
    write(root / "long.wav", np.concatenate([tone(f, 0.5) for f in FREQS]))
    write(root / "short.wav", tone(3000, 0.5))
    emb = ToneEmbedder()
    report = drain(index_library(root, emb, max_windows=max_windows))
    assert emb.windows == stored + 1
    assert report.spread == (1 if max_windows else 0)  # the Search tab says how many long files were spread
    with Library.open(root) as lib:
        assert lib.db.execute("SELECT n_windows FROM vectors v JOIN files f ON f.id = v.file_id"
                              " WHERE f.path = ?", (b"long.wav",)).fetchone()[0] == stored
        chosen = spread_windows(20, max_windows)
        for i in (chosen[2], chosen[-1]):  # a window that was embedded: found where it is
            hit = next(h for h in sound_search(lib, emb, f"{FREQS[i]:.3f} Hz", k=2) if h.rel_path == "long.wav")
            assert hit.best_window_start_s == pytest.approx(0.5 * i)
            assert len(hit.window_scores) == stored


def test_the_cli_can_embed_every_window(tmp_path, monkeypatch) -> None:
    seen: list[int] = []
    real = embedding.windows_of

    def spy(path, embedder, batch, max_windows=0, duration=0.0):  # noqa: ANN001, ANN202
        seen.append(max_windows)
        return real(path, embedder, batch, max_windows, duration)

    from app.services.library import indexer
    monkeypatch.setattr(indexer, "windows_of", spy)
    root = tmp_path / "lib"
    write(root / "long.wav", np.concatenate([tone(f, 0.5) for f in FREQS]))
    from app.cli import index_command
    from app.cli.main import main
    assert index_command.LONG_FILE_WINDOWS == embedding.LONG_FILE_WINDOWS
    assert main(["index", str(root), "--model", write_retrieval_checkpoint(tmp_path / "m.safetensors"),
                 "--all-windows", "--json"]) == 0
    write(tmp_path / "lib2" / "long.wav", np.concatenate([tone(f, 0.5) for f in FREQS]))
    assert main(["index", str(tmp_path / "lib2"), "--model", str(tmp_path / "m.safetensors"), "--json"]) == 0
    assert seen == [0, embedding.LONG_FILE_WINDOWS]


@pytest.mark.parametrize(("rate", "extra"), [(96000, 1), (8000, 3), (22050, 2)])
def test_a_last_window_of_a_few_samples_is_left_out_and_the_moment_found(tmp_path, rate: int, extra: int) -> None:
    """A long file whose length is a few samples past a window boundary, at a rate the model resamples from:
    the tail (peak-normalised on its own, it once "matched" best) is not embedded, and the best moment is the
    window the tone is in (issue 25 sweep: 10 of 15 such files said 60 s for a tone at 20 s)."""
    import soundfile as sf

    emb = ToneEmbedder(window_seconds=1.0)
    root = tmp_path / "lib"
    root.mkdir()
    seconds = 12
    x = 0.01 * np.random.default_rng(0).standard_normal(seconds * rate + extra).astype(np.float32)
    t = np.arange(rate) / rate
    x[7 * rate:8 * rate] += 0.5 * np.sin(2 * np.pi * 1500 * t)  # the tone in window 7
    sf.write(root / "long.wav", x, rate, subtype="FLOAT")
    drain(index_library(root, emb, max_windows=0))
    with Library.open(root) as lib:
        hit = sound_search(lib, emb, "1500 Hz", k=1)[0]
        assert len(hit.window_scores) == seconds and hit.best_window_start_s == 7.0
    drain(index_library(root, emb))  # nothing changed: nothing to do


@pytest.mark.parametrize("rate", [16000, 11025, 22050, 44100, 48000])
def test_spread_windows_are_decoded_on_their_own_as_the_stream_decodes_them(tmp_path, rate: int) -> None:
    """The kept windows of a long file are read by seeking (decoding a long Ogg track whole cost more than the
    model on the windows it kept): the same samples as the streamed windows, to float32 rounding (the seek keeps the
    resampler's sample phase and its filter context); a window past the end of the audio is not there."""
    import soundfile as sf

    from core.audio import iter_blocks

    x = 0.3 * np.random.default_rng(0).standard_normal(rate * 10 + rate // 3).astype(np.float32)
    sf.write(tmp_path / "long.wav", x, rate, subtype="FLOAT")
    streamed = list(iter_blocks(tmp_path / "long.wav", 16000, 0.5, pad_last=False))
    chosen = spread_windows(len(streamed), 6)
    got = list(embedding.spread_blocks(tmp_path / "long.wav", [*chosen, len(streamed) + 3], 16000, 0.5, rate))
    assert [i for i, _ in got] == chosen
    for i, block in got:
        assert len(block) == len(streamed[i])
        assert float(np.abs(block - streamed[i]).max()) <= 1e-5, i

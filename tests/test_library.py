"""Sound library: scan, catalog, incremental indexing, moves, failures, crash safety, search."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import zlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import soundfile as sf

from app.services.jobs import drain
from app.services.library import catalog as C
from app.services.library import indexer
from app.services.library import scan as S
from app.services.library.indexer import index_library
from app.services.library.library import Library
from app.services.library.records import LibraryError, SearchFilters
from app.services.library.scan import scan_folder
from app.services.library.vector_index import IndexConfig, VectorIndex
from app.services.search.answer import SearchAnswer
from app.services.search.session import SearchSession
from core.files import hash_file

SR = 8000


class ToneEmbedder:
    """A small, deterministic, real embedder: spectral band energies of a window, rotated by a fixed matrix.

    Per window: Hann-windowed power spectrum summed into `dim` log-spaced bands, the band-energy fractions
    square-rooted (a unit vector for any non-silent window), then multiplied by a fixed random orthogonal
    matrix. So cos(a, b) = overlap of the two spectra: tones in different bands are near-orthogonal.
    Text "a 440 Hz tone" embeds a synthetic 440-Hz window, so text search has a checkable answer.
    """

    def __init__(self, dim: int = 48, seed: int = 0, window_seconds: float = 0.5, delay: float = 0.0,
                 model_id: str | None = None) -> None:
        self.dim, self.sample_rate, self.window_seconds, self.delay = dim, SR, window_seconds, delay
        self.model_id = model_id or f"tone-{dim}-{seed}"
        n = round(window_seconds * SR)
        freqs = np.fft.rfftfreq(n, 1 / SR)
        edges = np.geomspace(40, SR / 2, dim + 1)
        self.band = np.clip(np.searchsorted(edges, freqs, side="right") - 1, 0, dim - 1)  # (F,)
        self.hann = np.hanning(n).astype(np.float32)
        q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((dim, dim)))
        self.rotation = q.astype(np.float32)
        self.calls = 0
        self.windows = 0

    def embed_windows(self, audio_windows: np.ndarray) -> np.ndarray:
        assert audio_windows.ndim == 2 and audio_windows.shape[1] == round(self.window_seconds * SR)
        self.calls += 1
        self.windows += len(audio_windows)
        if self.delay:
            time.sleep(self.delay * len(audio_windows))
        power = np.abs(np.fft.rfft(audio_windows * self.hann, axis=1)) ** 2  # (W, F)
        bands = np.zeros((len(power), self.dim))
        np.add.at(bands.T, self.band, power.T)  # (W, dim)
        feats = np.sqrt(bands / np.maximum(bands.sum(1, keepdims=True), 1e-12))
        return (feats @ self.rotation).astype(np.float32)

    def embed_text(self, texts: list[str]) -> np.ndarray:
        out = []
        for text in texts:
            m = re.search(r"(\d+(?:\.\d+)?)\s*hz", text.lower())
            t = np.arange(round(self.window_seconds * SR)) / SR
            if m:
                x = np.sin(2 * np.pi * float(m.group(1)) * t)
            else:
                x = np.random.default_rng(zlib.crc32(text.encode())).standard_normal(len(t))
            out.append(self.embed_windows(x[None].astype(np.float32))[0])
        self.windows -= len(texts)  # count only audio windows
        self.calls -= len(texts)
        return np.stack(out)


def tone(freq: float, seconds: float = 1.0, amp: float = 0.5) -> np.ndarray:
    t = np.arange(round(seconds * SR)) / SR
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def write(path: Path, audio: np.ndarray, subtype: str = "PCM_16") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, audio, SR, subtype=subtype)
    return path


FREQS = [220, 440, 880, 1760]


def make_library(root: Path) -> Path:
    for f in FREQS:
        write(root / f"tone_{f}.wav", tone(f))
    return root


def catalog_ids(lib: Library, model_id: str) -> set[int]:
    return {r[0] for r in lib.db.execute("SELECT id FROM vectors WHERE model_id = ?", (model_id,))}


def assert_consistent(lib: Library, model_id: str) -> None:
    """Index and catalog agree; one vector per ok file; no duplicates."""
    vi = lib.vectors.index(model_id)
    ids = vi.ids()
    assert len(ids) == len(set(ids.tolist()))
    assert set(ids.tolist()) == catalog_ids(lib, model_id)
    n_vec, n_files = lib.db.execute(
        "SELECT count(*), count(DISTINCT file_id) FROM vectors WHERE model_id = ?", (model_id,)).fetchone()
    assert n_vec == n_files


def sound_search(lib: Library, emb: ToneEmbedder, query: str, k: int = 10, filters: SearchFilters | None = None
                 ) -> SearchAnswer:
    """A description searched by sound alone, on the path users take (SearchSession, as the CLI and the tab)."""
    return SearchSession(lib, emb, text_encoder=None).search(query, k, filters, mode="sound")


def find_similar(lib: Library, emb: ToneEmbedder, target: str | Path | int, k: int = 10,
                 filters: SearchFilters | None = None) -> SearchAnswer:
    """Find similar on the path users take, among files of any length."""
    return SearchSession(lib, emb, text_encoder=None).similar(target, k, filters, any_length=True)


def top(lib: Library, emb: ToneEmbedder, query: str, **kw) -> list[str]:
    return [h.rel_path for h in sound_search(lib, emb, query, **kw)]


# ------------------------------------------------------------------------------------------------- basics


def test_scan_index_search_and_filters(tmp_path):
    root = make_library(tmp_path / "lib")
    write(root / "sub" / "deep" / "long_440.wav", tone(440, 3.0))
    (root / "notes.txt").write_text("not audio")
    t = np.arange(16000) / 16000  # stereo FLAC at 16 kHz: mixed down and resampled to the model's rate
    sf.write(root / "stereo_1000.flac", np.stack([np.sin(2 * np.pi * 1000 * t)] * 2, 1) * 0.5, 16000)
    emb = ToneEmbedder()
    progress = []
    job = index_library(root, emb, batch_size=4)
    while True:
        try:
            progress.append(next(job))
        except StopIteration as stop:
            report = stop.value
            break
    assert sorted(report.embedded) == sorted([f"tone_{f}.wav" for f in FREQS] + ["stereo_1000.flac",
                                                                                   "sub/deep/long_440.wav"])
    assert report.failed == [] and report.windows == 5 * 2 + 6
    assert abs(report.audio_seconds - 8.0) < 1e-6
    last = progress[-1]
    assert last["files_done"] == last["files_total"] == 6 and last["step"] == last["total"] == 6
    assert {"audio_seconds", "eta_s", "message"} <= set(last)
    assert (root / ".earshot" / "catalog.sqlite").is_file()

    with Library.open(root) as lib:
        assert lib.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        st = lib.stats()
        assert (st.files, st.ok, st.errors) == (6, 6, 0) and st.vectors == {emb.model_id: 6}
        hit = sound_search(lib, emb, "1000 Hz", k=1)[0]
        assert hit.rel_path == "stereo_1000.flac" and hit.score > 0.95
        for f in FREQS:
            hits = sound_search(lib, emb, f"a {f} Hz tone", k=3)
            assert hits[0].rel_path in (f"tone_{f}.wav", "sub/deep/long_440.wav")
            assert hits[0].score > 0.95 and hits[0].score > hits[-1].score + 0.5
            assert hits[0].path.is_file()
        hits = sound_search(lib, emb, "440 Hz", k=5)
        assert {h.rel_path for h in hits[:2]} == {"tone_440.wav", "sub/deep/long_440.wav"}
        long_hit = next(h for h in hits if h.rel_path.startswith("sub"))
        assert long_hit.folder == "sub/deep" and abs(long_hit.duration - 3.0) < 1e-6
        assert len(long_hit.window_scores) == 6
        # filters: duration range and folder prefix (a prefix of a folder name is not a match)
        assert top(lib, emb, "440 Hz", k=1, filters=SearchFilters(max_duration=2.0)) == ["tone_440.wav"]
        assert top(lib, emb, "220 Hz", k=5, filters=SearchFilters(min_duration=2.0)) == ["sub/deep/long_440.wav"]
        assert top(lib, emb, "220 Hz", k=5, filters=SearchFilters(folder="sub")) == ["sub/deep/long_440.wav"]
        assert top(lib, emb, "220 Hz", k=5, filters=SearchFilters(folder=str(root / "sub/deep"))) == [
            "sub/deep/long_440.wav"]
        assert top(lib, emb, "220 Hz", k=5, filters=SearchFilters(folder="su")) == []
        # audio-to-audio: the other 440 file, never the file itself
        sim = find_similar(lib, emb, "tone_440.wav", k=2)
        assert sim[0].rel_path == "sub/deep/long_440.wav" and sim[0].score > 0.95
        assert all(h.rel_path != "tone_440.wav" for h in find_similar(lib, emb, "tone_440.wav", k=10))
        assert len(find_similar(lib, emb, lib.files.id_of("tone_440.wav"), k=10)) == 5
        # a file outside the library is embedded on the fly
        outside = write(tmp_path / "query_880.wav", tone(880, 0.7))
        assert find_similar(lib, emb, outside, k=1)[0].rel_path == "tone_880.wav"
        assert_consistent(lib, emb.model_id)


def test_pooling_weights_real_audio_by_coverage(tmp_path):
    # 0.75 s = one full window of 440 Hz + a half window of 1760 Hz: the tail counts half
    root = tmp_path / "lib"
    write(root / "mix.wav", np.concatenate([tone(440, 0.5), tone(1760, 0.25)]), subtype="FLOAT")
    emb = ToneEmbedder()
    drain(index_library(root, emb))
    with Library.open(root) as lib:
        v, n = lib.db.execute("SELECT vector, n_windows FROM vectors").fetchone()
    a = emb.embed_windows(tone(440, 0.5)[None])[0]
    b = emb.embed_windows(np.pad(tone(1760, 0.25), (0, 2000))[None])[0]
    expected = (a + 0.5 * b) / 1.5
    np.testing.assert_allclose(np.frombuffer(v, np.float32), expected / np.linalg.norm(expected), atol=1e-5)
    assert n == 2


def test_incremental_reindex_embeds_only_changed_and_new(tmp_path):
    root = make_library(tmp_path / "lib")
    emb = ToneEmbedder()
    drain(index_library(root, emb))
    assert emb.windows == 8
    emb.windows = 0
    report = drain(index_library(root, emb))
    assert emb.windows == 0 and report.unchanged == 4 and report.embedded == []
    # change one file's content (same size, new mtime), add one, touch one without changing it
    write(root / "tone_220.wav", tone(3000))
    write(root / "new_1000.wav", tone(1000, 1.5))
    os.utime(root / "tone_880.wav", ns=(time.time_ns(), time.time_ns() + 10**9))
    report = drain(index_library(root, emb))
    assert sorted(report.embedded) == ["new_1000.wav", "tone_220.wav"]
    assert emb.windows == 2 + 3 and report.touched == 1 and report.unchanged == 2
    with Library.open(root) as lib:
        assert top(lib, emb, "3000 Hz", k=1) == ["tone_220.wav"]
        assert top(lib, emb, "1000 Hz", k=1) == ["new_1000.wav"]
        assert sound_search(lib, emb, "220 Hz", k=1)[0].score < 0.5  # the old content is gone
        assert_consistent(lib, emb.model_id)


def test_deleted_file_leaves_catalog_and_index(tmp_path):
    root = make_library(tmp_path / "lib")
    emb = ToneEmbedder()
    drain(index_library(root, emb))
    (root / "tone_440.wav").unlink()
    report = drain(index_library(root, emb))
    assert report.removed == 1
    with Library.open(root) as lib:
        assert lib.stats().files == 3 and lib.files.id_of("tone_440.wav") is None
        assert "tone_440.wav" not in top(lib, emb, "440 Hz", k=10)
        assert len(lib.vectors.index(emb.model_id)) == 3
        assert_consistent(lib, emb.model_id)


def test_moved_and_copied_files_are_not_reembedded(tmp_path):
    root = make_library(tmp_path / "lib")
    emb = ToneEmbedder()
    drain(index_library(root, emb))
    with Library.open(root) as lib:
        fid = lib.files.id_of("tone_440.wav")
    (root / "moved" / "deeper").mkdir(parents=True)
    os.replace(root / "tone_440.wav", root / "moved" / "deeper" / "renamed.wav")
    os.replace(root / "tone_220.wav", root / "tone_220_renamed.wav")
    (root / "copy_880.wav").write_bytes((root / "tone_880.wav").read_bytes())
    emb.windows = 0
    report = drain(index_library(root, emb))
    assert emb.windows == 0
    assert sorted(report.moved) == ["moved/deeper/renamed.wav", "tone_220_renamed.wav"]
    assert report.copied == ["copy_880.wav"] and report.removed == 0
    with Library.open(root) as lib:
        assert lib.files.id_of("moved/deeper/renamed.wav") == fid  # same row, same vectors
        assert top(lib, emb, "440 Hz", k=1) == ["moved/deeper/renamed.wav"]
        assert set(top(lib, emb, "880 Hz", k=2)) == {"tone_880.wav", "copy_880.wav"}
        assert lib.stats().files == 5
        assert_consistent(lib, emb.model_id)


def test_copy_of_content_replaced_in_the_same_run_is_read_after_all(tmp_path):
    root = tmp_path / "lib"
    write(root / "a.wav", tone(440))
    emb = ToneEmbedder()
    drain(index_library(root, emb))
    (root / "b.wav").write_bytes((root / "a.wav").read_bytes())  # b: a's old content, known by hash
    write(root / "a.wav", tone(1760))  # a: new content, committed before b is looked at
    report = drain(index_library(root, emb, workers=1, batch_size=1))
    assert sorted(report.embedded) == ["a.wav", "b.wav"] and report.copied == []
    with Library.open(root) as lib:
        assert top(lib, emb, "440 Hz", k=1) == ["b.wav"] and top(lib, emb, "1760 Hz", k=1) == ["a.wav"]
        assert_consistent(lib, emb.model_id)


def test_one_indexing_job_per_library(tmp_path):
    root = make_library(tmp_path / "lib")
    emb = ToneEmbedder()
    with Library.open(root) as lib:
        first = index_library(lib, emb)
        next(first)
        with pytest.raises(LibraryError, match="already being indexed"):
            next(index_library(lib, emb))
        first.close()
        assert len(drain(index_library(lib, emb)).embedded) == 4


def test_one_indexing_job_per_library_across_processes(tmp_path):
    """Hostile-input sweep: two `earshot index` runs on one library at once (two processes, each its own
    Library) both read and embedded every file, twice the work, each saying it embedded them all; the lock was
    only the one Library object's. The second now stops at once with a message; the first is untouched."""
    root = make_library(tmp_path / "lib")
    emb = ToneEmbedder()
    with Library.open(root) as one, Library.open(root) as other:
        first = index_library(one, emb)
        next(first)
        with pytest.raises(LibraryError, match="already being indexed"):
            next(index_library(other, ToneEmbedder()))
        assert len(drain(first).embedded) == 4
        assert drain(index_library(other, emb)).embedded == []  # the first is done: free again


def test_a_search_while_another_process_indexes_neither_repairs_nor_writes_the_index(tmp_path):
    """Hostile-input sweep: a search run while `earshot index` embedded the library found the index file behind
    the catalog (it is written at checkpoints), said "library: repaired index ...: +20 -0 vectors" as if it had
    been damaged, and wrote the file and its checksum under the indexer. It is searched as the catalog has it,
    quietly, and the file is left to the indexer."""
    root = tmp_path / "lib"
    for i in range(12):
        write(root / f"tone_{i:02d}.wav", tone(200 + 50 * i))
    emb = ToneEmbedder()
    with Library.open(root) as indexing:
        job = index_library(indexing, emb, checkpoint_seconds=3600, workers=1)
        try:
            for p in job:
                if p.get("files_done", 0) >= 4:
                    break
            path = indexing.vectors.path(emb.model_id)
            before = path.read_bytes() if path.exists() else None
            with Library.open(root) as searching:
                embedded = searching.db.execute("SELECT count(*) FROM vectors WHERE model_id = ?",
                                                (emb.model_id,)).fetchone()[0]
                assert embedded >= 4
                assert searching.vectors.count(emb.model_id) == embedded  # every committed vector is searched
                assert not [e for e in searching.events if "index" in e], searching.events
            assert (path.read_bytes() if path.exists() else None) == before
            drain(job)
        finally:
            job.close()
    with Library.open(root) as after:
        assert after.vectors.count(emb.model_id) == 12 and not after.events


def test_a_deleted_file_leaves_other_models_indexes_without_a_repair_message(tmp_path):
    """Hostile-input sweep: deleting a file and indexing again printed "library: repaired index ....faiss: +0 -1
    vectors", as if the index had been damaged: the file's vectors of every model left the catalog, but only the
    loaded indexes (the run's own model) dropped them; the others (the names' sentence index, other models) were
    behind until their next load, which then called the catch-up a repair."""
    root = make_library(tmp_path / "lib")
    a, b = ToneEmbedder(model_id="tone-a"), ToneEmbedder(seed=1, model_id="tone-b")
    drain(index_library(root, a))
    drain(index_library(root, b))
    (root / "tone_440.wav").unlink()
    assert drain(index_library(root, b)).removed == 1  # the index of tone-a is not loaded by this run
    with Library.open(root) as lib:
        assert lib.vectors.count("tone-a") == len(FREQS) - 1
        assert not lib.events, lib.events
        assert_consistent(lib, "tone-a")


def test_another_model_gets_its_own_index(tmp_path):
    root = make_library(tmp_path / "lib")
    a, b = ToneEmbedder(dim=48, seed=0), ToneEmbedder(dim=32, seed=1)
    drain(index_library(root, a))
    report = drain(index_library(root, b))
    assert len(report.embedded) == 4 and b.windows == 8
    with Library.open(root) as lib:
        assert lib.stats().vectors == {a.model_id: 4, b.model_id: 4}
        assert lib.vectors.path(a.model_id) != lib.vectors.path(b.model_id)
        assert lib.vectors.path(a.model_id).is_file() and lib.vectors.path(b.model_id).is_file()
        for emb in (a, b):
            assert top(lib, emb, "880 Hz", k=1) == ["tone_880.wav"]
            assert_consistent(lib, emb.model_id)
        # editing a file makes both models' vectors stale; the other model's index is repaired on open
    write(root / "tone_880.wav", tone(300))
    drain(index_library(root, a))
    with Library.open(root) as lib:
        assert lib.stats().vectors == {a.model_id: 4, b.model_id: 3}
        assert_consistent(lib, b.model_id)
    drain(index_library(root, b))
    with Library.open(root) as lib:
        assert top(lib, b, "300 Hz", k=1) == ["tone_880.wav"]


# -------------------------------------------------------------------------------------------- bad inputs


def test_corrupt_empty_header_only_files_are_reported_and_skipped(tmp_path):
    root = make_library(tmp_path / "lib")
    (root / "garbage.wav").write_bytes(np.random.default_rng(0).bytes(5000))
    (root / "empty.flac").write_bytes(b"")
    sf.write(root / "header_only.wav", np.zeros(0, np.float32), SR)
    write(root / "truncated.wav", tone(500, 2.0))
    data = (root / "truncated.wav").read_bytes()
    (root / "truncated.wav").write_bytes(data[: len(data) // 2])
    emb = ToneEmbedder()
    report = drain(index_library(root, emb))
    bad = {"empty.flac", "garbage.wav", "header_only.wav", "truncated.wav"}
    assert {f.path for f in report.failed} == bad and len(report.embedded) == 4
    with Library.open(root) as lib:
        failed = {f.path: f.error for f in lib.files.failed()}
        assert set(failed) == bad
        assert "empty" in failed["empty.flac"] and "truncated" in failed["truncated.wav"]
        assert "no audio frames" in failed["header_only.wav"]
        assert "not a readable audio file" in failed["garbage.wav"]
        assert lib.stats().errors == 4
        assert_consistent(lib, emb.model_id)
    emb.windows = 0
    report = drain(index_library(root, emb))
    assert report.failed == [] and report.unchanged == 8 and emb.windows == 0  # not retried
    write(root / "garbage.wav", tone(500))  # fixed: indexed next time
    report = drain(index_library(root, emb))
    assert report.embedded == ["garbage.wav"]
    with Library.open(root) as lib:
        assert "garbage.wav" not in {f.path for f in lib.files.failed()}
        assert top(lib, emb, "500 Hz", k=1) == ["garbage.wav"]


def test_odd_and_non_utf8_names(tmp_path):
    root = tmp_path / "lib"
    names = ["spaced name.wav", "ünïcødé 🎵.wav", "quote'\"%_.wav", "new\nline.WAV"]
    for name, f in zip(names, [300, 600, 1200, 2400], strict=True):
        write(root / name, tone(f))
    raw = os.path.join(os.fsencode(root), b"bad\xff\xfe name.wav")
    with open(raw, "wb") as fh:
        sf.write(fh, tone(150), SR, format="WAV")
    emb = ToneEmbedder()
    report = drain(index_library(root, emb))
    assert report.failed == [] and len(report.embedded) == 5
    with Library.open(root) as lib:
        hit = sound_search(lib, emb, "150 Hz", k=1)[0]
        assert os.fsencode(hit.path) == raw and hit.path.is_file()  # exact bytes round trip
        assert "\ufffd" in hit.name  # printable
        assert top(lib, emb, "2400 Hz", k=1) == ["new\nline.WAV"]
        assert top(lib, emb, "1200 Hz", k=1) == ["quote'\"%_.wav"]
        assert find_similar(lib, emb, hit.path, k=1)[0].rel_path != hit.rel_path
    emb.windows = 0
    assert drain(index_library(root, emb)).unchanged == 5 and emb.windows == 0


def test_symlink_loops_are_followed_once(tmp_path):
    root = make_library(tmp_path / "lib")
    write(root / "a" / "b" / "x.wav", tone(300))
    os.symlink(root, root / "a" / "b" / "loop")  # back to the root
    os.symlink(root / "a", root / "a_again")  # the same folder twice
    os.symlink(root / "nowhere", root / "broken.wav")
    os.symlink(root / "a" / "b" / "x.wav", root / "link_to_x.wav")
    (root / ".hidden").mkdir()
    write(root / ".hidden" / "h.wav", tone(300))
    scan = scan_folder(root)
    rels = [f.rel for f in scan.files]
    assert len(rels) == len(set(rels)) == 5
    assert sum(r.endswith("x.wav") for r in rels) == 1
    assert not any("loop" in r or "hidden" in r for r in rels)
    assert len(scan_folder(root, include_hidden=True).files) == 6
    write(root / ".hidden" / ".h.1a2b3c4d.earshot-tmp.wav", tone(300))  # a tag writer's copy in flight
    assert len(scan_folder(root, include_hidden=True).files) == 6
    report = drain(index_library(root, ToneEmbedder()))
    assert len(report.embedded) == 5 and report.failed == []


def test_a_link_to_a_folder_holding_the_library_is_not_followed(tmp_path):
    """Hostile-input sweep: `ln -s .. up` (or a link to /) inside a library indexed everything beside and above
    it (with /: the whole file system, /proc included; the run never ended). Only the root itself was cut."""
    root = make_library(tmp_path / "outer" / "lib")
    write(tmp_path / "outer" / "other" / "not_mine.wav", tone(300))
    os.symlink(tmp_path / "outer", root / "up")
    os.symlink("/", root / "slash")
    scan = scan_folder(root)
    assert sorted(f.rel for f in scan.files) == sorted(f"tone_{f}.wav" for f in FREQS)
    linked = [e for e in scan.errors if "holds the library" in e]
    assert len(linked) == 2 and any("up" in e for e in linked) and any("slash" in e for e in linked)
    assert scan.unreadable == []  # not a folder that is away: nothing catalogued under it is kept


def test_unreadable_file_is_reported_and_retried(tmp_path, monkeypatch):
    root = make_library(tmp_path / "lib")
    locked = root / "tone_440.wav"
    os.chmod(locked, 0)
    real_hash = hash_file

    def deny(path, stop=None, chunk=1 << 20):
        if Path(path) == locked:
            raise PermissionError(13, "Permission denied", str(path))  # chmod does not stop root
        return real_hash(path, stop, chunk)

    monkeypatch.setattr(indexer, "hash_file", deny)  # what the indexer's readers call
    emb = ToneEmbedder()
    report = drain(index_library(root, emb))
    assert [(f.path, f.error) for f in report.failed] == [("tone_440.wav", "tone_440.wav: permission denied")]
    with Library.open(root) as lib:
        assert [f.path for f in lib.files.failed()] == ["tone_440.wav"]
    os.chmod(locked, 0o644)  # fixing permissions does not change mtime: unreadable files are retried anyway
    monkeypatch.setattr(indexer, "hash_file", real_hash)
    report = drain(index_library(root, emb))
    assert report.embedded == ["tone_440.wav"] and report.failed == []
    with Library.open(root) as lib:
        assert lib.files.failed() == [] and top(lib, emb, "440 Hz", k=1) == ["tone_440.wav"]


def test_file_changing_while_indexed_is_requeued(tmp_path, monkeypatch):
    root = make_library(tmp_path / "lib")
    real_stat = os.stat
    calls: dict[str, int] = {}

    def flaky_stat(path):
        st = real_stat(path)
        name = os.path.basename(path)
        calls[name] = calls.get(name, 0) + 1
        # tone_440 looks modified once (after its first read); tone_880 changes on every look
        if (name == "tone_440.wav" and calls[name] == 2) or name == "tone_880.wav":
            return SimpleNamespace(st_size=st.st_size, st_mtime_ns=st.st_mtime_ns + calls[name])
        return st

    monkeypatch.setattr(S, "stat_file", flaky_stat)
    emb = ToneEmbedder()
    report = drain(index_library(root, emb, max_requeue=2))
    assert "tone_440.wav" in report.embedded and report.requeued == 1 + 3
    assert [f.path for f in report.failed] == ["tone_880.wav"]
    assert "kept changing" in report.failed[0].error
    with Library.open(root) as lib:
        assert top(lib, emb, "440 Hz", k=1) == ["tone_440.wav"]
        assert_consistent(lib, emb.model_id)


@pytest.mark.timeout(60)  # a file whose windows are miscounted is never committed: the job would not end
def test_windows_of_a_read_that_was_dropped_never_reach_the_reread_file(tmp_path, monkeypatch):
    """The model runs on its own thread, so windows of a file's first read can still be embedding when the file
    turns out to have changed and is read again: their vectors must be dropped, not added to the new read's."""
    root = tmp_path / "lib"
    write(root / "a.wav", tone(440, seconds=1.5))  # alone: its second read comes right after the first
    real_stat = os.stat
    calls: dict[str, int] = {}

    def rewrite_after_first_read(path):
        name = os.path.basename(path)
        calls[name] = calls.get(name, 0) + 1
        if name == "a.wav" and calls[name] == 2:  # the check after a's first read: its content changes now
            write(root / "a.wav", tone(1760, seconds=1.5))
            os.utime(root / "a.wav", ns=(1, 10**18))
        return real_stat(path)

    monkeypatch.setattr(S, "stat_file", rewrite_after_first_read)
    emb = ToneEmbedder(delay=0.05)  # slow: a's first windows are still on the embedding thread
    report = drain(index_library(root, emb, workers=1, batch_size=1))
    assert report.requeued == 1 and report.embedded == ["a.wav"]
    assert report.windows == 3  # three 0.5-s windows, of its second read only
    with Library.open(root) as lib:
        vector = lib.vectors.of_files(emb.model_id, [lib.files.id_of("a.wav")])[lib.files.id_of("a.wav")]
        assert_consistent(lib, emb.model_id)
    want = emb.embed_windows(tone(1760, seconds=0.5)[None])[0]
    assert float(vector @ want / np.linalg.norm(want)) > 0.999  # the new tone's alone: no 440-Hz window in it


def test_a_front_end_failure_stops_the_job_and_marks_no_file_failed(tmp_path):
    """The readers run the embedder's front end (prepare_windows); when it fails on decoded audio, that is the
    model's fault (out of memory, a broken front end): the job stops with the error, no file is recorded as failed,
    and a later run with a working model indexes everything."""

    class FailingFrontEnd(ToneEmbedder):
        def prepare_windows(self, windows):
            raise MemoryError("front end out of memory")

        def embed_prepared(self, batches):
            raise AssertionError("never reached")

    root = make_library(tmp_path / "lib")
    with pytest.raises(MemoryError, match="front end out of memory"):
        drain(index_library(root, FailingFrontEnd()))
    with Library.open(root) as lib:
        assert lib.db.execute("SELECT COUNT(*) FROM files WHERE status = 'error'").fetchone()[0] == 0
    emb = ToneEmbedder()
    report = drain(index_library(root, emb))
    assert sorted(report.embedded) == sorted(f"tone_{f}.wav" for f in FREQS) and not report.failed


def test_read_only_library_keeps_catalog_in_user_data_dir(tmp_path, monkeypatch):
    root = make_library(tmp_path / "lib")
    data = tmp_path / "userdata"
    real = C.can_write
    monkeypatch.setattr(C, "can_write", lambda folder: False if root in Path(folder).parents else real(folder))
    monkeypatch.setattr(C, "user_data_dir", lambda *a, **k: str(data))
    emb = ToneEmbedder()
    drain(index_library(root, emb))
    assert not (root / ".earshot").exists()
    catalogs = list((data / "libraries").glob("*/catalog.sqlite"))
    assert len(catalogs) == 1
    with Library.open(root) as lib:
        assert lib.catalog_dir == catalogs[0].parent
        assert top(lib, emb, "880 Hz", k=1) == ["tone_880.wav"]


def test_v0_catalog_is_migrated(tmp_path):
    root = make_library(tmp_path / "lib")
    emb = ToneEmbedder()
    (root / ".earshot").mkdir()
    db = sqlite3.connect(root / ".earshot" / "catalog.sqlite")
    db.execute("CREATE TABLE files(path TEXT PRIMARY KEY, size INTEGER, mtime REAL, sha256 TEXT, duration REAL)")
    db.execute("CREATE TABLE embeddings(path TEXT, model TEXT, vector BLOB)")
    for f in FREQS:
        p = root / f"tone_{f}.wav"
        st = p.stat()
        db.execute("INSERT INTO files VALUES (?, ?, ?, ?, ?)", (p.name, st.st_size, st.st_mtime,
                                                                hash_file(p), 1.0))
        v = emb.embed_windows(tone(f, 0.5)[None])[0]
        db.execute("INSERT INTO embeddings VALUES (?, ?, ?)", (p.name, emb.model_id, v.tobytes()))
    db.execute("INSERT INTO files VALUES ('gone.wav', 10, 1.0, 'abc', 2.0)")
    db.commit()
    db.close()
    emb.windows = 0
    with Library.open(root) as lib:
        assert lib.db.execute("PRAGMA user_version").fetchone()[0] == C.SCHEMA_VERSION
        assert lib.stats().files == 5 and lib.stats().vectors == {emb.model_id: 4}
        assert top(lib, emb, "880 Hz", k=1) == ["tone_880.wav"]  # migrated vectors, index built from them
        assert any("missing" in e for e in lib.events) or lib.vectors.path(emb.model_id).is_file()
    report = drain(index_library(root, emb))
    assert emb.windows == 0 and report.embedded == [] and report.removed == 1  # mtime in ns: hash decides
    with Library.open(root) as lib:
        assert lib.db.execute("SELECT count(*) FROM models WHERE sample_rate = ?", (SR,)).fetchone()[0] == 1
        assert_consistent(lib, emb.model_id)


def test_newer_catalog_is_refused_with_a_clear_error(tmp_path):
    root = make_library(tmp_path / "lib")
    drain(index_library(root, ToneEmbedder()))
    db = sqlite3.connect(root / ".earshot" / "catalog.sqlite")
    db.execute("PRAGMA user_version = 99")
    db.close()
    with pytest.raises(LibraryError, match="newer"):
        Library.open(root)


def test_damaged_catalog_is_set_aside(tmp_path):
    root = make_library(tmp_path / "lib")
    emb = ToneEmbedder()
    drain(index_library(root, emb))
    cat = root / ".earshot" / "catalog.sqlite"
    for extra in ("-wal", "-shm"):
        Path(str(cat) + extra).unlink(missing_ok=True)
    cat.write_bytes(b"this is not a database" * 100)
    with Library.open(root) as lib:
        assert any("damaged catalog" in e for e in lib.events) and lib.stats().files == 0
    drain(index_library(root, emb))
    with Library.open(root) as lib:
        assert top(lib, emb, "440 Hz", k=1) == ["tone_440.wav"]
        assert_consistent(lib, emb.model_id)


# ------------------------------------------------------------------------------------ index file recovery


def test_missing_damaged_or_stale_index_file_is_rebuilt(tmp_path):
    root = make_library(tmp_path / "lib")
    emb = ToneEmbedder()
    drain(index_library(root, emb))
    with Library.open(root) as lib:
        path = lib.vectors.path(emb.model_id)
    old = path.read_bytes()

    path.unlink()
    with Library.open(root) as lib:
        assert top(lib, emb, "880 Hz", k=1) == ["tone_880.wav"]
        assert any("missing" in e for e in lib.events)
    assert path.is_file()

    path.write_bytes(b"\x00garbage" * 50)
    with Library.open(root) as lib:
        assert top(lib, emb, "220 Hz", k=1) == ["tone_220.wav"]
        assert any("damaged" in e for e in lib.events)

    # stale: an index from before two files were added and one deleted
    write(root / "added_300.wav", tone(300))
    write(root / "added_600.wav", tone(600))
    (root / "tone_1760.wav").unlink()
    drain(index_library(root, emb))
    path.write_bytes(old)
    with Library.open(root) as lib:
        assert top(lib, emb, "600 Hz", k=1) == ["added_600.wav"]
        assert "tone_1760.wav" not in top(lib, emb, "1760 Hz", k=10)
        assert any("+2 -1" in e for e in lib.events)
        assert_consistent(lib, emb.model_id)
    assert set(VectorIndex.load(path, emb.dim).ids().tolist()) != set()


def test_cancel_mid_job_leaves_a_consistent_library(tmp_path):
    root = tmp_path / "lib"
    for i in range(12):
        write(root / f"t{i:02d}.wav", tone(100 * (i + 2)))
    emb = ToneEmbedder(delay=0.01)
    job = index_library(root, emb, batch_size=1, workers=2, queue_size=1)
    for p in job:
        if p["files_done"] >= 4:
            break
    job.close()  # what the GUI runner does on Cancel; the conftest fixture checks no thread is left
    with Library.open(root) as lib:
        n = lib.stats().vectors[emb.model_id]
        assert 4 <= n < 12
        assert lib.stats().files == 12  # names first: every file was catalogued before any audio was read
        assert_consistent(lib, emb.model_id)
    emb.windows = 0
    report = drain(index_library(root, emb))
    assert len(report.embedded) == 12 - n and report.unchanged == n and emb.windows == 2 * (12 - n)


_KILL_SCRIPT = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("tlib", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
from app.services.library.indexer import index_library
emb = mod.ToneEmbedder(delay=0.03)
for p in index_library(sys.argv[2], emb, batch_size=1, checkpoint_seconds=0.2):
    print(p["files_done"], flush=True)
"""


def test_kill_9_mid_indexing_then_resume(tmp_path):
    root = tmp_path / "lib"
    n_files = 20
    for i in range(n_files):
        write(root / f"t{i:02d}.wav", tone(60 * 1.2 ** i))
    proc = subprocess.Popen([sys.executable, "-c", _KILL_SCRIPT, __file__, str(root)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[1])
    try:
        for line in proc.stdout:
            if int(line) >= 8:
                break
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    emb = ToneEmbedder()
    with Library.open(root) as lib:
        committed = lib.stats().vectors[emb.model_id]
        assert 8 <= committed < n_files
        assert lib.stats().files == n_files  # named in the first pass, before any audio
        assert_consistent(lib, emb.model_id)  # the index file (a checkpoint) is repaired from the catalog
    report = drain(index_library(root, emb))
    assert len(report.embedded) == n_files - committed and report.unchanged == committed
    with Library.open(root) as lib:
        assert lib.stats().files == n_files and lib.stats().vectors == {emb.model_id: n_files}
        assert_consistent(lib, emb.model_id)
        for i in (0, 9, 19):
            assert top(lib, emb, f"{60 * 1.2 ** i:.4f} Hz", k=1) == [f"t{i:02d}.wav"]


# ------------------------------------------------------------------------------------------ long files, ANN


def test_long_file_is_streamed_and_the_best_window_points_at_the_match(tmp_path, monkeypatch):
    root = tmp_path / "lib"
    rng = np.random.default_rng(0)
    audio = tone(300, 60.0, amp=0.1) + 0.01 * rng.standard_normal(60 * SR).astype(np.float32)
    audio[40 * SR:45 * SR] += tone(1500, 5.0)
    write(root / "long.wav", audio)
    write(root / "short_1500.wav", tone(1500, 0.5))
    read_whole = []
    monkeypatch.setattr(sf, "read", lambda *a, **k: read_whole.append(a) or pytest.fail("loaded whole"))
    emb = ToneEmbedder(window_seconds=1.0)
    report = drain(index_library(root, emb, batch_size=8, max_windows=0))  # every window (the default spreads 6)
    assert report.windows == 61 and read_whole == []
    with Library.open(root) as lib:
        hits = {h.rel_path: h for h in sound_search(lib, emb, "1500 Hz", k=2)}
        long_hit = hits["long.wav"]
        assert len(long_hit.window_scores) == 60
        assert 40.0 <= long_hit.best_window_start_s < 45.0
        assert max(long_hit.window_scores) > 0.9 > long_hit.score
        assert find_similar(lib, emb, "short_1500.wav", k=1)[0].best_window_start_s in {40.0, 41.0, 42.0, 43.0, 44.0}


def _clustered(n: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((50, dim))
    x = centres[rng.integers(0, 50, n)] + 0.7 * rng.standard_normal((n, dim))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture
def one_faiss_thread():
    import faiss

    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)  # OpenMP spinning on 2 busy cores is 5x slower than one thread
    yield
    faiss.omp_set_num_threads(before)


def test_hnsw_recall_against_exact_search(tmp_path, one_faiss_thread):
    dim, n, k = 32, 4000, 10
    x, q = _clustered(n, dim, 0), _clustered(200, dim, 1)
    ids = np.arange(1000, 1000 + n)
    exact = VectorIndex.build(dim, ids, x, IndexConfig(exact_limit=10**9))
    approx = VectorIndex.build(dim, ids, x, IndexConfig(exact_limit=1000))
    assert exact.kind == "exact" and approx.kind == "hnsw"
    _, truth = exact.search(q, k)
    # the exact index is exact
    brute = ids[np.argsort(-(q @ x.T), axis=1)[:, :k]]
    assert (truth == brute).mean() > 0.99
    _, got = approx.search(q, k)
    recall = np.mean([len(set(a) & set(b)) / k for a, b in zip(got.tolist(), truth.tolist(), strict=True)])
    assert recall >= 0.95, recall
    # removals (tombstones until compacted), a filter, and a save/load round trip
    gone = truth[:, 0][:20]
    approx.remove(gone)
    _, got = approx.search(q[:20], k)
    assert not np.isin(got, gone).any() and (got >= 0).all()
    allowed = ids[::7]
    _, got = approx.search(q, k, allowed=allowed)
    assert np.isin(got, allowed).all()
    approx.save(tmp_path / "i.faiss")
    back = VectorIndex.load(tmp_path / "i.faiss", dim, IndexConfig(exact_limit=1000))
    assert back.kind == "hnsw" and len(back) == n - 20 and not np.isin(back.ids(), gone).any()
    # growing past the limit switches an exact index to HNSW
    small = VectorIndex.build(dim, ids[:900], x[:900], IndexConfig(exact_limit=1000))
    assert small.kind == "exact"
    small.add(ids[900:1100], x[900:1100])
    assert small.kind == "hnsw" and len(small) == 1100


def test_library_search_through_hnsw(tmp_path, one_faiss_thread):
    root = tmp_path / "lib"
    for i in range(16):
        write(root / f"t{i:02d}.wav", tone(60 * 1.25 ** i, 0.5))
    emb = ToneEmbedder()
    cfg = IndexConfig(exact_limit=8)
    with Library.open(root, index_config=cfg) as lib:
        drain(index_library(lib, emb))
        assert lib.vectors.kind(emb.model_id) == "hnsw"
        for i in range(16):
            assert top(lib, emb, f"{60 * 1.25 ** i:.4f} Hz", k=1) == [f"t{i:02d}.wav"]
        (root / "t03.wav").unlink()
        drain(index_library(lib, emb))
        assert "t03.wav" not in top(lib, emb, f"{60 * 1.25 ** 3:.4f} Hz", k=16)
        assert len(top(lib, emb, "100 Hz", k=20, filters=SearchFilters(max_duration=1.0))) == 15
        assert_consistent(lib, emb.model_id)


# ------------------------------------------------------------------- nothing silently wrong (issue 14)


def many_tones(root: Path, n: int = 60, seconds: float = 4.0, base: float = 60.0) -> list[float]:
    """n files, each a tone 3 % above the previous one (distinct under a 256-band embedder)."""
    freqs = [base * 1.03 ** i for i in range(n)]
    for i, f in enumerate(freqs):
        write(root / f"t{i:02d}.wav", tone(f, seconds))
    return freqs


def best(lib: Library, emb: ToneEmbedder, freq: float) -> tuple[str, float]:
    hits = sound_search(lib, emb, f"{freq:.4f} Hz", k=3)
    return hits[0].rel_path, hits[0].score


@pytest.mark.parametrize("page", [0, 1, 40, 70])
def test_page_level_catalog_damage_is_repaired_keeping_good_vectors(tmp_path, page):
    """Issue 14.1: `yes garbage | head -c 4096 | dd of=catalog.sqlite bs=4096 seek=N conv=notrunc`."""
    root = tmp_path / "lib"
    freqs = many_tones(root)
    emb = ToneEmbedder(dim=256)
    drain(index_library(root, emb))
    cat = root / ".earshot" / "catalog.sqlite"
    assert not Path(f"{cat}-wal").exists() or Path(f"{cat}-wal").stat().st_size == 0
    assert cat.stat().st_size > 71 * 4096
    with open(cat, "r+b") as fh:
        fh.seek(page * 4096)
        fh.write((b"garbage\n" * 512)[:4096])
    with Library.open(root) as lib:  # no traceback: damage found on open, catalog rebuilt from what is intact
        assert any("damaged catalog" in e for e in lib.events), lib.events
        lib.stats()
        sound_search(lib, emb, "440 Hz", k=5)
        kept = lib.stats().vectors.get(emb.model_id, 0)
    assert list(root.glob(".earshot/catalog.sqlite.damaged-*"))
    report = drain(index_library(root, emb))
    assert len(report.embedded) == 60 - kept  # only what was lost is read again
    assert kept >= 50  # one damaged page costs a few files, not the library (rows past it are read off the pages)
    with Library.open(root) as lib:
        assert lib.events == []
        assert lib.stats().vectors[emb.model_id] == 60
        for i in (0, 17, 59):
            assert best(lib, emb, freqs[i])[0] == f"t{i:02d}.wav"
        assert_consistent(lib, emb.model_id)


def test_salvage_does_not_bring_back_deleted_rows(tmp_path):
    """Rows read off the pages skip the freelist: files removed from the catalog stay removed."""
    root = tmp_path / "lib"
    many_tones(root)
    emb = ToneEmbedder(dim=256)
    drain(index_library(root, emb))
    for i in range(45):
        (root / f"t{i:02d}.wav").unlink()
    cat = root / ".earshot" / "catalog.sqlite"
    # delete as a SQLite built without SECURE_DELETE would: emptied pages go to the freelist, cells intact
    db = sqlite3.connect(cat, isolation_level=None)
    db.execute("PRAGMA secure_delete = OFF")
    db.execute("PRAGMA foreign_keys = ON")
    db.execute("DELETE FROM files WHERE path < ?", (b"t45",))
    assert db.execute("PRAGMA freelist_count").fetchone()[0] > 10
    db.close()
    with open(cat, "r+b") as fh:
        fh.seek(4096)  # page 2: the files table's root
        fh.write((b"garbage\n" * 512)[:4096])
    with Library.open(root) as lib:
        assert any("damaged catalog" in e for e in lib.events)
        st = lib.stats()
        assert st.files <= 15 and st.vectors.get(emb.model_id, 0) <= 15
        assert_consistent(lib, emb.model_id)


def test_index_file_with_right_ids_but_wrong_vectors_is_rebuilt(tmp_path):
    """Issue 14.2: 20 kB of the FAISS file overwritten, or the index file of another library of the same size."""
    root, other = tmp_path / "lib", tmp_path / "other"
    freqs = many_tones(root)
    many_tones(other, base=75.0)
    emb = ToneEmbedder(dim=256)
    drain(index_library(root, emb))
    drain(index_library(other, emb))
    with Library.open(root) as lib:
        path = lib.vectors.path(emb.model_id)
    good = path.read_bytes()
    assert len(good) > 40_000

    damaged = bytearray(good)
    mid = len(good) // 2
    damaged[mid - 10_000:mid + 10_000] = (b"garbage\n" * 2500)[:20_000]
    for replacement in (bytes(damaged), (other / ".earshot" / path.name).read_bytes()):
        path.write_bytes(replacement)
        with Library.open(root) as lib:
            for i in (0, 23, 41, 59):
                name, score = best(lib, emb, freqs[i])
                assert name == f"t{i:02d}.wav" and -1.001 <= score <= 1.001
            assert any("differ from the catalog" in e for e in lib.events), lib.events
            assert_consistent(lib, emb.model_id)
        with Library.open(root) as lib:  # repaired on disk too
            assert lib.events == []


class NaNEmbedder(ToneEmbedder):
    """A broken checkpoint: every output is NaN."""

    def embed_windows(self, audio_windows: np.ndarray) -> np.ndarray:
        return np.full((len(audio_windows), self.dim), np.nan, dtype=np.float32)


def test_a_model_that_yields_nan_is_refused_and_other_models_keep_their_vectors(tmp_path):
    """Issue 14.4: `index LIB --model nan.safetensors` marked every file failed and dropped all vectors."""
    root = make_library(tmp_path / "lib")
    emb, nan = ToneEmbedder(), NaNEmbedder(model_id="nan-model")
    drain(index_library(root, emb))
    with pytest.raises(LibraryError, match="broken") as err:
        drain(index_library(root, nan))
    assert "nan-model" in str(err.value) and "NaN" in str(err.value)
    with Library.open(root) as lib:
        assert lib.files.failed() == []
        assert lib.stats().vectors[emb.model_id] == len(FREQS)
        assert top(lib, emb, "440 Hz", k=1) == ["tone_440.wav"]
        assert "NaN" in lib.vectors.model_errors()["nan-model"]
        with pytest.raises(LibraryError, match="broken"):  # no scores from it either
            sound_search(lib, nan, "440 Hz")
    report = drain(index_library(root, emb))  # plain index with the good model: nothing to redo
    assert report.unchanged == len(FREQS) and report.embedded == [] and report.failed == []


def test_unlistable_subfolder_keeps_its_rows_hidden_until_it_is_back(tmp_path, monkeypatch):
    """Issue 14.5: a NAS briefly away must not cost a re-index of its subtree."""
    root = make_library(tmp_path / "lib")
    write(root / "nas" / "deep" / "n_300.wav", tone(300))
    write(root / "nas" / "n_3000.wav", tone(3000))
    emb = ToneEmbedder()
    drain(index_library(root, emb))
    away = str(root / "nas")
    real_scandir = os.scandir

    def scandir(path="."):
        if os.fspath(path) == away:
            raise OSError(112, "Host is down", away)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    report = drain(index_library(root, emb))
    assert report.removed == 0 and report.unavailable == 2
    assert any("cannot list folder" in e for e in report.scan_errors)
    with Library.open(root) as lib:
        assert lib.stats().files == len(FREQS) + 2 and lib.stats().unavailable == 2
        assert not any(p.startswith("nas/") for p in top(lib, emb, "300 Hz", k=10))
    monkeypatch.setattr(os, "scandir", real_scandir)
    report = drain(index_library(root, emb))
    assert report.embedded == [] and report.unchanged == len(FREQS) + 2 and report.unavailable == 0
    with Library.open(root) as lib:
        assert top(lib, emb, "3000 Hz", k=1) == ["nas/n_3000.wav"]
        assert top(lib, emb, "300 Hz", k=1) == ["nas/deep/n_300.wav"]
        assert_consistent(lib, emb.model_id)


def test_disk_full_while_indexing_is_reported_and_resumable(tmp_path):
    """Issue 14.6: SQLITE_FULL at a write is a DiskFullError that says so; nothing is lost; a re-run resumes."""
    root = make_library(tmp_path / "lib")
    emb = ToneEmbedder(dim=256)
    drain(index_library(root, emb))
    for i in range(30):
        write(root / "more" / f"m{i:02d}.wav", tone(100 + 97 * i, 3.0))
    with Library.open(root) as lib:
        pages = lib.db.execute("PRAGMA page_count").fetchone()[0]
        lib.db.execute(f"PRAGMA max_page_count = {pages + 3}")  # the disk fills up a few files in
        with pytest.raises(LibraryError, match="disk holding the catalog is full") as err:
            drain(index_library(lib, emb))
        assert "rollback" not in str(err.value)
        done = lib.stats().vectors[emb.model_id]
    assert len(FREQS) <= done < len(FREQS) + 30
    report = drain(index_library(root, emb))  # space again: carries on where it stopped
    assert len(report.embedded) == len(FREQS) + 30 - done and report.failed == []
    with Library.open(root) as lib:
        assert top(lib, emb, "440 Hz", k=1) == ["tone_440.wav"]
        assert top(lib, emb, f"{100 + 97 * 29} Hz", k=1) == ["more/m29.wav"]
        assert_consistent(lib, emb.model_id)


def test_sqlite_rolling_back_by_itself_does_not_hide_the_error(tmp_path):
    """Issue 14.6: after SQLITE_FULL SQLite may have rolled back already; ROLLBACK then said "cannot rollback"."""
    db = sqlite3.connect(tmp_path / "x.sqlite", isolation_level=None)
    db.execute("CREATE TABLE t(x)")
    with pytest.raises(sqlite3.OperationalError, match="disk is full"), C.transaction(db):
        db.execute("INSERT INTO t VALUES (1)")
        db.execute("ROLLBACK")  # what SQLite does on its own after some errors
        raise sqlite3.OperationalError("database or disk is full")
    assert not db.in_transaction and db.execute("SELECT count(*) FROM t").fetchone()[0] == 0


def test_paths_longer_than_the_system_limit_are_scan_errors(tmp_path):
    """Issue 14.8: 600 nested folders; the file at the bottom cannot be opened by path: say so."""
    root = make_library(tmp_path / "lib")
    fd = os.open(root, os.O_RDONLY)
    try:
        for _ in range(600):
            os.mkdir("folder0001", dir_fd=fd)
            nxt = os.open("folder0001", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        wav = (root / "tone_440.wav").read_bytes()
        out = os.open("deep.wav", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(out, wav)
        os.close(out)
    finally:
        os.close(fd)
    scan = scan_folder(root)
    assert sorted(f.rel for f in scan.files) == sorted(f"tone_{f}.wav" for f in FREQS)
    assert len(scan.errors) == 1 and "longer than the system allows" in scan.errors[0]
    report = drain(index_library(root, ToneEmbedder()))
    assert len(report.embedded) == len(FREQS) and len(report.scan_errors) == 1


def test_rehash_finds_an_edit_that_kept_size_and_mtime(tmp_path):
    """Issue 14.11: `earshot index --rehash`."""
    root = make_library(tmp_path / "lib")
    emb = ToneEmbedder()
    drain(index_library(root, emb))
    path = root / "tone_440.wav"
    st = path.stat()
    write(path, tone(3000))  # same length, same format: same size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size
    assert drain(index_library(root, emb)).embedded == []  # size and mtime: nothing to see
    report = drain(index_library(root, emb, rehash=True))
    assert report.embedded == ["tone_440.wav"] and report.touched == len(FREQS) - 1
    with Library.open(root) as lib:
        assert top(lib, emb, "3000 Hz", k=1) == ["tone_440.wav"]
        assert_consistent(lib, emb.model_id)


def test_search_k_is_validated_and_capped_at_the_library_size(tmp_path):
    """Issue 14.9, library side: k = 10**12 returns every file at once; k < 1 is an error, not []."""
    root = make_library(tmp_path / "lib")
    emb = ToneEmbedder()
    drain(index_library(root, emb))
    with Library.open(root) as lib:
        assert len(sound_search(lib, emb, "440 Hz", k=10**12)) == len(FREQS)
        assert len(find_similar(lib, emb, "tone_440.wav", k=10**12)) == len(FREQS) - 1
        for bad in (0, -1):
            with pytest.raises(ValueError, match="at least 1"):
                sound_search(lib, emb, "440 Hz", k=bad)


def test_v1_catalog_is_migrated_keeping_its_vectors(tmp_path):
    """A catalog written before version 2 (no availability, model errors or index checksums) keeps its rows."""
    root = make_library(tmp_path / "lib")
    emb = ToneEmbedder()
    drain(index_library(root, emb))
    cat = root / ".earshot" / "catalog.sqlite"
    db = sqlite3.connect(cat)
    db.execute("ALTER TABLE vectors DROP COLUMN categories")  # version 7 -> 6
    for stmt in [f"DROP TRIGGER {t}_words_{e}" for t in ("texts", "user_tags") for e in ("insert", "update", "delete")]\
            + ["DROP TABLE counters", "ALTER TABLE index_files DROP COLUMN stat"]:
        db.execute(stmt)  # version 5 -> 4
    db.execute("DROP TABLE mount_points")  # version 4 -> 3
    for stmt in ("DROP TRIGGER files_text_gone", "DROP TABLE text_fts", "DROP TABLE texts", "DROP TABLE user_tags",
                 "DROP TABLE favourites", "DROP INDEX files_format", "DROP INDEX files_unavailable",
                 "ALTER TABLE files DROP COLUMN format"):
        db.execute(stmt)  # version 3 -> 2
    db.execute("DROP TABLE index_files")
    db.execute("ALTER TABLE files DROP COLUMN available")
    db.execute("ALTER TABLE models DROP COLUMN error")
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    with Library.open(root) as lib:
        assert lib.db.execute("PRAGMA user_version").fetchone()[0] == C.SCHEMA_VERSION == 7
        assert top(lib, emb, "880 Hz", k=1) == ["tone_880.wav"]  # no checksum yet: vectors compared, kept
        assert not any("rebuilding" in e for e in lib.events)
    assert drain(index_library(root, emb)).unchanged == len(FREQS)


# --------------------------------------------------------------------------------- the `index` command


def write_retrieval_checkpoint(path: Path, nan: bool = False) -> str:
    """A tiny real retrieval checkpoint (PaSST-tiny + text-tiny); nan: every float tensor NaN, same metadata."""
    import torch

    from core.checkpoints import save_checkpoint
    from models.frontends import PasstMel, frontend_to_dict
    from models.passt import passt_tiny
    from models.retrieval import RetrievalConfig, RetrievalModel
    from models.text import text_tiny

    torch.manual_seed(0)
    audio = passt_tiny(window_seconds=1.0, input_tdim=100, patchout=(0, 0))
    model = RetrievalModel(RetrievalConfig(audio=audio, text=text_tiny(), embed_dim=16)).eval()
    if nan:
        with torch.no_grad():
            for p in model.state_dict().values():
                if p.is_floating_point():
                    p.fill_(float("nan"))
    return str(save_checkpoint(path, "retrieval", model, model.config, features=frontend_to_dict(PasstMel())))


def test_cli_index_refuses_a_nan_model_and_rehashes_on_request(tmp_path, capsys):
    from app.cli.main import main

    root = make_library(tmp_path / "lib")
    good = write_retrieval_checkpoint(tmp_path / "good.safetensors")
    nan = write_retrieval_checkpoint(tmp_path / "nan.safetensors", nan=True)
    assert main(["index", str(root), "--model", good, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["embedded"] == len(FREQS)

    assert main(["index", str(root), "--model", nan]) == 2  # a message, not a traceback
    err = capsys.readouterr().err
    assert "is broken" in err and "NaN" in err and "Traceback" not in err
    assert main(["index", str(root), "--model", good, "--json"]) == 0  # the good model lost nothing
    summary = json.loads(capsys.readouterr().out)
    assert summary["unchanged"] == len(FREQS) and summary["failed"] == 0 and summary["embedded"] == 0
    assert main(["search", "a tone", "--library", str(root), "--model", good, "-k", "2", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 2

    path = root / "tone_440.wav"
    st = path.stat()
    write(path, tone(3000))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert main(["index", str(root), "--model", good, "--rehash", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["embedded"] == 1 and summary["touched"] == len(FREQS) - 1


def test_a_path_typed_from_the_working_folder_names_the_library_file(tmp_path, monkeypatch):
    root = make_library(tmp_path / "lib")
    monkeypatch.chdir(tmp_path)
    with Library.open(root) as lib:
        assert lib.files.key("lib/tone_440.wav") == b"tone_440.wav"  # `tags add lib/x.wav --library lib`
        assert lib.files.key("tone_440.wav") == b"tone_440.wav"
        assert lib.files.key(root / "tone_440.wav") == b"tone_440.wav"

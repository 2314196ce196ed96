"""VectorIndex tiers (exact / HNSW / IVF) with small limits: choice by size, recall against exact search,
add/remove/save/load per tier, rebuilds across tier boundaries, and files written by the previous format."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import faiss
import numpy as np
import pytest

from app.services.library.vector_index import IndexConfig, IndexFileError, VectorIndex, ivf_nlist, ivf_nprobe

DIM, K = 32, 10
SMALL = IndexConfig(exact_limit=200, ivf_limit=2000)
EXACT = IndexConfig(exact_limit=10**9, ivf_limit=10**9)


@pytest.fixture(autouse=True)
def one_faiss_thread() -> Iterator[None]:
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)  # OpenMP spinning on 2 busy cores is much slower than one thread
    yield
    faiss.omp_set_num_threads(before)


def clustered(n: int, seed: int, n_centres: int = 40) -> np.ndarray:
    """(n, DIM) unit vectors around fixed random centres (the same centres for every seed)."""
    centres = np.random.default_rng(1234).standard_normal((n_centres, DIM))
    rng = np.random.default_rng(seed)
    x = centres[rng.integers(0, n_centres, n)] + 0.7 * rng.standard_normal((n, DIM))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def recall(got: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / truth.shape[1] for a, b in zip(got.tolist(), truth.tolist(),
                                                                              strict=True)]))


def brute_top(ids: np.ndarray, x: np.ndarray, q: np.ndarray, k: int = K) -> np.ndarray:
    return ids[np.argsort(-(q @ x.T), axis=1, kind="stable")[:, :k]]


@pytest.mark.parametrize(("n", "kind"), [(150, "exact"), (200, "exact"), (201, "hnsw"), (2000, "hnsw"),
                                         (2001, "ivf"), (3000, "ivf")])
def test_tier_is_chosen_by_size(n: int, kind: str) -> None:
    vi = VectorIndex.build(DIM, np.arange(n), clustered(n, 0), SMALL)
    assert vi.kind == kind and len(vi) == n
    assert vi.is_hnsw == (kind == "hnsw") and vi.is_ivf == (kind == "ivf")
    assert np.array_equal(np.sort(vi.ids()), np.arange(n))


def test_nlist_and_nprobe_rules() -> None:
    assert ivf_nlist(300_000) == 2048 and ivf_nlist(1_000_000) == 2048 and ivf_nlist(4_000_000) == 4096
    assert ivf_nlist(3000) == 64  # capped: at least 39 training points per list
    assert ivf_nprobe(2048) == 64 and ivf_nprobe(64) == 16 and ivf_nprobe(8) == 8


def test_ivf_recall_against_exact() -> None:
    n = 4000
    x, q = clustered(n, 0), clustered(200, 1)
    ids = np.arange(10_000, 10_000 + n)
    exact = VectorIndex.build(DIM, ids, x, EXACT)
    ivf = VectorIndex.build(DIM, ids, x, SMALL)
    assert exact.kind == "exact" and ivf.kind == "ivf"
    assert ivf.index.nlist == ivf_nlist(n) and ivf.index.nprobe == ivf_nprobe(ivf_nlist(n))
    _, truth = exact.search(q, K)
    assert recall(truth, brute_top(ids, x, q)) > 0.99
    scores, got = ivf.search(q, K)
    assert recall(got, truth) >= 0.95
    assert (np.diff(scores, axis=1) <= 1e-6).all()  # best first
    # a filter: few allowed ids are searched exhaustively, many through IVF with a selector
    for allowed in (ids[::97], ids[::3]):
        _, got = ivf.search(q, K, allowed=allowed)
        _, want = exact.search(q, K, allowed=allowed)
        assert np.isin(got[got >= 0], allowed).all() and recall(got, want) >= 0.95


def test_ivf_large_k_fills_every_slot() -> None:
    n = 2500
    vi = VectorIndex.build(DIM, np.arange(n), clustered(n, 0), SMALL)
    _, got = vi.search(clustered(3, 1), 1000)
    assert (got >= 0).all() and all(len(set(row)) == 1000 for row in got.tolist())


@pytest.mark.parametrize(("n", "kind"), [(150, "exact"), (1500, "hnsw"), (3000, "ivf")])
def test_add_remove_save_load_round_trip(tmp_path: Path, n: int, kind: str) -> None:
    x, q = clustered(n + 100, 0), clustered(50, 1)
    ids = np.arange(n + 100) * 7 + 3
    vi = VectorIndex.build(DIM, ids[:n], x[:n], SMALL)
    assert vi.kind == kind
    vi.add(ids[n:n + 50], x[n:n + 50])  # grows without changing tier
    assert vi.kind == kind and len(vi) == n + 50
    _, top = vi.search(q, K)
    gone = np.unique(top[:, 0])
    assert vi.remove(np.concatenate([gone, gone, [-5]])) == len(gone)  # duplicates and absent ids ignored
    assert len(vi) == n + 50 - len(gone)
    _, got = vi.search(q, K)
    assert not np.isin(got, gone).any() and (got >= 0).all()
    vi.save(tmp_path / "i.faiss")
    back = VectorIndex.load(tmp_path / "i.faiss", DIM, SMALL)
    assert back.kind == kind and len(back) == len(vi)
    assert set(back.ids().tolist()) == set(ids[:n + 50].tolist()) - set(gone.tolist())
    live = np.setdiff1d(ids[:n + 50], gone)
    order = np.argsort(back.ids())
    assert np.array_equal(back.ids()[order], live)
    assert np.allclose(back.vectors()[order], x[np.searchsorted(ids, live)], atol=1e-6)
    assert np.array_equal(back.search(q, K)[1], vi.search(q, K)[1])
    if kind == "ivf":
        assert (back.index.nlist, back.index.nprobe) == (vi.index.nlist, vi.index.nprobe)
    # the loaded index keeps working: re-add the removed ids
    back.add(gone, x[np.searchsorted(ids, gone)])
    assert len(back) == n + 50 and np.array_equal(np.sort(back.ids()), ids[:n + 50])


def test_ivf_add_replaces_an_existing_id() -> None:
    n = 2500
    x = clustered(n, 0)
    vi = VectorIndex.build(DIM, np.arange(n), x, SMALL)
    vi.add([5], x[6:7])
    assert len(vi) == n and len(np.unique(vi.ids())) == n
    assert np.allclose(vi.index.reconstruct(5), x[6])


def test_growth_rebuilds_into_the_next_tier() -> None:
    x = clustered(5200, 0)
    ids = np.arange(len(x))
    vi = VectorIndex.build(DIM, ids[:190], x[:190], SMALL)
    assert vi.kind == "exact"
    vi.add(ids[190:210], x[190:210])
    assert vi.kind == "hnsw" and len(vi) == 210
    vi.remove(ids[:5])  # tombstones carry over into the rebuild
    for s in range(210, 2110, 100):  # one batch at a time, as the library adds files
        vi.add(ids[s:s + 100], x[s:s + 100])
        assert vi.kind == ("ivf" if len(vi) > 2000 else "hnsw")
    assert vi.kind == "ivf" and len(vi) == 2105
    assert np.array_equal(np.sort(vi.ids()), ids[5:2110])
    nlist = vi.index.nlist
    vi.add(ids[2110:2600], x[2110:2600])  # more vectors go into the trained lists
    assert vi.index.nlist == nlist and len(vi) == 2595
    vi.add(ids[2600:], x[2600:])  # ~2.5x the vectors: the sizing rule (capped here) now wants 4x the lists
    assert vi.kind == "ivf" and vi.index.nlist == 4 * nlist and len(vi) == 5195
    q = clustered(100, 1)
    assert recall(vi.search(q, K)[1], brute_top(ids[5:], x[5:], q)) >= 0.95


def test_shrinking_ivf_moves_down_when_compacted(tmp_path: Path) -> None:
    n = 2500
    x = clustered(n, 0)
    vi = VectorIndex.build(DIM, np.arange(n), x, SMALL)
    vi.remove(np.arange(1200))  # 1300 left: below the limit, but above half of it
    vi.save(tmp_path / "i.faiss")
    assert vi.kind == "ivf"
    vi.remove(np.arange(1200, 1600))  # 900 left: below half the limit
    vi.save(tmp_path / "i.faiss")
    assert vi.kind == "hnsw" and VectorIndex.load(tmp_path / "i.faiss", DIM, SMALL).kind == "hnsw"
    assert np.array_equal(np.sort(vi.ids()), np.arange(1600, n))


def test_explicit_nlist_and_nprobe(tmp_path: Path) -> None:
    cfg = IndexConfig(exact_limit=200, ivf_limit=2000, ivf_nlist=32, ivf_nprobe=4)
    vi = VectorIndex.build(DIM, np.arange(2500), clustered(2500, 0), cfg)
    assert (vi.index.nlist, vi.index.nprobe) == (32, 4)
    vi.save(tmp_path / "i.faiss")
    assert VectorIndex.load(tmp_path / "i.faiss", DIM, SMALL).index.nprobe == 4  # the file's value
    assert VectorIndex.load(tmp_path / "i.faiss", DIM,
                            IndexConfig(exact_limit=200, ivf_limit=2000, ivf_nprobe=8)).index.nprobe == 8


@pytest.mark.parametrize("hnsw", [False, True])
def test_previous_format_files_still_load(tmp_path: Path, hnsw: bool) -> None:
    """Files as the two-tier VectorIndex wrote them: IndexIDMap2 over IndexFlatIP or IndexHNSWFlat."""
    n = 300
    x, ids = clustered(n, 0), np.arange(n) + 100
    inner = faiss.IndexHNSWFlat(DIM, 32, faiss.METRIC_INNER_PRODUCT) if hnsw else faiss.IndexFlatIP(DIM)
    old = faiss.IndexIDMap2(inner)
    old.add_with_ids(x, ids)
    (tmp_path / "old.faiss").write_bytes(faiss.serialize_index(old).tobytes())
    vi = VectorIndex.load(tmp_path / "old.faiss", DIM, SMALL)
    assert vi.kind == ("hnsw" if hnsw else "exact") and len(vi) == n
    q = clustered(20, 1)
    assert recall(vi.search(q, K)[1], brute_top(ids, x, q)) >= 0.95
    vi.remove(ids[:10])
    vi.add(ids[:10], x[:10])
    assert len(vi) == n


def test_bad_files_raise_index_file_error(tmp_path: Path) -> None:
    vi = VectorIndex.build(DIM, np.arange(2500), clustered(2500, 0), SMALL)
    vi.save(tmp_path / "i.faiss")
    with pytest.raises(IndexFileError):
        VectorIndex.load(tmp_path / "i.faiss", DIM + 1, SMALL)  # wrong dimension
    (tmp_path / "cut.faiss").write_bytes((tmp_path / "i.faiss").read_bytes()[:1000])
    with pytest.raises(IndexFileError):
        VectorIndex.load(tmp_path / "cut.faiss", DIM, SMALL)
    l2 = faiss.IndexIVFFlat(faiss.IndexFlatL2(DIM), DIM, 8, faiss.METRIC_L2)  # not what VectorIndex writes
    l2.train(clustered(500, 0))
    (tmp_path / "l2.faiss").write_bytes(faiss.serialize_index(l2).tobytes())
    with pytest.raises(IndexFileError):
        VectorIndex.load(tmp_path / "l2.faiss", DIM, SMALL)
    with pytest.raises(IndexFileError):
        VectorIndex.load(tmp_path / "missing.faiss", DIM, SMALL)


def test_an_ivf_file_is_mapped_searched_at_once_and_copied_into_memory(tmp_path: Path) -> None:
    """Issue 25: a 1M-file index took seconds to read. Mapped, it is searched at once; a copy in memory replaces
    the mapping in the background (searches on it are faster), or before a change (the mapping is read-only)."""
    import threading

    n = 3000
    x, q = clustered(n, 0), clustered(20, 1)
    vi = VectorIndex.build(DIM, np.arange(n), x, SMALL)
    path = tmp_path / "i.faiss"
    vi.save(path)
    back = VectorIndex.load(path, DIM, SMALL)
    assert back._mapped and back.kind == "ivf"
    assert np.array_equal(back.search(q, K)[1], vi.search(q, K)[1])
    lock = threading.RLock()
    with lock:  # a search holds the lock: the copy is made meanwhile, swapped in after
        back.copy_in_background(lock)
        for _ in range(200):
            if back._copied is not None:
                break
            threading.Event().wait(0.01)
        assert back._mapped and np.array_equal(back.search(q, K)[1], vi.search(q, K)[1])
    for _ in range(200):
        if not back._mapped:
            break
        threading.Event().wait(0.01)
    assert not back._mapped and np.array_equal(back.search(q, K)[1], vi.search(q, K)[1])

    again = VectorIndex.load(path, DIM, SMALL)  # a change before any copy: copied first
    assert again._mapped and again.remove([0, 1, 2]) == 3 and not again._mapped
    again.add([0], x[:1])
    again.save(path)  # replaces the file it was mapped from
    third = VectorIndex.load(path, DIM, SMALL)
    assert len(third) == n - 2 and set(third.ids().tolist()) == set(range(n)) - {1, 2}
    assert np.allclose(third.reconstruct([0]), x[:1], atol=1e-6)


def test_an_index_under_a_name_c_cannot_take_is_streamed(tmp_path: Path, monkeypatch) -> None:
    import os

    n = 2500
    x = clustered(n, 0)
    vi = VectorIndex.build(DIM, np.arange(n), x, SMALL)
    odd = Path(os.fsdecode(bytes(tmp_path) + b"/caf\xe9.faiss"))  # not UTF-8: a surrogate escape in Python
    vi.save(odd)
    flags: list[object] = []
    real = faiss.read_index
    monkeypatch.setattr(faiss, "read_index", lambda f, *a: flags.append(type(f).__name__) or real(f, *a))
    back = VectorIndex.load(odd, DIM, SMALL)
    assert flags == ["PyCallbackIOReader"]
    assert len(back) == n and np.allclose(back.reconstruct([5]), x[5:6], atol=1e-6)

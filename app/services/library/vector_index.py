"""A FAISS inner-product index over int64 ids that picks exact or approximate search by size.

Three tiers by the number of vectors N (L2-normalised, so inner product = cosine): exact (`IndexFlatIP`) up to
`exact_limit` (50k), an HNSW graph up to `ivf_limit` (300k), then IVF-Flat with ~4*sqrt(N) lists, trained on a
seeded sample, with a direct map so ids can be removed in place. A growing index is rebuilt into the next tier
when it passes a limit; a shrinking one moves down when compacted. The index is a cache: the SQLite catalog is
the source of truth and rebuilds it when it is missing, damaged or out of date. Files are written atomically
through Python's own file I/O (`faiss.serialize_index`) and carry their own parameters, so a file loads as
written.
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np

from core.files import atomic_path

EXACT, HNSW, IVF = "exact", "hnsw", "ivf"
_RANK = {EXACT: 0, HNSW: 1, IVF: 2}
MIN_TRAIN_PER_LIST = 39  # FAISS k-means warns below this many training points per centroid
READ_CHUNK = 1 << 22  # bytes per read while loading an index file
IVF_FOURCC = b"IwFl"  # how FAISS files of an IndexIVFFlat begin
TRAIN_PER_LIST = 64  # training sample = 64 points per list: enough for stable centroids, fast on 2 cores


@dataclass
class IndexConfig:
    exact_limit: int = 50_000  # above this many vectors, switch to HNSW
    hnsw_m: int = 32  # graph degree
    ef_construction: int = 80
    ef_search: int = 128  # raised to 2k for larger k
    # Above this, IVF-Flat instead of HNSW. An HNSW graph cannot delete (removals are tombstones, and each save
    # after a removal rebuilds the graph) and builds at ~100k vectors/min on 2 cores (bench: 62 s at 100k, over
    # 10 min at 1M), while IVF builds 1M in ~30 s (k-means on a sample + one assignment pass) and removes in
    # place. Up to 300k a graph rebuild stays at a few minutes and needs no training; beyond, IVF.
    ivf_limit: int = 300_000
    ivf_nlist: int = 0  # IVF lists; 0 = `ivf_nlist(N)` at build time (and retrain when N outgrows it)
    ivf_nprobe: int = 0  # lists scanned per query; 0 = `ivf_nprobe(nlist)` (a file keeps the value it was built with)
    seed: int = 0  # IVF training sample and k-means


class IndexFileError(Exception):
    """An index file that cannot be read (missing, damaged, wrong kind)."""


def ivf_nlist(n: int) -> int:
    """4*sqrt(N) lists rounded down to a power of two (2048 at 300k..1M), at least MIN_TRAIN_PER_LIST vectors each.

    FAISS's guideline is 4..16*sqrt(N); rounding down keeps the k-means training and the add pass (both cost
    ~N*nlist*D) under a minute at 1M on 2 cores (4096 lists took 2.5 min to train), while lists stay short
    (~500 vectors at 1M).
    """
    if n <= 0:
        return 1
    nlist = 2 ** int(math.log2(max(1.0, 4 * math.sqrt(n))))
    cap = 2 ** int(math.log2(max(1, n // MIN_TRAIN_PER_LIST)))
    return int(max(1, min(nlist, cap, 65_536)))


def ivf_nprobe(nlist: int) -> int:
    """Scan 1/32 of the lists (at least 16): recall@10 >= 0.95 on the search benchmark's clustered data at 1M
    (bench/bench_search.py measures it), ~3% of the vectors per query."""
    return int(min(nlist, max(16, nlist // 32)))


def _as_ids(ids: np.ndarray | list[int]) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(ids, dtype=np.int64).reshape(-1))


def _as_vectors(vectors: np.ndarray, dim: int) -> np.ndarray:
    x = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32).reshape(-1, dim))  # (N, D)
    return x


class VectorIndex:
    """Exact, HNSW or IVF inner-product search over vectors with stable int64 ids."""

    def __init__(self, dim: int, config: IndexConfig | None = None) -> None:
        self.dim = dim
        self.config = config or IndexConfig()
        self._kind = EXACT
        self._tombstones: set[int] = set()  # removed from an HNSW graph, not yet rebuilt away
        self._ivf_ids: np.ndarray | None = None  # cached ids of an IVF index (reading them walks every list)
        self._mapped = False  # IVF lists still a read-only memory map of the file (`load`, until copied)
        self._copy_lock = threading.Lock()  # a copy of the mapped lists in progress
        self._copied: faiss.ArrayInvertedLists | None = None  # the copy made in the background, not swapped in
        self._copier: threading.Thread | None = None
        self._abandoned = False
        self.index: faiss.Index = self._new_idmap(hnsw=False)

    # ------------------------------------------------------------------------------------------- building

    def _tier(self, n: int) -> str:
        if n > self.config.ivf_limit:
            return IVF
        return HNSW if n > self.config.exact_limit else EXACT

    def _new_idmap(self, hnsw: bool) -> faiss.IndexIDMap2:
        if hnsw:
            inner = faiss.IndexHNSWFlat(self.dim, self.config.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            inner.hnsw.efConstruction = self.config.ef_construction
        else:
            inner = faiss.IndexFlatIP(self.dim)
        return faiss.IndexIDMap2(inner)

    def _new_ivf(self, vecs: np.ndarray) -> faiss.IndexIVFFlat:
        """An IVF-Flat index trained on a seeded sample of `vecs` (N, D); empty."""
        n = len(vecs)
        nlist = max(1, min(self.config.ivf_nlist or ivf_nlist(n), n))
        quantizer = faiss.IndexFlatIP(self.dim)
        ivf = faiss.IndexIVFFlat(quantizer, self.dim, nlist, faiss.METRIC_INNER_PRODUCT)
        quantizer.this.disown()
        ivf.own_fields = True
        ivf.cp.spherical = True  # unit vectors: centroids on the sphere, assignment by inner product
        ivf.cp.niter = 10  # k-means is most of the build time on 2 cores; later iterations barely move centroids
        ivf.cp.seed = self.config.seed
        ivf.cp.min_points_per_centroid = min(MIN_TRAIN_PER_LIST, n // nlist)  # tiny (test) indexes: no warning
        take = min(n, TRAIN_PER_LIST * nlist)
        sample = np.sort(np.random.default_rng(self.config.seed).choice(n, take, replace=False)) if take < n else None
        ivf.train(np.ascontiguousarray(vecs[sample]) if sample is not None else vecs)
        ivf.nprobe = self.config.ivf_nprobe or ivf_nprobe(nlist)
        ivf.set_direct_map_type(faiss.DirectMap.Hashtable)  # remove_ids and reconstruct by id
        return ivf

    def _fill(self, kind: str, ids: np.ndarray, vecs: np.ndarray) -> None:
        """Replace the index with a fresh one of `kind` holding (ids, vecs). (N,), (N, D)"""
        if kind == IVF and not len(ids):
            kind = EXACT  # nothing to train on
        self._kind, self._tombstones, self._ivf_ids, self._mapped = kind, set(), None, False
        self.index = self._new_ivf(vecs) if kind == IVF else self._new_idmap(hnsw=kind == HNSW)
        if len(ids):
            self.index.add_with_ids(vecs, ids)

    @classmethod
    def build(cls, dim: int, ids: np.ndarray, vectors: np.ndarray, config: IndexConfig | None = None
              ) -> VectorIndex:
        """A fresh index over (ids, vectors), exact, HNSW or IVF by count."""
        vi = cls(dim, config)
        ids = _as_ids(ids)
        vi._fill(vi._tier(len(ids)), ids, _as_vectors(vectors, dim))
        return vi

    @property
    def is_hnsw(self) -> bool:
        return self._kind == HNSW

    @property
    def is_ivf(self) -> bool:
        return self._kind == IVF

    @property
    def kind(self) -> str:
        """'exact', 'hnsw' or 'ivf'."""
        return self._kind

    def __len__(self) -> int:
        return int(self.index.ntotal) - len(self._tombstones)

    def _raw_ids(self) -> np.ndarray:
        if self._kind != IVF:
            return faiss.vector_to_array(self.index.id_map).astype(np.int64)
        if self._ivf_ids is None:
            self._ivf_ids = self._ivf_lists(codes=False)[0]
        return self._ivf_ids

    def _ivf_lists(self, codes: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """Ids (and vectors) of an IVF index, list by list. (N,), (N, D)"""
        inv = self.index.invlists
        ids, vecs = [np.zeros(0, np.int64)], [np.zeros((0, self.dim), np.float32)]
        for lst in range(inv.nlist):
            n = inv.list_size(lst)
            if not n:
                continue
            p = inv.get_ids(lst)
            ids.append(faiss.rev_swig_ptr(p, n).astype(np.int64))
            inv.release_ids(lst, p)
            if codes:
                c = inv.get_codes(lst)
                vecs.append(faiss.rev_swig_ptr(c, n * inv.code_size).view(np.float32).reshape(n, self.dim).copy())
                inv.release_codes(lst, c)
        return np.concatenate(ids), (np.concatenate(vecs) if codes else None)

    def _live(self) -> tuple[np.ndarray, np.ndarray]:
        """Ids and vectors that are not tombstoned, in storage order. (N,), (N, D)"""
        if self._kind == IVF:
            ids, vecs = self._ivf_lists(codes=True)
            return ids, (vecs if vecs is not None else np.zeros((0, self.dim), np.float32))
        ids = self._raw_ids()
        vecs = (self.index.index.reconstruct_n(0, len(ids)) if len(ids)
                else np.zeros((0, self.dim), dtype=np.float32))
        if self._tombstones:
            keep = ~np.isin(ids, np.fromiter(self._tombstones, np.int64))
            ids, vecs = ids[keep], vecs[keep]
        return ids, vecs

    def ids(self) -> np.ndarray:
        """All live ids, in storage order. (N,) int64"""
        ids = self._raw_ids()
        if self._tombstones:
            ids = ids[~np.isin(ids, np.fromiter(self._tombstones, np.int64))]
        return ids.copy() if ids is self._ivf_ids else ids

    def vectors(self) -> np.ndarray:
        """All live vectors, in the order of `ids()`. (N, D)"""
        return self._live()[1]

    def reconstruct(self, ids: list[int]) -> np.ndarray:
        """The stored vectors of `ids`, by id lookup (M, D); FAISS raises RuntimeError for an id it lacks."""
        return np.stack([self.index.reconstruct(int(i)) for i in ids])

    def add(self, ids: np.ndarray | list[int], vectors: np.ndarray) -> None:
        ids = _as_ids(ids)
        if not len(ids):
            return
        if self._tombstones & set(ids.tolist()):
            self.compact()  # an id coming back: drop its dead copy first
        if self._kind == IVF:
            self._into_memory()
            self.index.remove_ids(faiss.IDSelectorArray(ids))  # the hash map keeps one entry per id: replace
            self._ivf_ids = None
        self.index.add_with_ids(_as_vectors(vectors, self.dim), ids)
        tier = self._tier(len(self))
        if _RANK[tier] > _RANK[self._kind] or (self._kind == IVF and self._outgrown()):
            self._rebuild(tier)

    def _outgrown(self) -> bool:
        """An auto-sized IVF index that N has outgrown: the sizing rule now gives 4x its lists (N grew 4-16x
        since training, 2-4x where the size cap applied). The slack avoids retraining soon after a build."""
        return not self.config.ivf_nlist and ivf_nlist(len(self)) >= 4 * self.index.nlist

    def remove(self, ids: np.ndarray | list[int]) -> int:
        """Remove ids (absent ones are ignored); returns how many went.

        The exact and IVF indexes delete at once. An HNSW graph cannot delete, so its ids are tombstoned
        (searches skip them) and the graph is rebuilt by `compact()`, which `save()` calls.
        """
        ids = _as_ids(ids)
        if not len(ids) or not len(self):
            return 0
        if self._kind == EXACT:
            return int(self.index.remove_ids(faiss.IDSelectorBatch(ids)))
        if self._kind == IVF:
            self._into_memory()
            self._ivf_ids = None
            return int(self.index.remove_ids(faiss.IDSelectorArray(np.unique(ids))))
        present = set(np.intersect1d(self._raw_ids(), ids).tolist()) - self._tombstones
        self._tombstones |= present
        return len(present)

    def compact(self) -> None:
        """Rebuild without tombstoned vectors (HNSW), or move an IVF index that shrank below half its limit down
        a tier (the gap avoids rebuilds back and forth at the boundary); the type follows the size."""
        if self._tombstones:
            self._rebuild(self._tier(len(self)))
        elif self._kind == IVF and len(self) <= self.config.ivf_limit // 2:
            self._rebuild(self._tier(len(self)))

    def _rebuild(self, kind: str) -> None:
        self._into_memory()  # the old index goes: a copy of its mapping in progress must end first
        ids, vecs = self._live()
        self._fill(kind, ids, np.ascontiguousarray(vecs))

    # ------------------------------------------------------------------------------------------ searching

    def search(self, queries: np.ndarray, k: int, allowed: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (scores, ids) per query, best first; empty slots have id -1 and score -inf. (Q, k), (Q, k)

        `allowed` restricts the result to those ids: the exact index applies it as a selector; an HNSW or IVF
        index, which may miss selected ids, searches the allowed vectors exhaustively while they are few.
        """
        q = _as_vectors(queries, self.dim)  # (Q, D)
        k = max(k, 0)
        if k == 0 or len(self) == 0:
            return np.full((len(q), k), -np.inf, np.float32), -np.ones((len(q), k), np.int64)
        if allowed is not None:
            allowed = _as_ids(allowed)
            if self._kind != EXACT and len(allowed) <= self.config.exact_limit:
                return self._search_subset(q, k, allowed)
        fetch = k + len(self._tombstones)  # dead ids may take slots
        sel = faiss.IDSelectorBatch(allowed) if allowed is not None else None
        if self._kind == HNSW:
            params = faiss.SearchParametersHNSW(efSearch=max(self.config.ef_search, 2 * fetch))
            if sel is not None:
                params.sel = sel
            scores, ids = self.index.search(q, fetch, params=params)
        elif self._kind == IVF:
            pool = len(self) if allowed is None else max(1, min(len(allowed), len(self)))
            scores, ids = self.index.search(q, fetch, params=self._ivf_params(fetch, pool, sel))
        elif sel is not None:
            scores, ids = self.index.search(q, fetch, params=faiss.SearchParameters(sel=sel))
        else:
            scores, ids = self.index.search(q, fetch)
        ids = ids.astype(np.int64)
        scores = np.where(ids < 0, -np.inf, scores).astype(np.float32)
        if self._tombstones:
            dead = np.isin(ids, np.fromiter(self._tombstones, np.int64))
            ids, scores = np.where(dead, -1, ids), np.where(dead, -np.inf, scores).astype(np.float32)
            order = np.argsort(-scores, axis=1, kind="stable")  # live hits first, still best first
            ids, scores = np.take_along_axis(ids, order, 1), np.take_along_axis(scores, order, 1)
        return scores[:, :k], ids[:, :k]

    def _ivf_params(self, fetch: int, pool: int, sel: faiss.IDSelector | None) -> faiss.SearchParametersIVF:
        """nprobe for this query: the index's nprobe, scaled up so that a filter (`pool` of N ids allowed) still
        scans as many candidates as an unfiltered search, and so that the scanned lists hold >= 4*fetch
        candidates in expectation (large k, or a small index with many lists)."""
        nlist, n = self.index.nlist, len(self)
        nprobe = max(math.ceil(self.index.nprobe * n / pool), math.ceil(4 * fetch * nlist / pool))
        params = faiss.SearchParametersIVF(nprobe=min(nlist, nprobe))
        if sel is not None:
            params.sel = sel
        return params

    def _search_subset(self, q: np.ndarray, k: int, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        present = np.intersect1d(allowed, self.ids())  # sorted, unique
        scores = np.full((len(q), k), -np.inf, np.float32)
        ids = -np.ones((len(q), k), np.int64)
        if not len(present):
            return scores, ids
        vecs = np.stack([self.index.reconstruct(int(i)) for i in present])  # (A, D)
        sims = q @ vecs.T  # (Q, A)
        top = np.argsort(-sims, axis=1, kind="stable")[:, :k]  # (Q, min(k, A))
        n = top.shape[1]
        scores[:, :n] = np.take_along_axis(sims, top, axis=1)
        ids[:, :n] = present[top]
        return scores, ids

    # ---------------------------------------------------------------------------------------------- files

    def save(self, path: Path) -> None:
        """Write atomically: a temp file in the same folder, fsync, os.replace."""
        path = Path(path)
        self.compact()
        data = faiss.serialize_index(self.index)  # (bytes,) uint8
        with atomic_path(path) as tmp:
            tmp.write_bytes(data.tobytes())

    @classmethod
    def load(cls, path: Path, dim: int, config: IndexConfig | None = None) -> VectorIndex:
        """Read an index file; IndexFileError when it is missing, damaged or not what we expect. An IVF file
        (the 1M-file tier) is memory-mapped: loading it reads nothing (2 GB took FAISS's reader seconds), it is
        searched at once, and its lists are copied into memory by `copy_in_background` (searches on the mapped
        lists take 1.8x as long) or before the first change (the mapping is read-only)."""
        try:
            with open(path, "rb") as f:
                mapped = f.read(4) == IVF_FOURCC and _mappable(path)
                f.seek(0)
                if mapped:
                    index = faiss.read_index(os.fspath(path), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
                else:  # streamed through Python's file I/O (odd path names work) in chunks: no whole-file copies
                    index = faiss.read_index(faiss.PyCallbackIOReader(f.read, READ_CHUNK))
        except OSError as e:
            raise IndexFileError(f"{path}: cannot read index ({e.strerror or e})") from None
        except Exception as e:  # faiss raises RuntimeError on any damage
            raise IndexFileError(f"{path}: damaged index file ({str(e).splitlines()[0][:200]})") from None
        vi = cls(dim, config)
        vi.index, vi._kind = index, _check_kind(index, dim, path)
        if vi._kind == IVF:
            vi._mapped = mapped
            if vi.index.direct_map.type != faiss.DirectMap.Hashtable:
                vi.index.set_direct_map_type(faiss.DirectMap.Hashtable)
            if vi.config.ivf_nprobe:  # an explicit setting overrides the file's
                vi.index.nprobe = vi.config.ivf_nprobe
        return vi

    def copy_in_background(self, lock: threading.RLock) -> None:
        """Copy a mapped index's lists into memory on a thread of its own; they replace the mapped ones under
        `lock`, the one every search and change of this index holds."""
        if self._mapped:
            self._copier = threading.Thread(target=self._copy_then_swap, args=(lock,), name="earshot-index-copy",
                                            daemon=True)
            self._copier.start()

    def _copy_then_swap(self, lock: threading.RLock) -> None:
        with self._copy_lock:  # searches go on meanwhile: they read the mapping too
            if not self._mapped:
                return
            self._copied = self._copy_lists()
        with lock:  # no search runs while the lists change
            if not self._abandoned:
                self._into_memory()

    def wait_copied(self, timeout: float | None = None) -> bool:
        """Wait (not under the lock) for a background copy to be swapped in; True when the lists are in memory."""
        if self._copier is not None:
            self._copier.join(timeout)
        return not self._mapped

    def abandon(self) -> None:
        """The index is being dropped (the library closes): a background copy ends without swapping in."""
        self._abandoned = True

    def _into_memory(self) -> None:
        """(under the index's lock) Replace a mapped index's lists by a copy in memory: the one made in the
        background, or one made now. Waits for a copy in progress (it reads the mapping this frees)."""
        with self._copy_lock:
            if not self._mapped:
                return
            lists, self._copied = self._copied or self._copy_lists(), None
            self.index.replace_invlists(lists, True)
            lists.this.disown()
            self._mapped = False

    def _copy_lists(self) -> faiss.ArrayInvertedLists:
        inv = self.index.invlists
        lists = faiss.ArrayInvertedLists(inv.nlist, inv.code_size)
        for lst in range(inv.nlist):
            n = inv.list_size(lst)
            if n:
                ids, codes = inv.get_ids(lst), inv.get_codes(lst)
                lists.add_entries(lst, n, ids, codes)
                inv.release_ids(lst, ids)
                inv.release_codes(lst, codes)
        return lists


def _mappable(path: Path) -> bool:
    """FAISS maps a file by name: one whose name does not survive the trip to C is streamed instead."""
    try:
        os.fspath(path).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_kind(index: faiss.Index, dim: int, path: Path) -> str:
    """The tier of a deserialised index; IndexFileError for anything VectorIndex does not write."""
    if type(index) is faiss.IndexIVFFlat:
        quantizer = faiss.downcast_index(index.quantizer)
        if index.d != dim or not index.is_trained or type(quantizer) is not faiss.IndexFlatIP or quantizer.d != dim:
            raise IndexFileError(f"{path}: not a trained IVF index of {dim}-d vectors")
        if index.metric_type != faiss.METRIC_INNER_PRODUCT:
            raise IndexFileError(f"{path}: index does not use inner product")
        return IVF
    if not isinstance(index, faiss.IndexIDMap2) or index.d != dim:
        raise IndexFileError(f"{path}: not an index of {dim}-d vectors with ids")
    inner = faiss.downcast_index(index.index)
    if not isinstance(inner, faiss.IndexFlatIP | faiss.IndexHNSWFlat):
        raise IndexFileError(f"{path}: unexpected index type {type(inner).__name__}")
    if inner.metric_type != faiss.METRIC_INNER_PRODUCT:
        raise IndexFileError(f"{path}: index does not use inner product")
    return HNSW if isinstance(inner, faiss.IndexHNSWFlat) else EXACT

"""A FAISS inner-product index over int64 ids that picks exact or approximate search by size.

Up to `exact_limit` vectors the index is exact (`IndexIDMap2` over `IndexFlatIP`); beyond that it becomes an
HNSW graph (`IndexHNSWFlat`, METRIC_INNER_PRODUCT), which answers in sub-linear time with recall@10 close to 1
at the efSearch used here. Vectors are expected L2-normalised, so inner product = cosine similarity.

The index is a cache: the SQLite catalog is the source of truth and rebuilds it whenever it is missing,
damaged or out of date. Files are written atomically (temp file + fsync + os.replace) through Python's own
file I/O (`faiss.serialize_index`), so odd path names work and a crash never leaves half an index behind.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np


@dataclass
class IndexConfig:
    exact_limit: int = 50_000  # above this many vectors, switch to HNSW
    hnsw_m: int = 32  # graph degree
    ef_construction: int = 80
    ef_search: int = 128  # raised to 2k for larger k


class IndexFileError(Exception):
    """An index file that cannot be read (missing, damaged, wrong kind)."""


def _as_ids(ids: np.ndarray | list[int]) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(ids, dtype=np.int64).reshape(-1))


def _as_vectors(vectors: np.ndarray, dim: int) -> np.ndarray:
    x = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32).reshape(-1, dim))  # (N, D)
    return x


class VectorIndex:
    """Exact or HNSW inner-product search over vectors with stable int64 ids."""

    def __init__(self, dim: int, config: IndexConfig | None = None) -> None:
        self.dim = dim
        self.config = config or IndexConfig()
        self._hnsw = False
        self._tombstones: set[int] = set()  # removed from an HNSW graph, not yet rebuilt away
        self.index = self._empty(hnsw=False)

    # ------------------------------------------------------------------------------------------- building

    def _empty(self, hnsw: bool) -> faiss.IndexIDMap2:
        self._hnsw = hnsw
        if hnsw:
            inner = faiss.IndexHNSWFlat(self.dim, self.config.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            inner.hnsw.efConstruction = self.config.ef_construction
        else:
            inner = faiss.IndexFlatIP(self.dim)
        return faiss.IndexIDMap2(inner)

    @classmethod
    def build(cls, dim: int, ids: np.ndarray, vectors: np.ndarray, config: IndexConfig | None = None
              ) -> VectorIndex:
        """A fresh index over (ids, vectors), exact or HNSW by count."""
        vi = cls(dim, config)
        ids = _as_ids(ids)
        vi.index = vi._empty(hnsw=len(ids) > vi.config.exact_limit)
        if len(ids):
            vi.index.add_with_ids(_as_vectors(vectors, dim), ids)
        return vi

    @property
    def is_hnsw(self) -> bool:
        return self._hnsw

    @property
    def kind(self) -> str:
        return "hnsw" if self._hnsw else "exact"

    def __len__(self) -> int:
        return int(self.index.ntotal) - len(self._tombstones)

    def _raw_ids(self) -> np.ndarray:
        return faiss.vector_to_array(self.index.id_map).astype(np.int64)

    def _live(self) -> tuple[np.ndarray, np.ndarray]:
        """Ids and vectors that are not tombstoned, in storage order. (N,), (N, D)"""
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
        return ids

    def vectors(self) -> np.ndarray:
        """All live vectors, in the order of `ids()`. (N, D)"""
        return self._live()[1]

    def add(self, ids: np.ndarray | list[int], vectors: np.ndarray) -> None:
        ids = _as_ids(ids)
        if not len(ids):
            return
        if self._tombstones & set(ids.tolist()):
            self.compact()  # an id coming back: drop its dead copy first
        self.index.add_with_ids(_as_vectors(vectors, self.dim), ids)
        if not self._hnsw and len(self) > self.config.exact_limit:
            self._rebuild(hnsw=True)

    def remove(self, ids: np.ndarray | list[int]) -> int:
        """Remove ids (absent ones are ignored); returns how many went.

        The exact index deletes at once. An HNSW graph cannot delete, so its ids are tombstoned (searches skip
        them) and the graph is rebuilt by `compact()`, which `save()` calls.
        """
        ids = _as_ids(ids)
        if not len(ids) or not len(self):
            return 0
        if not self._hnsw:
            return int(self.index.remove_ids(faiss.IDSelectorBatch(ids)))
        present = set(np.intersect1d(self._raw_ids(), ids).tolist()) - self._tombstones
        self._tombstones |= present
        return len(present)

    def compact(self) -> None:
        """Rebuild without tombstoned vectors (HNSW); the type follows the size."""
        if self._tombstones:
            self._rebuild(hnsw=len(self) > self.config.exact_limit)

    def _rebuild(self, hnsw: bool) -> None:
        ids, vecs = self._live()
        self.index = self._empty(hnsw=hnsw)
        self._tombstones = set()
        if len(ids):
            self.index.add_with_ids(np.ascontiguousarray(vecs), ids)

    # ------------------------------------------------------------------------------------------ searching

    def search(self, queries: np.ndarray, k: int, allowed: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (scores, ids) per query, best first; empty slots have id -1 and score -inf. (Q, k), (Q, k)

        `allowed` restricts the result to those ids: the exact index applies it as a selector; an HNSW graph,
        which may miss selected ids, searches the allowed vectors exhaustively while they are few.
        """
        q = _as_vectors(queries, self.dim)  # (Q, D)
        k = max(k, 0)
        if k == 0 or len(self) == 0:
            return np.full((len(q), k), -np.inf, np.float32), -np.ones((len(q), k), np.int64)
        if allowed is not None:
            allowed = _as_ids(allowed)
            if self._hnsw and len(allowed) <= self.config.exact_limit:
                return self._search_subset(q, k, allowed)
        fetch = k + len(self._tombstones)  # dead ids may take slots
        sel = faiss.IDSelectorBatch(allowed) if allowed is not None else None
        if self._hnsw:
            params = faiss.SearchParametersHNSW(efSearch=max(self.config.ef_search, 2 * fetch))
            if sel is not None:
                params.sel = sel
            scores, ids = self.index.search(q, fetch, params=params)
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
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data.tobytes())
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    @classmethod
    def load(cls, path: Path, dim: int, config: IndexConfig | None = None) -> VectorIndex:
        """Read an index file; IndexFileError when it is missing, damaged or not what we expect."""
        try:
            raw = Path(path).read_bytes()
        except OSError as e:
            raise IndexFileError(f"{path}: cannot read index ({e.strerror or e})") from None
        try:
            # already the concrete type; downcast_index here would drop the owning wrapper
            index = faiss.deserialize_index(np.frombuffer(raw, dtype=np.uint8))
        except Exception as e:  # faiss raises RuntimeError on any damage
            raise IndexFileError(f"{path}: damaged index file ({str(e).splitlines()[0][:200]})") from None
        if not isinstance(index, faiss.IndexIDMap2) or index.d != dim:
            raise IndexFileError(f"{path}: not an index of {dim}-d vectors with ids")
        inner = faiss.downcast_index(index.index)
        if not isinstance(inner, faiss.IndexFlatIP | faiss.IndexHNSWFlat):
            raise IndexFileError(f"{path}: unexpected index type {type(inner).__name__}")
        if inner.metric_type != faiss.METRIC_INNER_PRODUCT:
            raise IndexFileError(f"{path}: index does not use inner product")
        vi = cls(dim, config)
        vi.index, vi._hnsw = index, isinstance(inner, faiss.IndexHNSWFlat)
        return vi

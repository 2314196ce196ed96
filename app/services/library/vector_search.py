"""`VectorSearch`: nearest files by a model's vectors, with filters, and the hits that show them.

Files under folders that cannot be listed right now (files.available = 0) and files the filters leave out are
never returned; a query vector with NaN/inf means the model is broken (BrokenModelError).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from app.services.library.catalog import id_chunks, normalise
from app.services.library.categories import CATEGORY_SHOWN
from app.services.library.embedding import embed_file, window_starts
from app.services.library.records import BrokenModelError, Embedder, Hit, LibraryError, PathLike, SearchFilters
from app.services.library.vectors import parse_categories
from core.display import display_name

if TYPE_CHECKING:
    from app.services.library.file_table import FileTable
    from app.services.library.storage import Catalog
    from app.services.library.vectors import VectorStore


class VectorSearch:
    """Search over a library's vectors (`library.search`); reads, never writes."""

    def __init__(self, store: Catalog, files: FileTable, vectors: VectorStore) -> None:
        self.catalog = store
        self.files = files
        self.vectors = vectors

    def file_vector(self, path_or_file_id: PathLike | int, embedder: Embedder) -> tuple[np.ndarray, int | None]:
        """The vector to find sounds like a file by (D,), and its catalog id: a catalogued file's stored vector
        (LibraryError saying why when it has none), or any audio file outside embedded now (id None)."""
        fid = path_or_file_id if isinstance(path_or_file_id, int) else self.files.id_of(path_or_file_id)
        if fid is None:  # a FIFO, a folder, a missing file: the audio path says so, as `earshot probe` does
            path = Path(path_or_file_id if os.path.isabs(path_or_file_id) else self.catalog.root / path_or_file_id)
            mean, _ = embed_file(path, embedder)
            return self.query_vector(mean, embedder.model_id), None
        vec = self.vectors.of_files(embedder.model_id, [fid]).get(fid)
        if vec is None:
            raise LibraryError(self._why_no_vector(fid, embedder.model_id))
        return vec, fid

    def _why_no_vector(self, file_id: int, model_id: str) -> str:
        """Why a catalogued file has no vector for `model_id`: its recorded failure, or that it is not indexed."""
        row = self.files.row_of(file_id)
        if row is None:
            return f"no such file in the library: id {file_id}"
        path, status, error = row
        name = display_name(path)
        if status == "error":
            reason = error.removeprefix(f"{name}: ") if error else "no reason was recorded"
            return f"{name}: could not be indexed: {reason}"
        return f"{name}: not indexed with model {model_id!r} yet (index the library first)"

    def nearest_files(self, query: np.ndarray, model_id: str, k: int, filters: SearchFilters | None = None,
                      exclude: Sequence[int] = (), within: Collection[int] | None = None
                      ) -> list[tuple[int, float]]:
        """(file id, cosine) of the k nearest files by `model_id`'s vectors, filtered (files under unavailable
        folders left out); `within`: only among these files (those holding a query's phrases)."""
        q = self.query_vector(query, model_id)
        found, k = self.top_vectors(q, model_id, k, filters, len(exclude), within)
        if not found:
            return []
        with self.catalog.lock:
            owner = dict(self.catalog.db.execute(
                f"SELECT id, file_id FROM vectors WHERE id IN ({','.join('?' * len(found))})",
                [v for v, _ in found]).fetchall())
        skip = set(exclude)
        out = [(owner[v], s) for v, s in found if v in owner and owner[v] not in skip]
        # equal scores (the same audio twice) by file id: not by the order the files happened to be embedded in
        return sorted(out, key=lambda fs: (-fs[1], fs[0]))[:k]

    def top_vectors(self, q: np.ndarray, model_id: str, k: int, filters: SearchFilters | None, extra: int = 0,
                    within: Collection[int] | None = None) -> tuple[list[tuple[int, float]], int]:
        """(vector id, cosine) of the best k + extra vectors of a normalised query (files hidden or filtered out
        left out; only those of the files `within`, when given), and k capped at the index size."""
        with self.catalog.lock:
            vi = self.vectors.index(model_id)
            if vi is None or len(vi) == 0:
                return [], k
            if len(q) != vi.dim:
                raise LibraryError(f"query has {len(q)} dimensions, model {model_id!r} has {vi.dim}")
            hide = self.catalog.db.execute("SELECT EXISTS(SELECT 1 FROM files WHERE available = 0)").fetchone()[0]
            allowed = None
            if hide or (filters is not None and filters.active) or within is not None:
                allowed = self._allowed_vectors(model_id, filters or SearchFilters(), within)
                if not len(allowed):
                    return [], k
            k = min(k, len(vi))  # a huge k costs nothing: there are no more files than this
            scores, ids = vi.search(q[None], min(k + extra, len(vi)), allowed)  # (1, k')
        return [(int(i), float(s)) for i, s in zip(ids[0], scores[0], strict=True) if i >= 0], k

    def listed_rows(self, filters: SearchFilters | None) -> list[tuple[int, bytes, float | None, int | None]]:
        """(file id, path, duration, mtime_ns) of every searchable (ok, available) file passing the filters."""
        where, args = self._searchable(filters)
        with self.catalog.lock:
            return self.catalog.db.execute(f"SELECT f.id, f.path, f.duration, f.mtime_ns FROM files f WHERE {where}",
                                           args).fetchall()

    def allowed_files(self, file_ids: Sequence[int], filters: SearchFilters | None) -> set[int]:
        """The files among `file_ids` that are searchable (ok, available) and pass the filters."""
        where, args = self._searchable(filters)
        out: set[int] = set()
        with self.catalog.lock:
            for part, marks in id_chunks(file_ids):
                out.update(r[0] for r in self.catalog.db.execute(
                    f"SELECT f.id FROM files f WHERE {where} AND f.id IN ({marks})", [*args, *part]))
        return out

    def hits_for(self, file_ids: Sequence[int], model_id: str, query: np.ndarray | None) -> dict[int, Hit]:
        """Hits of given files, with their per-window similarity to `query` under `model_id` (none for a file
        without a vector, or when query is None). Their score is left at 0: the caller ranks (fusion)."""
        q = self.query_vector(query, model_id) if query is not None else None
        out: dict[int, Hit] = {}
        with self.catalog.lock:
            for part, marks in id_chunks(file_ids):
                for r in self.catalog.db.execute(
                        "SELECT f.id, f.path, f.duration, v.windows, m.window_seconds, f.sample_rate, f.channels,"
                        " v.categories"
                        " FROM files f"
                        " LEFT JOIN vectors v ON v.file_id = f.id AND v.model_id = ?"
                        f" LEFT JOIN models m ON m.model_id = v.model_id WHERE f.id IN ({marks})", (model_id, *part)):
                    out[r[0]] = self._hit(r, q, 0.0)
        return out

    @staticmethod
    def query_vector(query: np.ndarray, model_id: str) -> np.ndarray:
        """A query as a unit vector (D,); NaN/inf: the model is broken."""
        return normalise(refuse_broken(query, model_id))

    # ---------------------------------------------------------------------------------------------- inside

    def _hit(self, row: tuple, q: np.ndarray | None, score: float) -> Hit:
        """A Hit from (file id, path, duration, windows blob or None, window seconds, sample rate, channels,
        categories as stored)."""
        fid, path, duration, wblob, window_s, rate, channels, categories = row
        rel = os.fsdecode(bytes(path))
        wscores: list[float] = []
        start = 0.0
        if wblob is not None and q is not None:
            windows = np.frombuffer(wblob, dtype=np.float32).reshape(-1, len(q))  # (W, D)
            ws = windows @ q  # (W,)
            if len(ws):  # a long file keeps evenly spread windows (embedding.py): where the best one starts
                starts = window_starts(float(duration or 0.0), float(window_s or 0.0), len(ws))
                start, wscores = float(starts[int(np.argmax(ws))]), ws.tolist()
        return Hit(path=self.catalog.root / rel, score=score, duration=float(duration or 0.0),
                   folder=rel.rpartition("/")[0], best_window_start_s=start,
                   window_scores=wscores, file_id=fid, rel_path=rel, sample_rate=int(rate or 0),
                   channels=int(channels or 0), embedded=window_s is not None,
                   categories=parse_categories(categories))

    def _allowed_vectors(self, model_id: str, filters: SearchFilters, within: Collection[int] | None = None
                         ) -> np.ndarray:
        where, args = self._searchable(filters)
        sql = f"SELECT v.id FROM vectors v JOIN files f ON f.id = v.file_id WHERE v.model_id = ? AND {where}"
        args = [model_id, *args]
        db = self.catalog.db
        if within is None:
            rows = db.execute(sql, args).fetchall()
        else:
            rows = [r for part, marks in id_chunks(sorted(within))
                    for r in db.execute(f"{sql} AND v.file_id IN ({marks})", [*args, *part])]
        return np.array([r[0] for r in rows], dtype=np.int64)

    def _searchable(self, filters: SearchFilters | None) -> tuple[str, list[Any]]:
        """The SQL condition on `files f` (and its arguments) of a searchable file (ok, available) that passes
        the filters."""
        where, args = ["f.status = 'ok'", "f.available = 1"], []
        self._filter_sql(filters or SearchFilters(), where, args)
        return " AND ".join(where), args

    def _filter_sql(self, filters: SearchFilters, where: list[str], args: list[Any]) -> None:
        """SQL conditions on `files f` for every filter."""
        if filters.min_duration is not None:
            where.append("f.duration >= ?")
            args.append(filters.min_duration)
        if filters.max_duration is not None:
            where.append("f.duration <= ?")
            args.append(filters.max_duration)
        if filters.folder:
            prefix = self.files.key(filters.folder)
            if prefix and prefix != b".":
                prefix += b"/"
                where.append("substr(f.path, 1, ?) = ?")  # byte prefix; no LIKE escaping needed
                args += [len(prefix), prefix]
        if filters.formats:
            fmts = filters.format_set
            where.append(f"f.format IN ({','.join('?' * len(fmts))})")
            args += fmts
        for column, op, value in (("sample_rate", ">=", filters.min_sample_rate),
                                  ("sample_rate", "<=", filters.max_sample_rate), ("channels", "=", filters.channels)):
            if value is not None:
                where.append(f"f.{column} {op} ?")
                args.append(int(value))
        if filters.favourites_only:
            where.append("EXISTS(SELECT 1 FROM favourites fav WHERE fav.file_id = f.id)")
        if filters.category:  # stored best first, confidence as 0.000: the top one, confident enough to show
            where.append("EXISTS(SELECT 1 FROM vectors cv WHERE cv.file_id = f.id AND substr(cv.categories, 1, ?) = ?"
                         " AND CAST(substr(cv.categories, ?, 5) AS REAL) >= ?)")
            head = filters.category + " "
            args += [len(head), head, len(head) + 1, CATEGORY_SHOWN]


def refuse_broken(query: np.ndarray, model_id: str) -> np.ndarray:
    """A model's query vector as float32 (D,); a BrokenModelError when it holds NaN/inf (the model is broken)."""
    q = np.asarray(query, dtype=np.float32).reshape(-1)  # (D,)
    if not np.isfinite(q).all():
        raise BrokenModelError(f"model {model_id!r} produced NaN/inf for the query: it is broken")
    return q

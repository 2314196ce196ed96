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

from app.services.audio import display_name
from app.services.library.catalog import id_chunks, normalise
from app.services.library.embedding import embed_file, window_starts
from app.services.library.records import BrokenModelError, Embedder, Hit, LibraryError, PathLike, SearchFilters

if TYPE_CHECKING:
    from app.services.library.library import Library


class VectorSearch:
    """Search over a library's vectors (`library.search`)."""

    def __init__(self, library: Library) -> None:
        self.library = library

    def by_text(self, query: str, embedder: Embedder, k: int = 10, filters: SearchFilters | None = None
                ) -> list[Hit]:
        """The k files whose sound best matches a description (the sound channel alone)."""
        check_k(k)
        if self.library.vectors.index(embedder.model_id) is None:
            return []
        q = np.asarray(embedder.embed_text([query]), dtype=np.float32).reshape(-1)  # (D,)
        return self.by_vector(q, embedder.model_id, k, filters)

    def similar(self, path_or_file_id: PathLike | int, embedder: Embedder, k: int = 10,
                filters: SearchFilters | None = None) -> list[Hit]:
        """Files that sound like a catalogued file (excluding itself), or like any audio file outside."""
        check_k(k)
        lib, model_id = self.library, embedder.model_id
        fid = path_or_file_id if isinstance(path_or_file_id, int) else lib.files.id_of(path_or_file_id)
        if fid is None:  # a FIFO, a folder, a missing file: the audio path says so, as `earshot probe` does
            path = Path(path_or_file_id if os.path.isabs(path_or_file_id) else lib.root / path_or_file_id)
            mean, _ = embed_file(path, embedder)
            return self.by_vector(mean, model_id, k, filters)
        vec = lib.vectors.of_files(model_id, [fid]).get(fid)
        if vec is None:
            raise LibraryError(self._why_no_vector(fid, model_id))
        return self.by_vector(vec, model_id, k, filters, exclude=[fid])

    def _why_no_vector(self, file_id: int, model_id: str) -> str:
        """Why a catalogued file has no vector for `model_id`: its recorded failure, or that it is not indexed."""
        row = self.library.files.row_of(file_id)
        if row is None:
            return f"no such file in the library: id {file_id}"
        path, status, error = row
        name = display_name(path)
        if status == "error":
            reason = error.removeprefix(f"{name}: ") if error else "no reason was recorded"
            return f"{name}: could not be indexed: {reason}"
        return f"{name}: not indexed with model {model_id!r} yet (index the library first)"

    def by_vector(self, query: np.ndarray, model_id: str, k: int = 10, filters: SearchFilters | None = None,
                  exclude: Sequence[int] = (), windows: bool = True) -> list[Hit]:
        """Top-k files by cosine similarity to `query` (D,), with optional filters, excluding file ids and
        files under folders that are unavailable. k >= 1; more than the library holds gives them all.
        windows=False skips the per-window scores (the text channel has one vector per file)."""
        check_k(k)
        q = self.query_vector(query, model_id)
        lib = self.library
        with lib.lock:
            found, k = self.top_vectors(q, model_id, k, filters, len(exclude))
            if not found:
                return []
            rows = {r[0]: r for r in lib.db.execute(
                "SELECT v.id, f.id, f.path, f.duration, " + ("v.windows" if windows else "NULL") + ","
                " m.window_seconds, f.sample_rate, f.channels FROM vectors v JOIN files f ON f.id = v.file_id"
                " JOIN models m ON m.model_id = v.model_id"
                f" WHERE v.id IN ({','.join('?' * len(found))})", [i for i, _ in found])}
        kept = sorted(((score, rows[vid]) for vid, score in found if vid in rows and rows[vid][1] not in exclude),
                      key=lambda sr: (-sr[0], sr[1][1]))  # equal scores by file id, not by embedding order
        return [self._hit(r[1:], q, score) for score, r in kept[:k]]

    def nearest_files(self, query: np.ndarray, model_id: str, k: int, filters: SearchFilters | None = None,
                      exclude: Sequence[int] = (), within: Collection[int] | None = None
                      ) -> list[tuple[int, float]]:
        """(file id, cosine) of the k nearest files by `model_id`'s vectors, filtered like `by_vector`;
        `within`: only among these files (those holding a query's phrases)."""
        q = self.query_vector(query, model_id)
        found, k = self.top_vectors(q, model_id, k, filters, len(exclude), within)
        if not found:
            return []
        with self.library.lock:
            owner = dict(self.library.db.execute(
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
        lib = self.library
        with lib.lock:
            vi = lib.vectors.index(model_id)
            if vi is None or len(vi) == 0:
                return [], k
            if len(q) != vi.dim:
                raise LibraryError(f"query has {len(q)} dimensions, model {model_id!r} has {vi.dim}")
            hide = lib.db.execute("SELECT EXISTS(SELECT 1 FROM files WHERE available = 0)").fetchone()[0]
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
        with self.library.lock:
            return self.library.db.execute(f"SELECT f.id, f.path, f.duration, f.mtime_ns FROM files f WHERE {where}",
                                           args).fetchall()

    def allowed_files(self, file_ids: Sequence[int], filters: SearchFilters | None) -> set[int]:
        """The files among `file_ids` that are searchable (ok, available) and pass the filters."""
        where, args = self._searchable(filters)
        out: set[int] = set()
        with self.library.lock:
            for part, marks in id_chunks(file_ids):
                out.update(r[0] for r in self.library.db.execute(
                    f"SELECT f.id FROM files f WHERE {where} AND f.id IN ({marks})", [*args, *part]))
        return out

    def hits_for(self, file_ids: Sequence[int], model_id: str, query: np.ndarray | None) -> dict[int, Hit]:
        """Hits of given files, with their per-window similarity to `query` under `model_id` (none for a file
        without a vector, or when query is None). Their score is left at 0: the caller ranks (fusion)."""
        q = self.query_vector(query, model_id) if query is not None else None
        out: dict[int, Hit] = {}
        with self.library.lock:
            for part, marks in id_chunks(file_ids):
                for r in self.library.db.execute(
                        "SELECT f.id, f.path, f.duration, v.windows, m.window_seconds, f.sample_rate, f.channels"
                        " FROM files f"
                        " LEFT JOIN vectors v ON v.file_id = f.id AND v.model_id = ?"
                        f" LEFT JOIN models m ON m.model_id = v.model_id WHERE f.id IN ({marks})", (model_id, *part)):
                    out[r[0]] = self._hit(r, q, 0.0)
        return out

    @staticmethod
    def query_vector(query: np.ndarray, model_id: str) -> np.ndarray:
        """A query as a unit vector (D,); NaN/inf: the model is broken."""
        q = np.asarray(query, dtype=np.float32).reshape(-1)  # (D,)
        if not np.isfinite(q).all():
            raise BrokenModelError(f"model {model_id!r} produced NaN/inf for the query: it is broken")
        return normalise(q)

    # ---------------------------------------------------------------------------------------------- inside

    def _hit(self, row: tuple, q: np.ndarray | None, score: float) -> Hit:
        """A Hit from (file id, path, duration, windows blob or None, window seconds, sample rate, channels)."""
        fid, path, duration, wblob, window_s, rate, channels = row
        rel = os.fsdecode(bytes(path))
        wscores: list[float] = []
        start = 0.0
        if wblob is not None and q is not None:
            windows = np.frombuffer(wblob, dtype=np.float32).reshape(-1, len(q))  # (W, D)
            ws = windows @ q  # (W,)
            if len(ws):  # a long file keeps evenly spread windows (embedding.py): where the best one starts
                starts = window_starts(float(duration or 0.0), float(window_s or 0.0), len(ws))
                start, wscores = float(starts[int(np.argmax(ws))]), ws.tolist()
        return Hit(path=self.library.root / rel, score=score, duration=float(duration or 0.0),
                   folder=rel.rpartition("/")[0], best_window_start_s=start,
                   window_scores=wscores, file_id=fid, rel_path=rel, sample_rate=int(rate or 0),
                   channels=int(channels or 0), embedded=window_s is not None)

    def _allowed_vectors(self, model_id: str, filters: SearchFilters, within: Collection[int] | None = None
                         ) -> np.ndarray:
        where, args = self._searchable(filters)
        sql = f"SELECT v.id FROM vectors v JOIN files f ON f.id = v.file_id WHERE v.model_id = ? AND {where}"
        args = [model_id, *args]
        db = self.library.db
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
            prefix = self.library.files.key(filters.folder)
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


def check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise LibraryError(f"the number of results must be a whole number of at least 1 (got {k!r})")

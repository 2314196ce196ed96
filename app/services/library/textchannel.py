"""The library's text channel: what names, folders, embedded tags and the user's own tags say about each file.

Per file (catalog v3, see catalog.py): a `texts` row derived from its path and tags (names.py, tags.py), an FTS5
row (`text_fts`, rowid = file id) for keyword search with BM25, and a MiniLM sentence vector of the same words
stored like any model's vectors under the model id `text:<encoder>` (so the text vectors get the same FAISS
tiers, repair and checksums as the sound vectors). The user's tags and favourites live in their own tables and
survive re-indexing, renames and moves (they belong to the file row).

Keeping it current: a `texts` row remembers the path, mtime and derivation version it came from; the indexer's
text pass re-derives rows whose file was renamed, moved or changed (no audio is read for that), and re-embeds a
sentence vector only when its sentence changed (`texts.embedded` holds the digest). Changing a file's user tags
rewrites its FTS row at once and re-embeds only that file's sentence.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from app.services.library import names
from app.services.library.catalog import id_chunks, normalise
from app.services.library.records import BrokenModelError, FailedFile, LibraryError, SearchFilters
from app.services.library.tags import read_tags

if TYPE_CHECKING:
    from app.services.library.records import Embedder

TEXT_PREFIX = "text:"
TEXT_VERSION = 1  # bump when names.py/tags.py derive differently: every row is re-derived (no audio re-read)
MAX_TAG_CHARS = 64
TEXT_BATCH = 128  # sentences embedded and stored between progress reports (a cancel waits for at most one chunk)
TAG_SEPARATOR = ";"  # between tags in the CSV export/import and on the command line
_BAD_TAG = re.compile(r"[\x00-\x1f\x7f;]")


def is_text_model(model_id: str) -> bool:
    return model_id.startswith(TEXT_PREFIX)


@dataclass
class DerivedText:
    name: str  # name words, UCS CatID expanded, take numbers and hashes dropped
    folder: str  # folder words
    tags: str  # embedded tag text
    problem: str | None  # what went wrong reading the tags


def derive_text(root: Path, key: bytes) -> DerivedText:
    """The text of one file: its name and folder words and its embedded tags (problems recorded, not raised)."""
    rel = os.fsdecode(key)
    folder, _, fname = rel.rpartition("/")
    stem = os.path.splitext(fname)[0]
    words = " ".join(names.name_words(stem))
    tag = read_tags(root / rel)
    return DerivedText(text_safe(words), text_safe(" ".join(names.folder_words(folder))), tag.text,
                       tag.problem or None)


def text_safe(text: str) -> str:
    """Text for SQLite: undecodable bytes of a file name (surrogate escapes) become '?'."""
    return text.encode("utf-8", "replace").decode("utf-8")


def keyword_name(words: str, key: bytes) -> str:
    """The FTS name column: the name words plus the file name as written (so 'DOORWood' or a product code is
    found as typed)."""
    stem = os.path.splitext(os.fsdecode(key).rpartition("/")[2])[0]
    return text_safe(f"{words} {stem}".strip())


def sentence(words: str, folder: str, tags: str, user_tags: Sequence[str]) -> str:
    """What the sentence encoder reads: the words that describe the sound, most telling first (long tag text is
    cut by the tokenizer's limit, never the name)."""
    parts = [words, ", ".join(user_tags), folder, tags]
    return ". ".join(p for p in parts if p.strip())


def digest(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def normalise_tag(tag: str) -> str:
    """A user tag as stored: whitespace collapsed; refused (ValueError, saying why) when empty, too long, or
    containing ';' (the export's separator) or control characters."""
    if not isinstance(tag, str):
        raise ValueError(f"a tag must be text, got {tag!r}")
    t = " ".join(tag.split())
    if not t:
        raise ValueError("empty tag")
    if len(t) > MAX_TAG_CHARS:
        raise ValueError(f"tag {t[:20]!r}… is {len(t)} characters long (at most {MAX_TAG_CHARS})")
    if _BAD_TAG.search(t):
        raise ValueError(f"tag {t!r} contains ';' or a control character")
    return t


def embed_sentences(encoder: Embedder, pending: Sequence[tuple[int, str]]
                    ) -> list[tuple[int, str, np.ndarray | None]]:
    """(file id, sentence) -> (file id, sentence, unit vector, or None for an empty sentence: its vector goes), the
    non-empty sentences in one batched call. A model giving NaN/inf is refused (BrokenModelError)."""
    texts = [t for _, t in pending if t]
    vecs = iter(np.asarray(encoder.embed_text(texts), np.float32) if texts else [])
    items = [(fid, text, next(vecs) if text else None) for fid, text in pending]
    if any(v is not None and not np.isfinite(v).all() for _, _, v in items):
        raise BrokenModelError(f"text model {encoder.model_id!r} produced NaN/inf: it is broken")
    return items


class TextChannelMixin:
    """Library methods for the text channel and the user's tags (Library holds db, lock, _tx, vector_index)."""

    db: sqlite3.Connection
    root: Path
    _read_db: sqlite3.Connection | None  # keyword_search's read-only connection (Library.__init__: None)
    _read_lock: Any

    # ----------------------------------------------------------------------------------- deriving, storing

    def register_text_model(self, encoder: Embedder) -> None:
        if not is_text_model(encoder.model_id):
            raise LibraryError(f"{encoder.model_id!r} is not a text model id (they start with {TEXT_PREFIX!r})")
        with self._tx() as db:  # type: ignore[attr-defined]
            row = db.execute("SELECT dim FROM models WHERE model_id = ?", (encoder.model_id,)).fetchone()
            if row is None:
                db.execute("INSERT INTO models(model_id, dim, sample_rate, window_seconds) VALUES (?, ?, 0, 0)",
                           (encoder.model_id, int(encoder.dim)))
            elif row[0] != encoder.dim:
                raise LibraryError(f"text model {encoder.model_id!r} has {encoder.dim}-d vectors, the catalog "
                                   f"{row[0]}-d")

    def stale_texts(self) -> list[tuple[int, bytes, int]]:
        """(file id, path, mtime) of readable files whose text is missing or was derived from another path, mtime
        or rule version."""
        with self.lock:  # type: ignore[attr-defined]
            rows = self.db.execute(
                "SELECT f.id, f.path, f.mtime_ns FROM files f LEFT JOIN texts t ON t.file_id = f.id"
                " WHERE f.status = 'ok' AND (t.file_id IS NULL OR t.path != f.path OR t.mtime_ns != f.mtime_ns"
                " OR t.version != ?) ORDER BY f.id", (TEXT_VERSION,)).fetchall()
        return [(r[0], bytes(r[1]), r[2]) for r in rows]

    def store_text(self, file_id: int, key: bytes, mtime_ns: int, text: DerivedText) -> bool:
        """Record a file's derived text and its keyword row; False when the file row is gone meanwhile."""
        with self._tx() as db:  # type: ignore[attr-defined]
            if db.execute("SELECT 1 FROM files WHERE id = ?", (file_id,)).fetchone() is None:
                return False
            old = db.execute("SELECT name, folder, tags, embedded FROM texts WHERE file_id = ?", (file_id,)
                             ).fetchone()
            embedded = old[3] if old else None
            db.execute("INSERT OR REPLACE INTO texts(file_id, path, mtime_ns, version, name, folder, tags, problem,"
                       " embedded) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       (file_id, key, mtime_ns, TEXT_VERSION, text.name, text.folder, text.tags, text.problem,
                        embedded))
            self._write_fts(db, file_id)
        return True

    @staticmethod
    def _write_fts(db: sqlite3.Connection, file_id: int) -> None:
        """Rewrite a file's keyword row from its texts row and user tags (no texts row yet: user tags only)."""
        t = db.execute("SELECT name, folder, tags, path FROM texts WHERE file_id = ?", (file_id,)).fetchone()
        user = [r[0] for r in db.execute("SELECT tag FROM user_tags WHERE file_id = ? ORDER BY tag", (file_id,))]
        db.execute("DELETE FROM text_fts WHERE rowid = ?", (file_id,))
        name, folder, tags = (keyword_name(t[0], bytes(t[3])), t[1], t[2]) if t else ("", "", "")
        if t or user:
            db.execute("INSERT INTO text_fts(rowid, name, folder, tags, user_tags) VALUES (?, ?, ?, ?, ?)",
                       (file_id, name, folder, tags, " ; ".join(user)))

    def pending_text_vectors(self, model_id: str, file_ids: Sequence[int] | None = None) -> list[tuple[int, str]]:
        """(file id, sentence) of files whose sentence vector is missing or was made from other words; files whose
        sentence is empty come back with '' (their vector, if any, goes)."""
        with self.lock:  # type: ignore[attr-defined]
            q = ("SELECT t.file_id, t.name, t.folder, t.tags, t.embedded,"
                 " EXISTS(SELECT 1 FROM vectors v WHERE v.file_id = t.file_id AND v.model_id = ?),"
                 " (SELECT group_concat(tag, char(31)) FROM (SELECT tag FROM user_tags u WHERE u.file_id = t.file_id"
                 " ORDER BY tag)) FROM texts t")
            rows = []
            if file_ids is None:
                rows = self.db.execute(q, (model_id,)).fetchall()
            else:
                for part, marks in id_chunks(file_ids):
                    rows += self.db.execute(q + f" WHERE t.file_id IN ({marks})", (model_id, *part)).fetchall()
        out = []
        for fid, name, folder, tags, embedded, has_vector, user in rows:
            text = sentence(name, folder, tags, user.split("\x1f") if user else [])
            if not text:
                if has_vector or embedded:
                    out.append((fid, ""))
            elif not has_vector or embedded != digest(text):
                out.append((fid, text))
        return out

    def store_text_vectors(self, model_id: str, items: Sequence[tuple[int, str, np.ndarray | None]]) -> None:
        """Replace the sentence vectors of files: (file id, sentence, unit vector (D,) or None to drop it)."""
        removed: list[int] = []
        added: list[tuple[int, np.ndarray]] = []
        with self._tx() as db:  # type: ignore[attr-defined]
            for fid, text, vec in items:
                if db.execute("SELECT 1 FROM files WHERE id = ?", (fid,)).fetchone() is None:
                    continue
                removed += self._drop_vectors(db, fid, model_id)  # type: ignore[attr-defined]
                if vec is not None:
                    v = normalise(np.asarray(vec, np.float32).reshape(-1))
                    cur = db.execute("INSERT INTO vectors(model_id, file_id, vector, n_windows, windows)"
                                     " VALUES (?, ?, ?, 1, ?)", (model_id, fid, v.tobytes(), v.tobytes()))
                    added.append((int(cur.lastrowid), v))
                db.execute("UPDATE texts SET embedded = ? WHERE file_id = ?", (digest(text) if text else None, fid))
        with self.lock:  # type: ignore[attr-defined]
            self._unindex(removed)  # type: ignore[attr-defined]
            vi = self.vector_index(model_id)  # type: ignore[attr-defined]
            if vi is not None and added:
                vi.add([i for i, _ in added], np.stack([v for _, v in added]))
                self._dirty.add(model_id)  # type: ignore[attr-defined]

    def tag_problems(self) -> list[FailedFile]:
        """Files whose embedded tags could not (all) be read: they are indexed by name and sound all the same."""
        with self.lock:  # type: ignore[attr-defined]
            rows = self.db.execute("SELECT f.id, f.path, t.problem FROM texts t JOIN files f ON f.id = t.file_id"
                                   " WHERE t.problem IS NOT NULL ORDER BY f.path").fetchall()
        return [FailedFile(os.fsdecode(bytes(p)), e, i) for i, p, e in rows]

    # ------------------------------------------------------------------------------------ user tags, favourites

    def add_tags(self, file_ids: Sequence[int], tags: Sequence[str]) -> list[int]:
        """Add tags to files (several at once); returns the files whose tags changed. Unknown ids: LibraryError."""
        clean = list(dict.fromkeys(normalise_tag(t) for t in tags))
        return self._edit_tags(file_ids, lambda db, fid: sum(
            db.execute("INSERT OR IGNORE INTO user_tags(file_id, tag, added_at) VALUES (?, ?, ?)",
                       (fid, t, time.time())).rowcount for t in clean))

    def remove_tags(self, file_ids: Sequence[int], tags: Sequence[str]) -> list[int]:
        clean = list(dict.fromkeys(" ".join(str(t).split()) for t in tags))
        return self._edit_tags(file_ids, lambda db, fid: sum(
            db.execute("DELETE FROM user_tags WHERE file_id = ? AND tag = ?", (fid, t)).rowcount for t in clean))

    def _edit_tags(self, file_ids: Sequence[int], edit: Any) -> list[int]:  # noqa: ANN401 - (db, fid) -> changes
        changed = []
        with self._tx() as db:  # type: ignore[attr-defined]
            ids = self._known_ids(db, file_ids)
            for fid in ids:
                if edit(db, fid):
                    self._write_fts(db, fid)
                    changed.append(fid)
        return changed

    def set_favourite(self, file_ids: Sequence[int], on: bool) -> None:
        with self._tx() as db:  # type: ignore[attr-defined]
            for fid in self._known_ids(db, file_ids):
                if on:
                    db.execute("INSERT OR IGNORE INTO favourites(file_id, added_at) VALUES (?, ?)", (fid, time.time()))
                else:
                    db.execute("DELETE FROM favourites WHERE file_id = ?", (fid,))

    @staticmethod
    def _known_ids(db: sqlite3.Connection, file_ids: Sequence[int]) -> list[int]:
        ids = list(dict.fromkeys(int(i) for i in file_ids))
        known = set()
        for part, marks in id_chunks(ids):
            known.update(r[0] for r in db.execute(f"SELECT id FROM files WHERE id IN ({marks})", part))
        missing = [i for i in ids if i not in known]
        if missing:
            raise LibraryError(f"no such file in the library: id {', '.join(map(str, missing[:5]))}"
                               f"{' …' if len(missing) > 5 else ''}")
        return ids

    def tags_of(self, file_id: int) -> list[str]:
        return self.user_tags_for([file_id]).get(int(file_id), [])

    def user_tags_for(self, file_ids: Sequence[int]) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        with self.lock:  # type: ignore[attr-defined]
            for part, marks in id_chunks(file_ids):
                for fid, tag in self.db.execute(f"SELECT file_id, tag FROM user_tags WHERE file_id IN ({marks})"
                                                " ORDER BY tag", part):
                    out.setdefault(fid, []).append(tag)
        return out

    def favourite_ids(self, file_ids: Sequence[int] | None = None) -> set[int]:
        with self.lock:  # type: ignore[attr-defined]
            if file_ids is None:
                return {r[0] for r in self.db.execute("SELECT file_id FROM favourites")}
            out = set()
            for part, marks in id_chunks(file_ids):
                out.update(r[0] for r in self.db.execute(f"SELECT file_id FROM favourites WHERE file_id IN ({marks})",
                                                         part))
            return out

    def all_tags(self) -> list[str]:
        with self.lock:  # type: ignore[attr-defined]
            return [r[0] for r in self.db.execute("SELECT DISTINCT tag FROM user_tags ORDER BY tag COLLATE NOCASE")]

    def tag_table(self) -> Iterator[tuple[str, list[str], bool]]:
        """(relative path, tags, favourite) of every file with tags or a favourite mark, by path: the export."""
        with self.lock:  # type: ignore[attr-defined]
            rows = self.db.execute(
                "SELECT f.path, (SELECT group_concat(tag, char(31)) FROM (SELECT tag FROM user_tags u"
                " WHERE u.file_id = f.id ORDER BY tag)), EXISTS(SELECT 1 FROM favourites v WHERE v.file_id = f.id)"
                " FROM files f WHERE EXISTS(SELECT 1 FROM user_tags u WHERE u.file_id = f.id)"
                " OR EXISTS(SELECT 1 FROM favourites v WHERE v.file_id = f.id) ORDER BY f.path").fetchall()
        for path, tags, fav in rows:
            yield os.fsdecode(bytes(path)), tags.split("\x1f") if tags else [], bool(fav)

    # ------------------------------------------------------------------------------------------- searching

    def keyword_search(self, match: str, limit: int) -> list[tuple[int, float]]:
        """(file id, BM25 score, higher is better) of the best `limit` keyword matches of an FTS5 expression
        (built by app.services.query, which quotes every word: a user's query cannot be a syntax error).

        Runs on the catalog's read-only connection (committed rows), not under the library's lock, so a search
        can rank keywords on one core while it encodes the query on the other (SearchSession.search); falls back
        to the main connection when a reader cannot be opened."""
        sql = "SELECT rowid, rank FROM text_fts WHERE text_fts MATCH ? ORDER BY rank LIMIT ?"
        reader, guard = self._reader()
        with guard:
            try:
                rows = reader.execute(sql, (match, int(limit))).fetchall()
            except sqlite3.OperationalError as e:
                if "fts5" in str(e) or "syntax" in str(e):
                    return []  # defence in depth: the query builder never produces one
                raise
        return [(int(r), -float(s)) for r, s in rows]

    def _reader(self) -> tuple[sqlite3.Connection, Any]:
        """The read-only connection to the catalog and its lock, opened on first use (WAL: it reads committed
        rows while the main connection writes); the main connection and the library's lock if it cannot open."""
        with self.lock:  # type: ignore[attr-defined]
            if self.db is None:
                raise LibraryError("the library is closed")
            if self._read_db is None:
                self._read_db = self._open_reader() or self.db
                self._read_lock = self.lock if self._read_db is self.db else threading.Lock()  # type: ignore[attr-defined]
            return self._read_db, self._read_lock

    def _open_reader(self) -> sqlite3.Connection | None:
        uri = self.catalog_path.resolve().as_uri() + "?mode=ro"  # type: ignore[attr-defined]
        try:
            reader = sqlite3.connect(uri, uri=True, check_same_thread=False, timeout=30)
        except sqlite3.Error:
            return None
        try:
            reader.execute("PRAGMA query_only = ON")
            reader.execute("SELECT 1 FROM text_fts LIMIT 1").fetchall()
        except sqlite3.Error:
            reader.close()  # opened but unusable: not left open
            return None
        return reader

    def close_reader(self) -> None:
        """Close the read-only connection (Library.close calls this)."""
        reader, self._read_db = self._read_db, None
        if reader is not None and reader is not self.db:
            with self._read_lock:
                reader.close()

    def keyword_counts(self, parts: Sequence[str], cap: int) -> list[int]:
        """How many files each FTS5 expression matches, counted up to `cap` (rowids only: no BM25, so a common
        word costs at most `cap` steps)."""
        out = []
        with self.lock:  # type: ignore[attr-defined]
            for part in parts:
                try:
                    out.append(self.db.execute("SELECT count(*) FROM (SELECT rowid FROM text_fts WHERE text_fts"
                                               " MATCH ? LIMIT ?)", (part, int(cap))).fetchone()[0])
                except sqlite3.OperationalError:
                    out.append(0)
        return out

    def file_scores(self, model_id: str, file_ids: Sequence[int], q: np.ndarray) -> dict[int, float]:
        """file id -> cosine of its `model_id` vector to the unit query q (D,), the vectors read from the loaded
        FAISS index by id (a few hundred index lookups, no vector blobs read from SQLite); files without a
        vector are left out. Same values as `file_vectors(...) @ q`."""
        ids = [int(i) for i in file_ids]
        pairs: list[tuple[int, int]] = []
        with self.lock:  # type: ignore[attr-defined]
            for part, marks in id_chunks(ids):
                pairs += self.db.execute(f"SELECT file_id, id FROM vectors WHERE model_id = ? AND file_id IN ({marks})",
                                         (model_id, *part)).fetchall()
            vi = self.vector_index(model_id)  # type: ignore[attr-defined]
            try:
                vecs = np.stack([vi.index.reconstruct(int(v)) for _, v in pairs]) if vi is not None and pairs \
                    else None  # (M, D)
            except RuntimeError:  # a vector not (yet) in the index: read them all from the catalog
                vecs = None
        if vecs is None or vecs.shape[1] != len(q):
            return {f: float(v @ q) for f, v in self.file_vectors(model_id, ids).items() if len(v) == len(q)}
        return dict(zip([f for f, _ in pairs], (vecs @ q).tolist(), strict=True))

    def keyword_files(self, match: str) -> set[int]:
        """Every file matching an FTS5 expression (for exclusions)."""
        with self.lock:  # type: ignore[attr-defined]
            try:
                return {r[0] for r in self.db.execute("SELECT rowid FROM text_fts WHERE text_fts MATCH ?", (match,))}
            except sqlite3.OperationalError:
                return set()

    def text_fields(self, file_ids: Sequence[int]) -> dict[int, tuple[str, str]]:
        """file id -> (path, embedded tag text) for the why-matched display."""
        out = {}
        with self.lock:  # type: ignore[attr-defined]
            for part, marks in id_chunks(file_ids):
                for fid, path, tags in self.db.execute(
                        f"SELECT f.id, f.path, coalesce(t.tags, '') FROM files f LEFT JOIN texts t ON t.file_id = f.id"
                        f" WHERE f.id IN ({marks})", part):
                    out[fid] = (os.fsdecode(bytes(path)), tags)
        return out

    def file_vectors(self, model_id: str, file_ids: Sequence[int]) -> dict[int, np.ndarray]:
        """file id -> its vector for `model_id` (files without one are left out). (D,) each"""
        out = {}
        with self.lock:  # type: ignore[attr-defined]
            for part, marks in id_chunks(file_ids):
                for fid, blob in self.db.execute(
                        f"SELECT file_id, vector FROM vectors WHERE model_id = ? AND file_id IN ({marks})",
                        (model_id, *part)):
                    out[fid] = np.frombuffer(blob, dtype=np.float32)
        return out

    def indexed_vectors(self, model_id: str) -> int:
        """How many vectors a model's (in-memory) index holds: files searchable by it (0: it has nothing to say)."""
        vi = self.vector_index(model_id)  # type: ignore[attr-defined]
        return len(vi) if vi is not None else 0

    def nearest_files(self, query: np.ndarray, model_id: str, k: int, filters: SearchFilters | None = None,
                      exclude: Sequence[int] = ()) -> list[tuple[int, float]]:
        """(file id, cosine) of the k nearest files by `model_id`'s vectors, filtered like search_vector."""
        q = self._query_vector(query, model_id)  # type: ignore[attr-defined]
        found, k = self.top_vectors(q, model_id, k, filters, len(exclude))  # type: ignore[attr-defined]
        if not found:
            return []
        with self.lock:  # type: ignore[attr-defined]
            owner = dict(self.db.execute(f"SELECT id, file_id FROM vectors WHERE id IN ({','.join('?' * len(found))})",
                                         [v for v, _ in found]).fetchall())
        skip = set(exclude)
        out = [(owner[v], s) for v, s in found if v in owner and owner[v] not in skip]
        return out[:k]


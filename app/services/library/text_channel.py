"""The library's text channel: what names, folders, embedded tags and the user's own tags say about each file.

Per file (catalog v3, see catalog.py): a `texts` row derived from its path and tags (names.py,
embedded_tags.py), an FTS5 row (`text_fts`, rowid = file id) for keyword search with BM25, and a MiniLM sentence
vector of the same words stored like any model's vectors under the model id `text:<encoder>` (so the text
vectors get the same FAISS tiers, repair and checksums as the sound vectors). The user's tags and favourites
live in their own tables and survive re-indexing, renames and moves (they belong to the file row; user_tags.py).

Keeping it current: a `texts` row remembers the path, mtime and derivation version it came from; the indexer's
text pass re-derives rows whose file was renamed, moved or changed (no audio is read for that), and re-embeds a
sentence vector only when its sentence changed (`texts.embedded` holds the digest). Changing a file's user tags
rewrites its FTS row at once and re-embeds only that file's sentence.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from app.services.library import names
from app.services.library.catalog import id_chunks, normalise
from app.services.library.embedded_tags import read_tags
from app.services.library.records import TEXT_PREFIX, BrokenModelError, FailedFile, LibraryError, is_text_model

if TYPE_CHECKING:
    from app.services.library.records import TextEncoder
    from app.services.library.storage import Catalog
    from app.services.library.vectors import VectorStore

TEXT_VERSION = 7  # bump when names.py/embedded_tags.py derive differently: every row is re-derived (no audio re-read)
TEXT_BATCH = 128  # sentences embedded and stored between progress reports (a cancel waits for at most one chunk)


@dataclass
class DerivedText:
    name: str  # name words, UCS CatID expanded, take numbers and hashes dropped
    folder: str  # folder words
    tags: str  # embedded tag text that says what the sound is (the sentence reads it)
    credits: str  # the rest of the tags: artist, source, tool and licence lines (keywords only)
    problem: str | None  # what went wrong reading the tags


def derive_text(root: Path, key: bytes) -> DerivedText:
    """The text of one file: its name and folder words and its embedded tags (problems recorded, not raised)."""
    rel = os.fsdecode(key)
    folder, _, fname = rel.rpartition("/")
    stem = os.path.splitext(fname)[0]
    words = " ".join(names.name_words(stem))
    tag = read_tags(root / rel)
    return DerivedText(text_safe(words), text_safe(" ".join(names.folder_words(folder))), tag.describing,
                       tag.credits, tag.problem or None)


def text_safe(text: str) -> str:
    """Text for SQLite: undecodable bytes of a file name (surrogate escapes) become '?'."""
    return text.encode("utf-8", "replace").decode("utf-8")


def keyword_name(words: str, key: bytes) -> str:
    """The FTS name column: the name words plus the file name as written (so 'DOORWood' or a product code is
    found as typed)."""
    stem = os.path.splitext(os.fsdecode(key).rpartition("/")[2])[0]
    return text_safe(f"{words} {stem}".strip())


def all_tags(describing: str, credits: str) -> str:
    """The whole embedded tag text, as keywords and as the why-matched display show it."""
    return " · ".join(p for p in (describing, credits) if p)


def sentence(words: str, folder: str, tags: str, user_tags: Sequence[str]) -> str:
    """What the sentence encoder reads: the words that describe the sound, most telling first (long tag text is
    cut by the tokenizer's limit, never the name)."""
    parts = [words, ", ".join(user_tags), folder, tags]
    return ". ".join(p for p in parts if p.strip())


def digest(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def embed_sentences(encoder: TextEncoder, pending: Sequence[tuple[int, str]]
                    ) -> list[tuple[int, str, np.ndarray | None]]:
    """(file id, sentence) -> (file id, sentence, unit vector, or None for an empty sentence: its vector goes), the
    non-empty sentences in one batched call. A model giving NaN/inf is refused (BrokenModelError)."""
    texts = [t for _, t in pending if t]
    vecs = iter(np.asarray(encoder.embed_text(texts), np.float32) if texts else [])
    items = [(fid, text, next(vecs) if text else None) for fid, text in pending]
    if any(v is not None and not np.isfinite(v).all() for _, _, v in items):
        raise BrokenModelError(f"text model {encoder.model_id!r} produced NaN/inf: it is broken")
    return items


class TextChannel:
    """What names, folders and tags say about a library's files (`library.text`): their derived text, the
    keyword index (FTS5) and the sentence vectors (kept by `vectors`). The owner of the `texts` and `text_fts`
    tables."""

    def __init__(self, store: Catalog, vectors: VectorStore) -> None:
        self.catalog = store
        self.vectors = vectors
        self._reader: sqlite3.Connection | None = None  # keyword_search's read-only connection, opened on first use
        self._reader_lock: threading.Lock | threading.RLock = store.lock
        self.stored = 0  # texts stored since the library opened: searches read the words again as they grow

    # ----------------------------------------------------------------------------------- deriving, storing

    def register_model(self, encoder: TextEncoder) -> None:
        """Record (or check) the sentence encoder's dimension."""
        if not is_text_model(encoder.model_id):
            raise LibraryError(f"{encoder.model_id!r} is not a text model id (they start with {TEXT_PREFIX!r})")
        self.vectors.register_text_model(encoder.model_id, int(encoder.dim))

    def stale(self) -> list[tuple[int, bytes, int]]:
        """(file id, path, mtime) of readable files whose text is missing or was derived from another path, mtime
        or rule version."""
        with self.catalog.lock:
            rows = self.catalog.db.execute(
                "SELECT f.id, f.path, f.mtime_ns FROM files f LEFT JOIN texts t ON t.file_id = f.id"
                " WHERE f.status = 'ok' AND (t.file_id IS NULL OR t.path != f.path OR t.mtime_ns != f.mtime_ns"
                " OR t.version != ?) ORDER BY f.id", (TEXT_VERSION,)).fetchall()
        return [(r[0], bytes(r[1]), r[2]) for r in rows]

    def store(self, file_id: int, key: bytes, mtime_ns: int, text: DerivedText) -> bool:
        """Record a file's derived text and its keyword row; False when the file row is gone meanwhile."""
        with self.catalog.transaction() as db:
            if db.execute("SELECT 1 FROM files WHERE id = ?", (file_id,)).fetchone() is None:
                return False
            old = db.execute("SELECT embedded FROM texts WHERE file_id = ?", (file_id,)).fetchone()
            db.execute("INSERT OR REPLACE INTO texts(file_id, path, mtime_ns, version, name, folder, tags, credits,"
                       " problem, embedded) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       (file_id, key, mtime_ns, TEXT_VERSION, text.name, text.folder, text.tags, text.credits,
                        text.problem, old[0] if old else None))
            self.write_keywords(db, file_id)
        self.stored += 1
        return True

    @staticmethod
    def write_keywords(db: sqlite3.Connection, file_id: int) -> None:
        """Rewrite a file's keyword row from its texts row and user tags (no texts row yet: user tags only),
        inside the caller's transaction."""
        t = db.execute("SELECT name, folder, tags, path, credits FROM texts WHERE file_id = ?", (file_id,)).fetchone()
        user = [r[0] for r in db.execute("SELECT tag FROM user_tags WHERE file_id = ? ORDER BY tag", (file_id,))]
        db.execute("DELETE FROM text_fts WHERE rowid = ?", (file_id,))
        name, folder, tags = (keyword_name(t[0], bytes(t[3])), t[1], all_tags(t[2], t[4])) if t else ("", "", "")
        if t or user:
            db.execute("INSERT INTO text_fts(rowid, name, folder, tags, user_tags) VALUES (?, ?, ?, ?, ?)",
                       (file_id, name, folder, tags, " ; ".join(user)))

    def fold(self, db: sqlite3.Connection, named: int, moved: int) -> None:
        """A named row turned out to be a catalogued file that moved (inside the caller's transaction): the moved
        row takes the named row's text (derived from the new path); its keyword row is rewritten by `write_keywords`
        once the user's tags have moved too."""
        if db.execute("SELECT 1 FROM texts WHERE file_id = ?", (named,)).fetchone():
            db.execute("DELETE FROM texts WHERE file_id = ?", (moved,))
            db.execute("UPDATE texts SET file_id = ? WHERE file_id = ?", (moved, named))

    def rebuild(self) -> None:
        """After a salvage: derive the text of files that lost theirs (names, folders, embedded tags: no audio is
        read) and rewrite every keyword row (the keyword index is derived, never salvaged)."""
        for fid, key, mtime_ns in self.stale():
            self.store(fid, key, mtime_ns, derive_text(self.catalog.root, key))
        with self.catalog.transaction() as db:
            for (fid,) in db.execute("SELECT id FROM files").fetchall():
                self.write_keywords(db, fid)

    def pending_vectors(self, model_id: str, file_ids: Sequence[int] | None = None) -> list[tuple[int, str]]:
        """(file id, sentence) of files whose sentence vector is missing or was made from other words; files whose
        sentence is empty, and files that could not be read, come back with '' (their vector, if any, goes): a file
        named by the first pass whose audio then failed must not be found by its sentence (nor by any channel)."""
        with self.catalog.lock:
            q = ("SELECT t.file_id, t.name, t.folder, t.tags, t.embedded,"
                 " EXISTS(SELECT 1 FROM vectors v WHERE v.file_id = t.file_id AND v.model_id = ?),"
                 " (SELECT group_concat(tag, char(31)) FROM (SELECT tag FROM user_tags u WHERE u.file_id = t.file_id"
                 " ORDER BY tag)), f.status = 'ok' FROM texts t JOIN files f ON f.id = t.file_id")
            rows = []
            if file_ids is None:
                rows = self.catalog.db.execute(q, (model_id,)).fetchall()
            else:
                for part, marks in id_chunks(file_ids):
                    rows += self.catalog.db.execute(q + f" WHERE t.file_id IN ({marks})", (model_id, *part)
                                                    ).fetchall()
        out = []
        for fid, name, folder, tags, embedded, has_vector, user, readable in rows:
            text = sentence(name, folder, tags, user.split("\x1f") if user else []) if readable else ""
            if not text:
                if has_vector or embedded:
                    out.append((fid, ""))
            elif not has_vector or embedded != digest(text):
                out.append((fid, text))
        return out

    def store_vectors(self, model_id: str, items: Sequence[tuple[int, str, np.ndarray | None]]) -> None:
        """Replace the sentence vectors of files: (file id, sentence, unit vector (D,) or None to drop it)."""
        store = self.vectors
        removed: list[int] = []
        added: list[tuple[int, np.ndarray]] = []
        with self.catalog.transaction() as db:
            for fid, text, vec in items:
                if db.execute("SELECT 1 FROM files WHERE id = ?", (fid,)).fetchone() is None:
                    continue
                removed += store.drop(db, fid, model_id)
                if vec is not None:
                    v = normalise(np.asarray(vec, np.float32).reshape(-1))
                    added.append((store.insert(db, model_id, fid, v.tobytes(), 1, v.tobytes()), v))
                db.execute("UPDATE texts SET embedded = ? WHERE file_id = ?", (digest(text) if text else None, fid))
        with self.catalog.lock:
            store.unindex(removed)
            if added:
                store.add(model_id, [i for i, _ in added], np.stack([v for _, v in added]))

    def problems(self) -> list[FailedFile]:
        """Files whose embedded tags could not (all) be read: they are indexed by name and sound all the same."""
        with self.catalog.lock:
            rows = self.catalog.db.execute(
                "SELECT f.id, f.path, t.problem FROM texts t JOIN files f ON f.id = t.file_id"
                " WHERE t.problem IS NOT NULL ORDER BY f.path").fetchall()
        return [FailedFile(os.fsdecode(bytes(p)), e, i) for i, p, e in rows]

    # ------------------------------------------------------------------------------------------- searching

    def keyword_search(self, match: str, limit: int) -> list[tuple[int, float]]:
        """(file id, BM25 score, higher is better) of the best `limit` keyword matches of an FTS5 expression
        (built by app.services.search.query, which quotes every word: a user's query cannot be a syntax error).

        Runs on the catalog's read-only connection (committed rows), not under the library's lock, so a search
        can rank keywords on one core while it encodes the query on the other; falls back to the main connection
        when a reader cannot be opened."""
        sql = "SELECT rowid, rank FROM text_fts WHERE text_fts MATCH ? ORDER BY rank LIMIT ?"
        reader, guard = self._reader_and_lock()
        with guard:
            try:
                rows = reader.execute(sql, (match, int(limit))).fetchall()
            except sqlite3.OperationalError as e:
                if "fts5" in str(e) or "syntax" in str(e):
                    return []  # defence in depth: the query builder never produces one
                raise
        return [(int(r), -float(s)) for r, s in rows]

    def specific_match(self, parts: Sequence[str], cap: int) -> str | None:
        """The FTS5 expression OR-ing `parts`, without those that match `cap` files or more when another part is
        more specific: BM25 is computed for every file a query matches, so one common word ("water" in a library
        with a water folder of 100k files) would cost more than the rest of the search; it also weighs next to
        nothing in BM25 (low IDF), and the sentence vectors still read it."""
        if len(parts) < 2:
            return " OR ".join(parts) or None
        keep = [p for p, c in zip(parts, self.keyword_counts(parts, cap), strict=True) if c < cap]
        return " OR ".join(keep or parts)

    def keyword_counts(self, parts: Sequence[str], cap: int) -> list[int]:
        """How many files each FTS5 expression matches, counted up to `cap` (rowids only: no BM25, so a common
        word costs at most `cap` steps)."""
        out = []
        with self.catalog.lock:
            for part in parts:
                try:
                    out.append(self.catalog.db.execute(
                        "SELECT count(*) FROM (SELECT rowid FROM text_fts WHERE text_fts MATCH ? LIMIT ?)",
                        (part, int(cap))).fetchone()[0])
                except sqlite3.OperationalError:
                    out.append(0)
        return out

    def keyword_files(self, match: str) -> set[int]:
        """Every file matching an FTS5 expression (for exclusions)."""
        with self.catalog.lock:
            try:
                return {r[0] for r in self.catalog.db.execute("SELECT rowid FROM text_fts WHERE text_fts MATCH ?",
                                                              (match,))}
            except sqlite3.OperationalError:
                return set()

    def user_tagged(self, parts: Sequence[str]) -> set[int]:
        """The files whose own tags (user_tags) hold every one of a query's FTS5 parts: tagged with what was asked."""
        return self.keyword_files(" AND ".join(f"user_tags : {p}" for p in parts)) if parts else set()

    def words(self) -> list[str]:
        """The name and folder words of every file and the user's tags, one string per file: what a query's words
        are checked and corrected against (app/services/search/vocabulary.py; read once per index state)."""
        with self.catalog.lock:
            rows = self.catalog.db.execute(
                "SELECT t.name || ' ' || t.folder || ' ' || coalesce((SELECT group_concat(tag, ' ') FROM user_tags u"
                " WHERE u.file_id = t.file_id), '') FROM texts t").fetchall()
        return [r[0] for r in rows]

    def words_generation(self) -> str:
        """Changes whenever a name, folder, embedded tag or user tag does (catalog triggers), and with the catalog
        (one made anew counts from 0 again)."""
        with self.catalog.lock:
            rows = dict(self.catalog.db.execute("SELECT name, value FROM counters WHERE name IN ('words', 'catalog')"))
        return f"{rows.get('catalog', 0)}:{rows['words']}"

    def keyword_fields(self, file_ids: Sequence[int]) -> dict[int, tuple[str, str, str, str]]:
        """file id -> its keyword row as indexed (name words and the name as written, folder words, embedded tag
        text, user tags): what a query's words are checked against, word by word (search/keywords.py). Files
        without a row (nothing said of them yet) are left out."""
        out = {}
        reader, guard = self._reader_and_lock()
        with guard:
            for part, marks in id_chunks(file_ids):
                for fid, *cols in reader.execute(
                        f"SELECT rowid, name, folder, tags, user_tags FROM text_fts WHERE rowid IN ({marks})", part):
                    out[int(fid)] = tuple(c or "" for c in cols)
        return out  # type: ignore[return-value]

    def silent_files(self, file_ids: Sequence[int]) -> set[int]:
        """The files among `file_ids` whose name, folders and tags give no words (a recorder's or a hash name,
        nothing tagged): only their sound can say what they are."""
        out: set[int] = set()
        reader, guard = self._reader_and_lock()
        with guard:
            for part, marks in id_chunks(file_ids):
                out.update(r[0] for r in reader.execute(
                    f"SELECT t.file_id FROM texts t WHERE t.file_id IN ({marks}) AND t.name = '' AND t.folder = ''"
                    " AND t.tags = '' AND NOT EXISTS (SELECT 1 FROM user_tags u WHERE u.file_id = t.file_id)", part))
        return out

    def silent_file_ids(self) -> list[int]:
        """Every file whose name, folders and tags give no words (see silent_files), by id."""
        reader, guard = self._reader_and_lock()
        with guard:
            return [r[0] for r in reader.execute(
                "SELECT t.file_id FROM texts t WHERE t.name = '' AND t.folder = '' AND t.tags = '' AND NOT EXISTS"
                " (SELECT 1 FROM user_tags u WHERE u.file_id = t.file_id) ORDER BY t.file_id")]

    def has_silent_files(self) -> bool:
        """Whether any file's name, folders and tags give no words (one scan of the texts: callers keep the
        answer per words_generation)."""
        reader, guard = self._reader_and_lock()
        with guard:
            return reader.execute("SELECT EXISTS(SELECT 1 FROM texts WHERE name = '' AND folder = '' AND tags = '')"
                                  ).fetchone()[0] == 1

    def fields(self, file_ids: Sequence[int]) -> dict[int, tuple[str, str]]:
        """file id -> (path, embedded tag text) for the why-matched display."""
        out = {}
        with self.catalog.lock:
            for part, marks in id_chunks(file_ids):
                for fid, path, tags, credits in self.catalog.db.execute(
                        f"SELECT f.id, f.path, coalesce(t.tags, ''), coalesce(t.credits, '') FROM files f"
                        f" LEFT JOIN texts t ON t.file_id = f.id WHERE f.id IN ({marks})", part):
                    out[fid] = (os.fsdecode(bytes(path)), all_tags(tags, credits))
        return out

    # ---------------------------------------------------------------------------------- the read connection

    @property
    def reader(self) -> sqlite3.Connection | None:
        """The read-only connection keyword searches run on (None until the first one; the main connection
        when a reader could not be opened)."""
        return self._reader

    def close_reader(self) -> None:
        """Close the read-only connection (the library closes it when it closes)."""
        reader, self._reader = self._reader, None
        if reader is not None and reader is not self.catalog.db:
            with self._reader_lock:
                reader.close()

    def _reader_and_lock(self) -> tuple[sqlite3.Connection, threading.Lock | threading.RLock]:
        """The read-only connection to the catalog and its lock, opened on first use (WAL: it reads committed
        rows while the main connection writes); the main connection and the library's lock if it cannot open."""
        store = self.catalog
        with store.lock:
            if store.closed:
                raise LibraryError("the library is closed")
            if self._reader is None:
                self._reader = self._open_reader() or store.db
                self._reader_lock = store.lock if self._reader is store.db else threading.Lock()
            return self._reader, self._reader_lock

    def _open_reader(self) -> sqlite3.Connection | None:
        uri = self.catalog.path.resolve().as_uri() + "?mode=ro"
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

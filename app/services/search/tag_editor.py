"""The user's tags and favourites, with the text channel kept current; the tags CSV export and import.

Needs no retrieval model: the Search tab and the `earshot tags` command use it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from app.services.library.library import Library
from app.services.library.records import TextEncoder
from app.services.library.text_channel import embed_sentences
from app.services.search.embedder import DEFAULT_ENCODER, default_text_encoder
from app.services.search.tags_csv import Record, read_records, write_rows
from core.display import display_name

if TYPE_CHECKING:
    from app.services.search.text_tower import SentenceEncoder


@dataclass
class TagImport:
    """What `TagEditor.import_csv` did; nothing in the file is silently dropped."""

    rows: int = 0
    files: int = 0  # files whose tags or favourite mark changed
    tags_added: int = 0
    unknown: list[tuple[int, str]] = field(default_factory=list)  # (line, path) not in the library
    errors: list[tuple[int, str]] = field(default_factory=list)  # (line, what is wrong)


TAG_COLUMNS = ("path", "tags", "favourite")
_YES, _NO = {"1", "true", "yes", "y", "x", "*"}, {"0", "false", "no", "n"}


class TagEditor:
    """The user's tags and favourites of a library, with the text channel kept current: a tag change rewrites the
    file's keyword row at once and re-embeds only the changed files' sentences. Needs no retrieval model (the
    `earshot tags` command and the Search tab use it)."""

    def __init__(self, library: Library, text_encoder: SentenceEncoder | None | object = DEFAULT_ENCODER) -> None:
        self.library = library
        self.text_encoder: TextEncoder | None = default_text_encoder() if text_encoder is DEFAULT_ENCODER \
            else cast("TextEncoder | None", text_encoder)

    def add_tags(self, file_ids: Sequence[int], tags: Sequence[str]) -> list[int]:
        changed = self.library.user_tags.add(file_ids, tags)
        self.reembed(changed)
        return changed

    def remove_tags(self, file_ids: Sequence[int], tags: Sequence[str]) -> list[int]:
        changed = self.library.user_tags.remove(file_ids, tags)
        self.reembed(changed)
        return changed

    def reembed(self, file_ids: Sequence[int]) -> None:
        enc = self.text_encoder
        if enc is None or not file_ids:
            return
        lib = self.library
        lib.text.register_model(enc)
        lib.vectors.index(enc.model_id)  # loaded before the new vectors commit: no repair event for them
        pending = lib.text.pending_vectors(enc.model_id, file_ids)
        items = embed_sentences(enc, pending)  # one batched pass
        if items:
            lib.text.store_vectors(enc.model_id, items)
            lib.vectors.save(enc.model_id)

    def file_ids(self, paths: Sequence[str | os.PathLike[str]]) -> tuple[list[int], list[str]]:
        """Catalog ids of files given relative to the library or absolute inside it; (ids, unknown paths)."""
        ids, unknown = [], []
        for p in paths:
            fid = self.library.files.id_of(p)
            if fid is None:
                unknown.append(os.fspath(p))
            else:
                ids.append(fid)
        return ids, unknown

    def export_csv(self, fh: Any) -> int:  # noqa: ANN401 - a text file object
        """Write `path,tags,favourite` for every file with tags or a favourite mark (tags joined by ';'), each
        cell a spreadsheet would evaluate neutralised (tags_csv.py); returns the number of rows."""
        rows = ((path, ";".join(tags), "1" if fav else "") for path, tags, fav in self.library.user_tags.table())
        return write_rows(fh, TAG_COLUMNS, rows)

    def import_csv(self, path: str | os.PathLike[str]) -> TagImport:
        """Merge a `path,tags,favourite` CSV into the library: tags are added (none removed), favourite set when
        the column says yes/no (left alone when empty). Rows naming files not in the library, bad values and bad
        records (an over-long line, a quote that never closes: tags_csv.py) are reported with their line
        numbers; every other row is applied."""
        out = TagImport()
        changed: set[int] = set()
        with open(path, encoding="utf-8-sig", errors="surrogateescape", newline="") as fh, \
                self.library.user_tags.deferred():  # one mirror write for the whole file
            records = read_records(fh)
            columns = self._columns(path, next(records, None))
            for rec in records:
                out.rows += 1
                if rec.cells is None:
                    out.errors.append((rec.line, rec.error or "bad record"))
                    continue
                row = dict(zip(columns, rec.cells, strict=False))
                rel = (row.get("path") or "").strip()
                fid = self.library.files.id_of(rel) if rel else None
                if fid is None:
                    out.unknown.append((rec.line, rel))
                    continue
                try:
                    changed.update(self._apply_row(fid, row, out))
                except ValueError as e:
                    out.errors.append((rec.line, str(e)))
        out.files = len(changed)
        self.reembed(sorted(changed))
        return out

    @staticmethod
    def _columns(path: str | os.PathLike[str], header: Record | None) -> list[str]:
        names = [c.strip().lower() for c in header.cells] if header is not None and header.cells else []
        missing = [c for c in ("path", "tags") if c not in names]
        if missing:
            raise ValueError(f"{display_name(path)}: not a tags file (no {' or '.join(missing)} column; "
                             f"expected {','.join(TAG_COLUMNS)})")
        return names

    def _apply_row(self, fid: int, row: dict[str, str], out: TagImport) -> set[int]:
        """Add a row's tags and set its favourite mark; the files that changed."""
        tags = [t for t in (row.get("tags") or "").split(";") if t.strip()]
        fav = (row.get("favourite") or "").strip().lower()
        if fav and fav not in _YES | _NO:
            raise ValueError(f"favourite must be yes/no or 1/0, got {fav!r}")
        user_tags = self.library.user_tags
        before = set(user_tags.of(fid))
        changed = set(user_tags.add([fid], tags) if tags else [])
        out.tags_added += len(set(user_tags.of(fid)) - before)
        if fav:
            was = fid in user_tags.favourites([fid])
            user_tags.set_favourite([fid], fav in _YES)
            if was != (fav in _YES):
                changed.add(fid)
        return changed

"""Several library locations searched as one (issue 40, item 1): each keeps its own catalog and SearchSession;
this asks every one and merges their answers by score, so "the best of both" is one list.

What the Search tab and the CLI read of one session they read of a set: a hit's `file_id` is global (the
location's place in the set above ID_SHIFT bits, its own id below), its `rel_path` and `folder` start with the
location's name and `location` says it, so the folder tree's top level is the locations and a folder filter
"<location>/<folder>" reaches that location alone. Scores are comparable across locations: one model, one fusion
rule and one calibration (fusion.py) score every file, whatever library it is in.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.services.jobs import Job
from app.services.library.duplicates import ID_SHIFT, DuplicateGroup, find_duplicates_across
from app.services.library.locations import Location
from app.services.library.records import FailedFile, Hit, IndexReport, SearchFilters
from app.services.library.tag_writer import TagWrite
from app.services.search.answer import SearchAnswer
from app.services.search.browse import SORT_KEYS, Listed, listed_files
from app.services.search.candidates import explained_hits
from app.services.search.session import SearchSession, check_k
from core.display import natural_path_key

if TYPE_CHECKING:
    from app.services.search.embedder import RetrievalEmbedder

class LibrarySet:
    """Open sessions of named locations, searched together."""

    def __init__(self, parts: Sequence[tuple[str, SearchSession]]) -> None:
        if not parts:
            raise ValueError("a set of libraries needs at least one location")
        self.names = [name for name, _ in parts]
        self.sessions = [session for _, session in parts]
        self.embedder = self.sessions[0].embedder

    @classmethod
    def open(cls, locations: Sequence[Location], embedder: RetrievalEmbedder) -> LibrarySet:
        opened: list[tuple[str, SearchSession]] = []
        try:
            for loc in locations:
                opened.append((loc.name, SearchSession.open(loc.path, embedder)))
        except BaseException:
            for _, session in opened:
                session.close()
            raise
        return cls(opened)

    def close(self) -> None:
        for session in self.sessions:
            session.close()

    @property
    def closed(self) -> bool:
        return all(s.closed for s in self.sessions)

    @property
    def roots(self) -> list[Path]:
        return [s.root for s in self.sessions]

    # -- ids and places

    def global_id(self, part: int, file_id: int) -> int:
        return (part + 1) << ID_SHIFT | file_id

    def owner(self, global_id: int) -> tuple[int, int]:
        """(the location's place in the set, its own file id)."""
        part = (global_id >> ID_SHIFT) - 1
        if not 0 <= part < len(self.sessions):
            raise ValueError(f"file id {global_id} belongs to no location of this set")
        return part, global_id & ((1 << ID_SHIFT) - 1)

    def _scoped(self, filters: SearchFilters | None) -> list[tuple[int, SearchFilters | None]]:
        """The locations a search with these filters asks, each with its own filters: a folder filter starts with
        a location's name and reaches that location alone, its rest a folder inside it."""
        folder = filters.folder if filters is not None else None
        if not folder:
            return list(enumerate([filters] * len(self.sessions)))
        head, _, rest = folder.strip("/").partition("/")
        if head not in self.names:
            return []  # a folder of no location: nothing passes
        return [(self.names.index(head), dataclasses.replace(filters, folder=rest or None))]

    def _placed(self, part: int, hit: Hit) -> Hit:
        """The hit as the set shows it: a global id, paths from the location's name."""
        name = self.names[part]
        hit.file_id = self.global_id(part, hit.file_id)
        hit.rel_path = f"{name}/{hit.rel_path}"
        hit.folder = f"{name}/{hit.folder}" if hit.folder else name
        hit.location = name
        if hit.match is not None and hit.match.like_path:
            hit.match.like_path = f"{name}/{hit.match.like_path}"
        return hit

    # -- searching

    def search(self, text: Any, k: int = 10, filters: SearchFilters | None = None,  # noqa: ANN401 - str | Query
               mode: str = "both", names_weight: float | None = None, prefix_last: bool = False) -> SearchAnswer:
        """Every location's best k, merged by score: the set's best k."""
        answers = [(part, s.search(text, k, f, mode=mode, names_weight=names_weight, prefix_last=prefix_last))
                   for part, f in self._scoped(filters) for s in [self.sessions[part]]]
        return self._merged("text", answers, check_k(k))

    def similar(self, target: str | os.PathLike[str] | int, k: int = 10, filters: SearchFilters | None = None,
                names_weight: float | None = None, any_length: bool = False) -> SearchAnswer:
        """Sounds like a file of any location (by its global id or path) or an outside file, in every location."""
        path = self.path_of(target) if isinstance(target, int) else Path(os.fspath(target))
        home = self._home_of(path)
        answers = []
        for part, f in self._scoped(filters):
            session = self.sessions[part]
            own = part == home
            answers.append((part, session.similar(path, k, f, names_weight=names_weight, any_length=any_length,
                                                  sound_vector=None if own else self._stored(home, path))))
        return self._merged("similar", answers, check_k(k))

    def _home_of(self, path: Path) -> int | None:
        absolute = Path(os.path.abspath(path))
        return next((i for i, root in enumerate(self.roots) if absolute.is_relative_to(root)), None)

    def _stored(self, home: int | None, path: Path) -> Any:  # noqa: ANN401 - (D,) array or None
        """The stored sound vector of a file of the set (None: an outside file, embedded by each location)."""
        if home is None:
            return None
        session = self.sessions[home]
        return session.library.search.file_vector(path, session.embedder)[0]

    def _merged(self, kind: str, answers: list[tuple[int, SearchAnswer]], k: int) -> SearchAnswer:
        placed = [(self._placed(part, h), answer) for part, answer in answers for h in answer.hits]
        placed.sort(key=lambda pair: (-pair[0].score, natural_path_key(pair[0].rel_path)))
        out = SearchAnswer(kind, [h for h, _ in placed[:k]])
        if answers:
            first = answers[0][1]
            out.query = first.query
            out.corrected = next((a.corrected for _, a in answers if a.corrected is not None), None)
        best = placed[0][1] if placed else None
        out.no_good_match = best.no_good_match if best is not None else False
        return out

    def browse(self, filters: SearchFilters | None = None, sort: str = "name", descending: bool = False,
               offset: int = 0, limit: int = 50) -> SearchAnswer:
        """Every location's sounds passing the filters, sorted together, one page."""
        if sort not in SORT_KEYS:
            raise ValueError(f"sort must be one of {', '.join(SORT_KEYS)}, got {sort!r}")
        listed: list[tuple[int, Listed]] = []
        for part, f in self._scoped(filters):
            session = self.sessions[part]
            with session.library.guard():
                listed += [(part, dataclasses.replace(x, rel_path=f"{self.names[part]}/{x.rel_path}"))
                           for x in listed_files(session.library, f)]
        listed.sort(key=lambda pair: SORT_KEYS[sort](pair[1]), reverse=descending)
        page = listed[max(0, offset):max(0, offset) + max(0, limit)]
        hits: list[Hit] = []
        for part, x in page:
            session = self.sessions[part]
            got = explained_hits(session.library, [x.file_id], session.embedder.model_id, None)
            if x.file_id in got:
                hits.append(self._placed(part, got[x.file_id]))
        return SearchAnswer("browse", hits, total=len(listed), offset=max(0, offset))

    # -- what the Search tab reads of the catalogs

    def path_of(self, global_id: int) -> Path:
        part, fid = self.owner(global_id)
        session = self.sessions[part]
        row = session.library.files.row_of(fid)
        if not row:
            raise ValueError(f"file {global_id} is no longer in {self.names[part]}")
        return session.root / row[0]

    def folders(self) -> list[str]:
        out = []
        for name, session in zip(self.names, self.sessions, strict=True):
            out += [name, *(f"{name}/{f}" for f in session.folders())]
        return out

    def failed_files(self) -> list[FailedFile]:
        return [dataclasses.replace(f, path=f"{name}/{f.path}")
                for name, session in zip(self.names, self.sessions, strict=True) for f in session.failed_files()]

    def indexed_count(self) -> int:
        return sum(s.indexed_count() for s in self.sessions)

    def searchable_count(self, mode: str = "both") -> int:
        return sum(s.searchable_count(mode) for s in self.sessions)

    def category_counts(self) -> list[tuple[str, int]]:
        counts: dict[str, int] = {}
        for s in self.sessions:
            for category, n in s.category_counts():
                counts[category] = counts.get(category, 0) + n
        return sorted(counts.items())

    def unheard_by(self, model_name: str) -> tuple[int, float]:
        told = [s.unheard_by(model_name) for s in self.sessions]
        return sum(n for n, _ in told), sum(sec for _, sec in told)

    def all_tags(self) -> list[str]:
        return sorted({t for s in self.sessions for t in s.all_tags()})

    def tags_of(self, global_id: int) -> list[str]:
        part, fid = self.owner(global_id)
        return self.sessions[part].tags_of(fid)

    def add_tags(self, global_ids: Sequence[int], tags: Sequence[str]) -> list[int]:
        return self._routed(global_ids, lambda s, ids: s.add_tags(ids, tags))

    def remove_tags(self, global_ids: Sequence[int], tags: Sequence[str]) -> list[int]:
        return self._routed(global_ids, lambda s, ids: s.remove_tags(ids, tags))

    def set_favourite(self, global_ids: Sequence[int], on: bool) -> None:
        self._routed(global_ids, lambda s, ids: s.set_favourite(ids, on))

    def _routed(self, global_ids: Sequence[int], call: Callable[[SearchSession, list[int]], Any]) -> list[int]:
        """`call` on each location with its own ids; the global ids of what it returned (a list of ids)."""
        out: list[int] = []
        for part, ids in self._by_part(global_ids).items():
            got = call(self.sessions[part], ids)
            out += [self.global_id(part, f) for f in got or []]
        return out

    def window_scores(self, hit: Hit, query: Any = None) -> Any:  # noqa: ANN401 - as SearchSession's
        part, fid = self.owner(hit.file_id)
        return self.sessions[part].window_scores(dataclasses.replace(hit, file_id=fid), query)

    def write_tags_job(self, global_ids: Sequence[int]) -> Job[list[TagWrite]]:
        out: list[TagWrite] = []
        for part, ids in self._by_part(global_ids).items():
            out += yield from self.sessions[part].write_tags_job(ids)
        return out

    def file_path(self, rel_path: str) -> Path:
        """A file by the path the set's hits and duplicate groups give ("<location>/<path in it>")."""
        head, _, rest = rel_path.partition("/")
        return self.sessions[self.names.index(head)].file_path(rest)

    def one_location(self, global_ids: Sequence[int]) -> tuple[SearchSession, list[int]]:
        """The location holding all these files and their ids there (renaming works in one catalog at a time)."""
        parts = self._by_part(global_ids)
        if len(parts) != 1:
            where = " and ".join(self.names[p] for p in sorted(parts))
            raise ValueError(f"the sounds chosen are in {where}: choose sounds of one location at a time")
        part, ids = next(iter(parts.items()))
        return self.sessions[part], ids

    def duplicates_job(self, path: str | os.PathLike[str] | None = None) -> Job[list[DuplicateGroup]]:
        """The groups of duplicates over every location, copies from one location in another too (or only the
        group of the file at `path`), paths from the location's name."""
        wanted = None
        if path is not None:
            home = self._home_of(Path(os.fspath(path)))
            fid = self.sessions[home].library.files.id_of(path) if home is not None else None
            if fid is None:
                raise ValueError(f"{os.fspath(path)} is in none of the libraries searched (index it first?)")
            wanted = self.global_id(home, fid)
        libs = [(name, s.library) for name, s in zip(self.names, self.sessions, strict=True)]
        groups = yield from find_duplicates_across(libs, self.embedder.model_id)
        return [g for g in groups if wanted is None or any(f.file_id == wanted for f in g.files)]

    def _by_part(self, global_ids: Sequence[int]) -> dict[int, list[int]]:
        by_part: dict[int, list[int]] = {}
        for g in global_ids:
            part, fid = self.owner(g)
            by_part.setdefault(part, []).append(fid)
        return by_part

    # -- indexing

    def index_job(self, **kwargs: Any) -> Job[IndexReport]:
        """Each location indexed in turn; one report of them all."""
        reports = []
        for name, session in zip(self.names, self.sessions, strict=True):
            yield {"message": f"indexing {name}"}
            reports.append((name, (yield from session.index_job(**kwargs))))
        return merged_report(reports)

    @property
    def root(self) -> Path:
        return self.sessions[0].root

    def __iter__(self) -> Iterator[tuple[str, SearchSession]]:
        return iter(zip(self.names, self.sessions, strict=True))


def open_set_job(locations: Sequence[Location], embedder: RetrievalEmbedder) -> Job[LibrarySet]:
    yield {"message": f"opening {', '.join(loc.name for loc in locations)}"}
    return LibrarySet.open(locations, embedder)


def each_session(session: SearchSession | LibrarySet) -> list[SearchSession]:
    """The sessions of a set, or the one session."""
    return list(session.sessions) if isinstance(session, LibrarySet) else [session]


def merged_report(reports: Sequence[tuple[str, IndexReport]]) -> IndexReport:
    """The locations' index reports as one: counts added, paths from each location's name."""
    out = IndexReport(reports[0][1].model_id if reports else "")
    for name, r in reports:
        for f in dataclasses.fields(IndexReport):
            mine, theirs = getattr(out, f.name), getattr(r, f.name)
            if f.name == "model_id":
                continue
            if f.name == "scan_errors":
                mine += [f"{name}: {x}" for x in theirs]
            elif isinstance(theirs, list):
                mine += [f"{name}/{x}" if isinstance(x, str) else dataclasses.replace(x, path=f"{name}/{x.path}")
                         for x in theirs]
            else:
                setattr(out, f.name, mine + theirs)
    return out

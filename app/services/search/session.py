"""`SearchSession`: one open `Library` and one retrieval model, and every search over them.

Text search runs two channels and fuses them (fusion.py): what files are called and tagged (keywords with BM25,
MiniLM sentence vectors; the library's text channel) and what they sound like (the retrieval model's text
tower against the library's audio vectors). "Find similar" starts from a file's stored vector. Each hit says
why it matched (the query words found in its name, folder and tags, and each channel's score).
"""

from __future__ import annotations

import functools
import itertools
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from app.services.jobs import Job
from app.services.library import names, renames
from app.services.library.categories import shown
from app.services.library.duplicates import DuplicateGroup, find_duplicates
from app.services.library.embedding import window_starts
from app.services.library.indexer import index_library
from app.services.library.library import Library
from app.services.library.records import (
    FailedFile,
    Hit,
    IndexReport,
    LibraryStats,
    MatchInfo,
    SearchFilters,
)
from app.services.library.renames import Rename, RenameReport
from app.services.library.tag_writer import TagWrite, write_library_tags
from app.services.library.text_channel import sentence
from app.services.library.vector_search import refuse_broken
from app.services.search import fusion, keywords, sounds_like
from app.services.search.answer import SearchAnswer
from app.services.search.browse import browse
from app.services.search.candidates import (
    CandidateRequest,
    Candidates,
    QueryVectors,
    explained_hits,
    fill,
    gather,
    sound_neighbours,
)
from app.services.search.embedder import DEFAULT_ENCODER, RetrievalEmbedder, cap_threads, sentence_encoder_for
from app.services.search.fusion import CANDIDATES, NAMES_MIN, Scores, check_mode, fused_ranking, fusion_weight
from app.services.search.name_suggestions import Suggestion, suggest_names
from app.services.search.query import Query, parse
from app.services.search.sound_categories import CategoryWords, SilentCategories, category_text
from app.services.search.tag_editor import TagEditor
from app.services.search.text_tower import TextTower as TextTowerType
from app.services.search.thesaurus import Thesaurus
from app.services.search.thesaurus import load as load_thesaurus
from app.services.search.vocabulary import Vocabulary, cached_counts, english_words
from core.audio import AudioError, audio_info
from core.display import display_name, natural_path_key

T = TypeVar("T")
VOCABULARY_REFRESH_S = 30.0  # the library's words are read again at most this often while its index changes,
VOCABULARY_GROWTH = 1.25  # or at once when the words come from this many times more files (the first pass)
VOCABULARY_FILE = "vocabulary.json"  # beside the catalog: the word counts of its names, folders and tags
SIMILAR_LENGTH = 4.0  # find similar, same length: at most this many times shorter or longer than the sound started
SIMILAR_SLACK_S = 1.0  # from, plus this (a 0.1-s click still finds 1-s hits; a 1-s one-shot finds 0.25..5 s)

if TYPE_CHECKING:
    from app.services.library.vector_index import IndexConfig
    from app.services.search.text_tower import SentenceEncoder


def guarded(method: Callable[..., T]) -> Callable[..., T]:
    """Damage met in the catalog while `method` reads it becomes a LibraryError that says so (Library.guard)."""
    @functools.wraps(method)
    def wrapper(self: SearchSession, *args: Any, **kwargs: Any) -> T:
        with self.library.guard():
            return method(self, *args, **kwargs)
    return wrapper


@dataclass
class WindowScores:
    """Similarity of each window of a file to a query: where in a long file the match is."""

    starts: np.ndarray  # (W,) seconds where each window starts
    scores: np.ndarray  # (W,) cosine similarity
    window_seconds: float

    @property
    def best_start(self) -> float:
        return float(self.starts[int(np.argmax(self.scores))]) if len(self.scores) else 0.0


class SearchSession:
    """An open library and the retrieval model whose index it searches."""

    def __init__(self, library: Library, embedder: RetrievalEmbedder,
                 text_encoder: SentenceEncoder | None | object = DEFAULT_ENCODER) -> None:
        self.library = library
        self.embedder = embedder
        self._text_encoder = text_encoder  # DEFAULT_ENCODER: the default MiniLM, loaded on first use
        self._vocab: tuple[str, float, Vocabulary, int] | None = None  # (words generation, when read, the words,
        # texts stored then)
        self._english: frozenset[str] | None = None  # the sentence encoder's whole-word tokens
        self.synonyms = True  # read query and name words through thesaurus.py (UCS and the user's file)
        self.rule = fusion.FusionRule()  # the shipped fusion (benchmarks replay others, e.g. category_gain 0)
        self.category_text: Callable[[str], str] = category_text  # the sentence a sound category is read as
        self._silent: tuple[str, bool] | None = None  # (words generation, whether some file's names are silent)
        self._library_keys: tuple[Vocabulary, frozenset[str]] | None = None  # the inflection keys of its words
        self._categorised: tuple[tuple[str, int], SilentCategories] | None = None  # ((words generation, sound
        # vectors), the silent files' sound categories then)
        self._category_words: CategoryWords | None = None  # the categories' sentence vectors

    @classmethod
    def open(cls, path: str | os.PathLike[str], embedder: RetrievalEmbedder,
             index_config: IndexConfig | None = None) -> SearchSession:
        return cls(Library.open(path, index_config), embedder)

    def close(self) -> None:
        self.library.close()

    @property
    def root(self) -> Path:
        return self.library.root

    @property
    def closed(self) -> bool:
        return self.library.closed

    # -- indexing

    def index_job(self, workers: int | None = None, **kwargs: Any) -> Job[IndexReport]:
        """The library's incremental indexing job, with threads capped so that a core stays free."""
        cap_threads()
        readers = workers or (1 if (os.cpu_count() or 2) <= 2 else 2)
        return self._guarded(index_library(self.library, self.embedder, workers=readers,
                                           text_encoder=self.text_encoder, **kwargs))

    def _guarded(self, job: Job[Any]) -> Job[Any]:
        with self.library.guard():
            return (yield from job)

    # -- searching

    @guarded
    def search(self, text: str | Query, k: int = 10, filters: SearchFilters | None = None, mode: str = "both",
               names_weight: float | None = None, prefix_last: bool = False) -> SearchAnswer:
        """The k files that best match a query, by what they are called and tagged (`names`), by what they sound
        like (`sound`), or both fused (`both`, the default; `names_weight` in [0, 1] overrides the tuned weight
        of the names). `text` is parsed once here (or given parsed: the CLI checks it first); query syntax:
        `-word` excludes and `"exact phrase"` is required (both in every mode: the names, folder or tags of every
        result hold the phrase), `word*` prefix.
        Words are read against the library's own (vocabulary.py): a typo is corrected (`corrected`), compounds
        split and joined, numbers matched as digits and words; `prefix_last`: the last word also matches as a
        prefix (the Search tab, while the user types). `no_good_match`: the best hit's calibrated score is below
        the threshold that says it is unrelated (fusion.confidence). A query over query.MAX_QUERY_CHARS is
        searched by its first characters only (`shortened_from`)."""
        check_mode(mode)
        w = fusion_weight(mode, names_weight)
        query = text if isinstance(text, Query) else parse(text)
        answer = SearchAnswer("text", query=query)
        if query.empty:
            return answer
        enc = self.text_encoder
        models = [self.embedder.model_id] + ([enc.model_id] if enc is not None else [])
        *indexed, files = self._counts(models)
        # searchable while indexing runs: names as soon as the first pass has them, sounds as they are embedded
        k = min(check_k(k), max(*indexed, files) if w > 0 else indexed[0])
        names = w > 0 and enc is not None and indexed[-1] > 0
        vocab = self._vocabulary(self.library.text.stored) if k and w > 0 else None
        answer.corrected = query.corrected(vocab, prefix_last)
        shown = answer.corrected or query  # the corrected words are the ones embedded and highlighted
        encode = functools.partial(self.encode_query, shown.free_text, sound=w < 1, names=names)
        if not k:
            encode()  # even with nothing indexed: a broken (NaN/Inf) model is reported, not "no results"
            answer.corrected = None
            return answer
        request = CandidateRequest(
            sound_model=self.embedder.model_id, text_model=enc.model_id if enc is not None else None,
            n=k if w == 0 else max(k, CANDIDATES),
            keyword_parts=tuple(query.fts_parts(vocab, prefix_last)) if w > 0 else (),
            exclude=query.fts_exclude(), require=query.fts_require(prefix_last),
            common_cap=max(fusion.COMMON_MIN, int(fusion.COMMON_SHARE * max(indexed))),
            filters=filters, sound_only=w == 0)
        found = gather(self.library, request, encode)
        if w > 0:  # every candidate's words read against the query's (FTS5 cast the net), synonyms too
            readings = keywords.query_readings(query, vocab, prefix_last, self._synonyms_of(vocab))
            found.keyword = keywords.strengths(readings, self.library.text.keyword_fields(found.ids()),
                                               vocab.frequency if vocab is not None else lambda _w: 1, max(indexed))
        if w == 0:
            ranked = sound_ranking(found.sound, k)
        else:
            ranked = self._fused(found, request, w)
            if mode == "names":
                ranked = [r for r in ranked if r[1].keyword > 0 or r[1].name > NAMES_MIN]
        answer.hits = self._hits(ranked, k, found.query.sound, shown, sound_only=w == 0)
        answer.no_good_match = not ranked or fusion.no_good_match(ranked[0][1], w)
        return answer

    def _fused(self, found: Candidates, request: CandidateRequest, w: float) -> list[tuple[int, Scores]]:
        """The candidates fused; files whose names say nothing are scored by what their sound's categories say
        (the best of them found anywhere in the library) and, with sound in the mix, by their sound and lifted
        beside the best named matches they sound like (sounds_like.py), found anywhere near those matches."""
        lib = self.library
        categories = self.rule.category_gain > 0
        # names mode is what the names say; without sound or categories a silent file has nothing to say
        any_silent = w < 1 and (found.query.sound is not None or categories) and self._any_silent()
        heard = self._heard(found, request) if any_silent and categories else {}
        silent = lib.text.silent_files(found.ids()) if any_silent else set()
        ranked = fused_ranking(found.keyword, found.semantic, found.sound, w, self.rule, tagged=found.tagged,
                               silent=silent, heard=heard)
        if not (any_silent and found.query.sound is not None):
            return ranked
        model = self.embedder.model_id
        top = lib.vectors.of_files(model, [f for f, _ in sounds_like.vouchers(ranked)])
        new = sound_neighbours(lib, found, request, list(top.values()))
        if new:
            silent |= lib.text.silent_files(new)
            ranked = fused_ranking(found.keyword, found.semantic, found.sound, w, self.rule, tagged=found.tagged,
                                   silent=silent, heard=heard)
        vectors = {**top, **lib.vectors.of_files(model, [f for f, sc in ranked if sc.silent])}
        return sounds_like.lift(ranked, {f: v / max(float(np.linalg.norm(v)), 1e-12) for f, v in vectors.items()},
                                self.rule)

    def _heard(self, found: Candidates, request: CandidateRequest) -> dict[int, tuple[float, str]]:
        """What the silent files' sound categories say to the query (file id -> (cosine, category)), above the
        names' floor; the best `request.n` of them the filters allow join the candidates."""
        enc = self.text_encoder
        if found.query.text is None or enc is None:
            return {}
        heard = self._silent_categories().heard_as(found.query.text, self._words_of(enc), fusion.SEM_FLOOR)
        skip = set(found.skip)
        known = set(found.ids())
        new = [f for f in heard if f not in known and f not in skip and (found.within is None or f in found.within)]
        allowed = self.library.search.allowed_files(new[: 4 * request.n], request.filters)
        new = [f for f in new if f in allowed][: request.n]
        if new:
            if found.query.sound is not None:
                fill(self.library, found.sound, new, request.sound_model, found.query.sound)
            if request.text_model is not None:
                fill(self.library, found.semantic, new, request.text_model, found.query.text)
        keep = known | set(new)
        return {f: v for f, v in heard.items() if f in keep}

    def _silent_categories(self) -> SilentCategories:
        """The silent files' sound categories, read again when the texts or the sound vectors change."""
        lib = self.library
        key = (lib.text.words_generation(), lib.vectors.count(self.embedder.model_id))
        if self._categorised is None or self._categorised[0] != key:
            files = lib.vectors.categories_of(self.embedder.model_id, lib.text.silent_file_ids())
            self._categorised = (key, SilentCategories.of(files))
        return self._categorised[1]

    def _words_of(self, enc: SentenceEncoder) -> CategoryWords:
        words = self._category_words
        if words is None or words.encode != enc.embed_text or words.text is not self.category_text:
            self._category_words = CategoryWords(enc.embed_text, self.category_text)
        return self._category_words

    def _synonyms_of(self, vocab: Vocabulary | None) -> Callable[[str], dict[str, float]] | None:
        """A word's synonyms that the library's names, folders or user tags use (one it never uses there can match
        no name: checking hundreds of them cost a search several milliseconds; one only in embedded tags is
        not read); None without synonyms."""
        thesaurus = self.thesaurus
        if thesaurus is None:
            return None
        if vocab is None:
            return thesaurus.of
        if self._library_keys is None or self._library_keys[0] is not vocab:
            self._library_keys = (vocab, frozenset(keywords.inflection_key(w) for w in vocab.counts))
        used = self._library_keys[1]
        return lambda word: {k: v for k, v in thesaurus.of(word).items() if k in used}

    def _any_silent(self) -> bool:
        """Whether the library has files whose names say nothing, read again when its texts change."""
        generation = self.library.text.words_generation()
        if self._silent is None or self._silent[0] != generation:
            self._silent = (generation, self.library.text.has_silent_files())
        return self._silent[1]

    def _counts(self, model_ids: Sequence[str]) -> list[int]:
        """How many vectors each model's index holds and, last, an upper bound on the files catalogued (ids are
        never reused): while indexing runs, names are searchable before their files have any vector. Runs on
        every keystroke: in memory, and one indexed lookup, under the catalog's lock."""
        lib = self.library
        with lib.lock:
            return [*lib.vectors.counts(model_ids), lib.files.id_bound()]

    def _vocabulary(self, stored: int) -> Vocabulary:
        """The library's words (and the sentence encoder's English ones), read again when its names, folders or
        tags changed, at most every VOCABULARY_REFRESH_S (not on every keystroke while an index runs), but at once
        while the first pass multiplies them (`stored`: texts stored since opening; a query typed early must not
        be "corrected" towards the few names known then). Kept beside the catalog, so that a large library's
        first query does not count them again."""
        now = time.monotonic()
        old = self._vocab
        growing = old is not None and stored > VOCABULARY_GROWTH * old[3]
        if old is not None and now - old[1] < VOCABULARY_REFRESH_S and not growing:
            return old[2]
        generation = self.library.text.words_generation()
        if old is None or old[0] != generation:
            if self._english is None:
                tokenizer = getattr(self.text_encoder, "tokenizer", None)
                self._english = english_words(tokenizer.get_vocab() if tokenizer is not None else ())
            counts = cached_counts(self.library.catalog_dir / VOCABULARY_FILE, generation, self.library.text.words,
                                   write=not self.library.read_only)
            self._vocab = (generation, now, Vocabulary(counts, self._english), stored)
        else:
            self._vocab = (generation, now, old[2], stored)
        return self._vocab[2]

    def encode_query(self, text: str, sound: bool = True, names: bool = True) -> QueryVectors:
        """The query's vector in the sound space (the retrieval model's text tower) and its sentence vector (the
        names' encoder), each when asked. When the text tower is the frozen MiniLM that also makes the sentence
        vectors, one forward pass gives both (half the query-encoding time)."""
        enc = self.text_encoder if names else None
        tower = (getattr(self.embedder, "text_tower", None) or self.embedder) if sound else None
        if sound and enc is not None and isinstance(tower, TextTowerType) and isinstance(enc, TextTowerType) \
                and tower.shares_encoder_with(enc):
            vectors = QueryVectors(*tower.embed_with_mean(text))
        else:
            vectors = QueryVectors(self.embedder.embed_text([text])[0] if sound else None,
                                   enc.embed_text([text])[0] if enc is not None else None)
        for model_id, v in ((self.embedder.model_id, vectors.sound), (enc.model_id if enc else "", vectors.text)):
            if v is not None:  # checked here too: with nothing indexed, a broken model must not say "no results"
                refuse_broken(v, model_id)
        return vectors

    @guarded
    def similar(self, path_or_file_id: str | os.PathLike[str] | int, k: int = 10,
                filters: SearchFilters | None = None, names_weight: float | None = None,
                any_length: bool = False, sound_vector: np.ndarray | None = None) -> SearchAnswer:
        """Files that sound like a file (its stored vector; a file outside the library is embedded first, unless
        its vector is given as `sound_vector`: another location's stored one, library_set.py), through
        the same candidate gatherer as a text search; names_weight > 0 adds how alike their names and tags are
        (the MiniLM sentence vectors), fused with the same rule. Only files of a similar length unless
        `any_length` (`similar_lengths`): a one-shot finds one-shots, not the music and ambiences whose average
        sounds alike."""
        answer = SearchAnswer("similar")
        k = self.capped_k(k)
        if k == 0:
            return answer
        lib = self.library
        fid = path_or_file_id if isinstance(path_or_file_id, int) else lib.files.id_of(path_or_file_id)
        if not any_length:
            filters = similar_lengths(filters, self._duration_of(path_or_file_id, fid))
        if sound_vector is not None and fid is None:
            sound_q = np.asarray(sound_vector, dtype=np.float32)  # (D,)
        else:
            sound_q, fid = lib.search.file_vector(path_or_file_id if fid is None else fid, self.embedder)  # (D,)
        enc = self.text_encoder if names_weight else None
        text_q = self._file_sentence_vector(path_or_file_id, fid) if enc is not None else None
        request = CandidateRequest(
            sound_model=self.embedder.model_id, text_model=enc.model_id if text_q is not None else None,
            n=max(k, CANDIDATES) if names_weight else k, filters=filters, sound_only=not names_weight,
            exclude_ids=(fid,) if fid is not None else ())
        found = gather(lib, request, lambda: QueryVectors(sound_q, text_q))
        if names_weight:
            ranked = fused_ranking({}, found.semantic, found.sound, fusion_weight("both", names_weight))
        else:
            ranked = sound_ranking(found.sound, k)
        answer.hits = self._hits(ranked, k, sound_q, None, sound_only=not names_weight)
        return answer

    def _duration_of(self, path_or_file_id: str | os.PathLike[str] | int, fid: int | None) -> float | None:
        """The length of the sound to find similar ones to: the catalog's (file `fid`), or the header of a file
        outside (fid None)."""
        if fid is not None:
            return self.library.files.duration_of(fid)
        try:
            return audio_info(path_or_file_id).duration
        except (AudioError, OSError):
            return None  # the search says what is wrong with it

    def _hits(self, ranked: list[tuple[int, Scores]], k: int, sound_q: np.ndarray | None, query: Query | None,
              sound_only: bool = False) -> list[Hit]:
        """The best k of a ranking as hits, with their scores and why they matched (one library call)."""
        top = ranked[:k]
        hits = explained_hits(self.library, [f for f, _ in top], self.embedder.model_id, sound_q)
        out = []
        for fid, sc in top:
            h = hits.get(fid)
            if h is None:
                continue
            h.score = sc.fused
            m = h.match or MatchInfo()
            m.sound_score, m.heard = sc.sound_raw, sc.heard
            if not sound_only:
                m.name_score, m.keyword_score, m.semantic_score, m.sound_norm = sc.name, sc.keyword, \
                    sc.semantic_raw, sc.sound
            m.found_by = found_by(sc, sound_only)
            m.category = (sc.category or "") if m.found_by == "category" else ""
            if sc.like is not None:
                m.like_path = hits[sc.like].rel_path if sc.like in hits else self._rel_path(sc.like)
            if query is not None:
                m.spans, m.matched_terms = highlight(m.fields, query)
            h.match = m
            out.append(h)
        return natural_ties(out)

    def _rel_path(self, file_id: int) -> str:
        row = self.library.files.row_of(file_id)
        return row[0] if row else ""

    def _file_sentence_vector(self, path_or_file_id: str | os.PathLike[str] | int, fid: int | None
                              ) -> np.ndarray | None:
        """The text vector of a catalogued file, or of an outside file's name and folder words."""
        enc = self.text_encoder
        if enc is None:
            return None
        if fid is not None:
            return self.library.vectors.of_files(enc.model_id, [fid]).get(fid)
        p = Path(os.fspath(path_or_file_id))
        text = sentence(" ".join(names.name_words(p.stem)), " ".join(names.folder_words(p.parent.name)), "", [])
        return enc.embed_text([text])[0] if text else None

    # -- the user's tags and favourites (the Search tab's tag editing; `earshot tags`)

    @property
    def tags(self) -> TagEditor:
        return TagEditor(self.library, self.text_encoder)

    @guarded
    def add_tags(self, file_ids: Sequence[int], tags: Sequence[str]) -> list[int]:
        """Tag files (several at once); only the changed files' sentence vectors are embedded again. Returns the
        files whose tags changed; ValueError for a bad tag, LibraryError for an unknown file id (nothing changed)."""
        return self.tags.add_tags(file_ids, tags)

    @guarded
    def remove_tags(self, file_ids: Sequence[int], tags: Sequence[str]) -> list[int]:
        return self.tags.remove_tags(file_ids, tags)

    @guarded
    def set_favourite(self, file_ids: Sequence[int], on: bool) -> None:
        self.library.user_tags.set_favourite(file_ids, on)

    @guarded
    def tags_of(self, file_id: int) -> list[str]:
        return self.library.user_tags.of(file_id)

    @guarded
    def all_tags(self) -> list[str]:
        return self.library.user_tags.all()

    @property
    def thesaurus(self) -> Thesaurus | None:
        """UCS's synonyms and the user's own (thesaurus.py), when `synonyms` is on."""
        return load_thesaurus() if self.synonyms else None

    @property
    def text_encoder(self) -> SentenceEncoder | None:
        """The MiniLM sentence encoder of the text channel (NumPy), loaded once; None when not installed."""
        if self._text_encoder is DEFAULT_ENCODER:
            self._text_encoder = sentence_encoder_for(self.embedder)
        return self._text_encoder  # type: ignore[return-value]

    def capped_k(self, k: int) -> int:
        """k validated (a whole number >= 1) and capped at the number of indexed files: asking for a billion
        results must not allocate a billion result slots."""
        k = check_k(k)
        return min(k, self.library.vectors.count(self.embedder.model_id))  # in memory: runs on every keystroke

    @guarded
    def window_scores(self, hit: Hit, query: str | np.ndarray | None = None) -> WindowScores:
        """Per-window similarity of a hit's file: to the query it was found by (None), a text or a vector."""
        step = self.embedder.window_seconds
        if query is None:
            scores = np.asarray(hit.window_scores, dtype=np.float32)
        else:
            q = self.embedder.embed_text([query])[0] if isinstance(query, str) else np.asarray(query, np.float32)
            q = q / max(float(np.linalg.norm(q)), 1e-12)  # (D,)
            scores = self._windows(hit.file_id) @ q  # (W,)
        return WindowScores(window_starts(hit.duration, step, len(scores)).astype(np.float32), scores, step)

    def _windows(self, file_id: int) -> np.ndarray:
        """A file's window vectors (W, D) for the session's model; (0, D) when it has none."""
        windows = self.library.vectors.windows(self.embedder.model_id, file_id)
        return windows if windows is not None else np.zeros((0, self.embedder.dim), np.float32)

    # -- catalog views

    @guarded
    def failed_files(self) -> list[FailedFile]:
        return self.library.files.failed()

    @guarded
    def stats(self) -> LibraryStats:
        return self.library.stats()

    def searchable_count(self, mode: str = "both") -> int:
        """How many files a search in `mode` can find now: while indexing runs, names are searchable before the
        sounds are embedded."""
        sound = self.library.vectors.count(self.embedder.model_id)
        return sound if check_mode(mode) == "sound" else max(sound, self.library.files.count())

    def indexed_count(self) -> int:
        return int(self.stats().vectors.get(self.embedder.model_id, 0))

    @guarded
    def folders(self) -> list[str]:
        """Relative folders holding catalogued sounds (and their parents), sorted; '' (the root) excluded."""
        return self.library.files.folders()

    def duplicates_job(self, path: str | os.PathLike[str] | None = None) -> Job[list[DuplicateGroup]]:
        """The library's groups of duplicates (duplicates.py), or only those of the library file at `path`
        (ValueError when it is not catalogued, or has no sound vector yet)."""
        file_id = None
        if path is not None:
            file_id = self.library.files.id_of(path)
            if file_id is None:
                raise ValueError(f"{display_name(path)} is not in the library (index it first?)")
        model = self.embedder.model_id
        if file_id is not None and not self.library.vectors.of_files(model, [file_id]):
            raise ValueError(f"{display_name(path)} has no sound vector yet: index the library first")
        return find_duplicates(self.library, model, file_id=file_id)

    def browse(self, filters: SearchFilters | None = None, sort: str = "name", descending: bool = False,
               offset: int = 0, limit: int = 50) -> SearchAnswer:
        """The library's sounds passing the filters, sorted, one page (browse.py)."""
        with self.library.guard():
            return browse(self.library, self.embedder.model_id, filters, sort, descending, offset, limit)

    def write_tags_job(self, file_ids: Sequence[int]) -> Job[list[TagWrite]]:
        """Write the files' user tags into the files (tag_writer.py: verified, atomic)."""
        return write_library_tags(self.library, list(file_ids))

    def file_path(self, rel_path: str) -> Path:
        """A file of the library by the path its hits and duplicate groups give."""
        return self.root / rel_path

    def one_location(self, file_ids: Sequence[int]) -> tuple[SearchSession, list[int]]:
        """The session that holds these files, and their ids in it: this one (a set has several)."""
        return self, list(file_ids)

    @guarded
    def suggest_names(self, file_ids: Sequence[int]) -> list[Suggestion]:
        """UCS-style names for these files from the named sounds they sound like (name_suggestions.py)."""
        return suggest_names(self.library, self.embedder.model_id, file_ids)

    def rename_job(self, batch: Sequence[Rename]) -> Job[RenameReport]:
        """Rename the files (renames.py: atomic per file, journalled for undo); the next index run moves their
        rows (tags, favourites, vectors kept)."""
        return renames.apply(self.library, batch)

    def undo_renames_job(self) -> Job[RenameReport]:
        """Put the last renamed batch back."""
        return renames.undo(self.library)

    def renames_to_undo(self) -> int:
        return len(renames.last_batch(self.library))

    def describe_job(self, descriptions: Mapping[int, str]) -> Job[list[TagWrite]]:
        """Write each file's text as its description (tag_writer.py: verified, atomic)."""
        out: list[TagWrite] = []
        for fid, text in descriptions.items():
            out += yield from write_library_tags(self.library, [fid], description=text)
        return out

    @guarded
    def unheard_by(self, model_name: str) -> tuple[int, float]:
        """(files, seconds of audio) of the library's readable sounds that no model of this name has a vector for:
        what choosing it would embed (a name it was never used under: all of them)."""
        with self.library.lock:
            row = self.library.db.execute(
                "SELECT count(*), coalesce(sum(f.duration), 0) FROM files f WHERE f.status = 'ok' AND NOT EXISTS"
                " (SELECT 1 FROM vectors v WHERE v.file_id = f.id AND v.model_id IN (SELECT model_id FROM models"
                " WHERE substr(model_id, 1, ?) = ?))", (len(model_name) + 1, model_name + "-")).fetchone()
        return int(row[0]), float(row[1])

    @guarded
    def category_counts(self) -> list[tuple[str, int]]:
        """(UCS category, sounds heard as it) for the "By category" view, by category name: each searchable
        sound counted under its top category when confident enough to show (CATEGORY_SHOWN)."""
        counts: dict[str, int] = {}
        for cats in self.library.vectors.categories_of(self.embedder.model_id).values():
            if top := shown(cats[:1]):
                counts[top[0][0]] = counts.get(top[0][0], 0) + 1
        return sorted(counts.items())


def natural_ties(hits: list[Hit]) -> list[Hit]:
    """Hits of the same score (a folder's numbered takes found by its name alone) in natural order by path:
    1, 2, … 10, not 1, 10, 11, 2; every other place kept."""
    out: list[Hit] = []
    for _, run in itertools.groupby(hits, key=lambda h: h.score):
        out += sorted(run, key=lambda h: natural_path_key(h.rel_path))
    return out


def sound_ranking(sound: dict[int, float], k: int) -> list[tuple[int, Scores]]:
    """The sound channel's best k as a ranking, its order and cosines as they are (no fusion)."""
    return [(f, Scores(s, 0.0, 0.0, 0.0, 0.0, s)) for f, s in list(sound.items())[:k]]


def found_by(sc: Scores, sound_only: bool) -> str:
    """How a result was found: "name" (its names or tags), "sound" (its sound alone), "like" (it sounds like
    a named match) or "category" (its name says nothing; its sound's category answers the query)."""
    if sc.like is not None:
        return "like"
    if sc.category is not None and not sound_only:
        return "category"
    return "sound" if sound_only or sc.silent or sc.name <= 0 else "name"


def check_k(k: int) -> int:
    """The number of results asked for, refused with a clear message unless it is a whole number >= 1."""
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise ValueError(f"the number of results (-k) must be a whole number of at least 1, got {k!r}")
    return int(k)


def similar_lengths(filters: SearchFilters | None, duration: float | None) -> SearchFilters | None:
    """`filters` narrowed to lengths from duration / SIMILAR_LENGTH to duration * SIMILAR_LENGTH + SIMILAR_SLACK_S
    (within the user's own duration filters); unchanged when the length is not known."""
    if duration is None or not duration > 0:
        return filters
    f = filters or SearchFilters()
    lo, hi = duration / SIMILAR_LENGTH, duration * SIMILAR_LENGTH + SIMILAR_SLACK_S
    return replace(f, min_duration=max(lo, f.min_duration or 0.0),
                   max_duration=hi if f.max_duration is None else min(hi, f.max_duration))


def highlight(fields: dict[str, str], query: Query) -> tuple[dict[str, list[tuple[int, int]]], list[str]]:
    """Spans of the query's words (plurals and -ing/-ed forms alike; prefixes by their start) in each field,
    and the query words found."""
    wanted = {names.stem(t): t for t in query.terms if t not in {p.lower() for p in query.prefixes}}
    prefixes = [p.lower() for p in query.prefixes]
    spans: dict[str, list[tuple[int, int]]] = {}
    found: list[str] = []
    for key, text in fields.items():
        for a, b, word in names.word_spans(text):
            term = wanted.get(names.stem(word))
            if term is None:
                term = next((p for p in prefixes if word.startswith(p)), None)
            if term is not None:
                spans.setdefault(key, []).append((a, b))
                found.append(term)
    return spans, list(dict.fromkeys(found))


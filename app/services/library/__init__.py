"""The sound library behind the Search tab: folder scan, SQLite catalog, one FAISS index per model, search.

No Qt and no model code: the library takes an `Embedder` (anything with the attributes and methods of the
protocol in records.py), so the retrieval model can change without touching this package. Import from the
modules; this package re-exports nothing (a re-export here would make every module import its own package's
siblings through it: an import cycle).

Modules (tested in tests/test_library.py and tests/test_library_text.py):
- library.py       `Library`: opening (and salvaging) the catalog, its connection, lock and transactions, the
                   models, stats; it owns the parts below, which talk to each other through public methods only;
- file_table.py    `library.files`: the files table (what the indexer records, moves, copies, failures);
- vectors.py       `library.vectors`: one FAISS index per model, a cache repaired from the catalog's vectors;
- vector_search.py `library.search`: nearest files by a model's vectors, filters, hits;
- text_channel.py  `library.text`: names, folders and tags as keywords (FTS5, BM25) and sentence vectors;
- user_tags.py     `library.user_tags`: the user's tags and favourites;
- tag_case.py      one tag whatever its case ('Door' = 'door'), spelled as first used; older catalogs merged;
- records.py       errors, the `Embedder` protocol, `SearchFilters`, `Hit`, `MatchInfo`, `FailedFile`,
                   `LibraryStats`, `IndexReport`;
- catalog.py       where the catalog lives, its schema and versioned migrations, connecting;
- salvage.py       rebuilding a damaged catalog from what still reads (`SalvageReport`: kept, lost, restored);
- pages.py         catalog rows read off the SQLite pages themselves, for salvage;
- scan.py          walking the folder (`scan_folder`), hashing (`hash_file`), change detection inputs;
- embedding.py     windows -> vectors -> pooled file vector (`embed_file`);
- indexer.py       the threaded, incremental index job (`index_library`): names first (every new file catalogued
                   and searchable by name before any audio is read), then the audio;
- eta.py           the indexing row's time left, from the rate measured (`RateEta`);
- sharded.py       indexing under torchrun (`sharded_index_job`), through the public API only;
- names.py         folder and file-name words, UCS CatIDs expanded (data/ucs_categories.csv);
- tags.py          embedded tags (mutagen + RIFF INFO/bext/iXML) as search text, problems recorded not raised.
- tag_writer.py    user tags written INTO the files on request (riff_writer.py: WAV INFO), atomic and verified.

Never silently wrong (issue 14): opening runs SQLite's quick_check and rebuilds a damaged catalog from every
row that still reads and checks out (salvage.py); an index file whose checksum is not the recorded one
is compared with the catalog's vectors and rebuilt if any differ; a model yielding NaN/inf is refused as a
whole (BrokenModelError, recorded in models.error); files under a folder that cannot be listed, a mount point
found empty (unmounted) or a link whose target is gone keep their rows, tags and favourites, hidden
(files.available = 0) until it is back; a full disk is a DiskFullError and the next run
resumes; over-long paths are scan errors; `index_library(..., rehash=True)` re-hashes every file. Issue 27: a
repair is kept (`library.repair`) and said; user tags and favourites are mirrored beside the catalog
(tag_mirror.py) and restored after a salvage; a catalog without write access is opened read-only
(`library.read_only`: searched, never written).
"""

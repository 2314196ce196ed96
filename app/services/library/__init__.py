"""The sound library behind the Search tab: folder scan, SQLite catalog, FAISS index per model, search.

No Qt and no model code: the library takes an `Embedder` (anything with the attributes and methods of the
protocol in records.py), so the retrieval model can change without touching this package.

Modules (each one tested in tests/test_library.py):
- records.py   errors, the `Embedder` protocol, `SearchFilters`, `Hit`, `FailedFile`, `LibraryStats`,
               `IndexReport`;
- scan.py      walking the folder (`scan_folder`), hashing (`hash_file`), change detection inputs;
- catalog.py   where the catalog lives, its schema and versioned migrations, connecting;
- core.py      `Library`: open/close, the FAISS cache, recording files, search;
- embedding.py windows -> vectors -> pooled file vector (`embed_file`);
- indexer.py   the threaded, incremental index job (`index_library`);
- sharded.py   indexing under torchrun (`sharded_index_job`), through the public API only;
- names.py     folder and file-name words, UCS CatIDs expanded (data/ucs_categories.csv);
- tags.py      embedded tags (mutagen + RIFF INFO/bext/iXML) as search text, problems recorded not raised;
- textchannel.py the text channel's storage (texts, FTS5, sentence vectors), user tags and favourites.

Public API: the names in `__all__`. `Library` methods without a leading underscore are the API that the
indexer, sharded indexing and the search service use: `open`, `close`, `lock`, `db` (read-only use),
`register_model`, `vector_index`, `save_index`, `index_path`, `rows`, `record_file`, `delete_files`,
`set_unavailable`, `set_model_error`, `model_errors`, `file_error`, `indexing`, `stats`, `failed_files`,
`file_id`, `search_text`, `similar`, `search_vector`, `index`, and the text channel's (textchannel.py):
`stale_texts`, `store_text`, `pending_text_vectors`, `store_text_vectors`, `keyword_search`, `keyword_files`,
`nearest_files`, `hits_for`, `file_vectors`, `allowed_files`, `add_tags`, `remove_tags`, `set_favourite`,
`tags_of`, `all_tags`, `tag_table`, `tag_problems`.

Never silently wrong (issue 14): opening runs SQLite's quick_check and rebuilds a damaged catalog from every
row that still reads and checks out (catalog.salvage); an index file whose checksum is not the recorded one
is compared with the catalog's vectors and rebuilt if any differ; a model yielding NaN/inf is refused as a
whole (BrokenModelError, recorded in models.error); files under a folder that cannot be listed keep their
rows, hidden (files.available = 0) until it is back; a full disk is a DiskFullError and the next run
resumes; over-long paths are scan errors; `index_library(..., rehash=True)` re-hashes every file.
"""

from app.services.library.catalog import CATALOG_NAME, SCHEMA_VERSION, CatalogRow, catalog_dir_for
from app.services.library.core import Library
from app.services.library.embedding import embed_file
from app.services.library.indexer import index_library
from app.services.library.records import (
    BrokenModelError,
    DiskFullError,
    Embedder,
    FailedFile,
    Hit,
    IndexReport,
    LibraryError,
    LibraryStats,
    MatchInfo,
    SearchFilters,
)
from app.services.library.scan import CATALOG_DIR, ScannedFile, ScanResult, hash_file, scan_folder

__all__ = [
    "CATALOG_DIR", "CATALOG_NAME", "SCHEMA_VERSION", "BrokenModelError", "CatalogRow", "DiskFullError",
    "Embedder", "FailedFile", "Hit", "IndexReport", "Library", "LibraryError", "LibraryStats", "MatchInfo",
    "ScanResult",
    "ScannedFile", "SearchFilters", "catalog_dir_for", "embed_file", "hash_file", "index_library", "scan_folder",
]

"""Search over a sound library (no Qt), one job per module:

- embedder.py  the retrieval model as the library's `Embedder`; finding and loading it; thread caps;
- fusion.py    the fusion of the names and sound channels (pure NumPy: what the benchmarks replay), the
               "no good match" confidence;
- vocabulary.py query words read against the library's own words (numbers, compounds, typos, prefixes);
- session.py   `SearchSession`: a library + a model: indexing, text search, find similar, why it matched;
- tags.py      `TagEditor`: the user's tags and favourites; tags_csv.py: the tags CSV, read with limits;
- preview.py   a file's audio and spectrogram for the Search tab;
- browse.py    an empty query: the library's sounds with the filters, sorted and paged;
- jobs.py      the GUI's search jobs and the CLI's JSON.

Import from the submodules; this package re-exports nothing.
"""

"""The sound library behind the Search tab: scan, catalog, indexes, text channel, user tags (docs/library.md)."""

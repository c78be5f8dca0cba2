"""Persistent state under .npuctl/: the content-addressed store, the SQLite database, locks."""

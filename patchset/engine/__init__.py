"""Applying patches: one file's hunks exactly as GNU patch does (``hunks``), a whole series onto a
directory tree, all or nothing (``tree``), and the crash-safe multi-file commit under it (``txn``)."""

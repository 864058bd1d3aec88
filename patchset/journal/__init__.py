"""A crash-safe multi-file commit under one directory: staged files, a journal, renames.

An apply's build tree (``patchset.engine.txn``, ``<tree>/.patchset-txn``) and a ledger edit
(``patchset.ledger.store``, ``<ledger dir>/.patchset/ledger-txn``) both use it: one format, one
recovery. In the transaction directory (same file system, so every rename is atomic):

1. ``new/<n>``: every new content, with its final mode and its sha256 in the journal; ``old/<n>``:
   a hard link to (or copy of) every file that will be replaced or deleted.
2. ``journal.json``, written under a temporary name and renamed: from now on the transaction is
   rolled forward. Before it, nothing outside the directory has changed.
3. Renames ``new/<n>`` -> path (and unlinks), in journal order; then the journal and the
   directory are removed.

With ``durable`` every step is fsynced (power loss); a kill -9 needs no fsync. Recovery checks
each staged file against its recorded sha256 and rolls back when one is damaged. A journal is
replayed only when it bears this installation's seal (``seal``); anything else is
``ForeignJournal``, never replayed nor cleaned up. docs/reliability.md and docs/security.md
say the whole of it, the crash-test hook (``PATCHSET_TEST_CRASH_AFTER``) included.
"""

"""A crash-safe multi-file commit under one directory: staged files, a journal, renames.

Both places where patchset changes several files that must change together use it: an apply's
build tree (``patchset.engine.txn``, transaction directory ``<tree>/.patchset-txn``) and a ledger
edit (``patchset.ledger.store``: ``patches.toml``, ``patches.lock`` and the body files, transaction
directory ``<ledger dir>/.patchset/ledger-txn``). One format, one recovery.

Protocol, all inside the transaction directory (same file system as the files, so every rename is
atomic):

1. ``new/<n>``: every new file content written, given its final mode (and its sha256 in the
   journal); ``old/<n>``: a hard link to (or copy of) every file that will be replaced or deleted.
2. ``journal.json``: written to a temporary name, renamed: from now on the transaction is
   *complete* and will be rolled forward. Before it exists nothing outside the transaction
   directory has changed, and recovery only deletes the leftovers.
3. Renames ``new/<n>`` -> path (and unlinks for deletions), in journal order.
4. The journal is deleted (the commit point has passed; recovery is no longer needed) and the
   transaction directory removed.

Durability: a kill -9 or Ctrl-C needs no fsync (the kernel keeps every write and rename of a
dead process). Power loss does: with ``durable`` every staged file, the journal and every touched
directory is fsynced at its step, as a database would (ledger edits always; a tree commit with
``apply --durable`` / ``PATCHSET_FSYNC=1``). Without it a power cut can lose the last commit,
never install a torn file: recovery checks each staged file against the sha256 the journal
recorded and rolls back when one is damaged.

Recovery is idempotent: rolling forward renames what is still staged; rolling back (on request,
``direction="back"``) puts the ``old/<n>`` links back and removes created files and directories.
A ``flock`` on the transaction directory keeps two processes from committing at once.

Ownership: a tree, an archive or a cloned ledger may carry a transaction directory of its own.
A journal is replayed only when it bears this installation's seal: an HMAC-SHA256, under a
random key kept in the user's state directory (``$PATCHSET_STATE``, else
``$XDG_STATE_HOME/patchset``, else ``~/.local/state/patchset``: ``journal.key``, created once),
of the journal's content and of which kind of transaction directory it is in. The seal is in
the journal itself, so it lands with the journal's one atomic rename and a kill -9 at any step
leaves nothing to reconcile; a copy of a tree an apply was killed in recovers like the original.
Anything else is :class:`~patchset.errors.ForeignJournal` (exit 2): reported with what it names,
never replayed, never cleaned up (the user removes it by hand). Leftovers without a journal are
removed only when they have exactly the shape patchset stages (real ``new/`` and ``old/``
directories of numbered files). Every path a journal names, ours included, is confined under the
root (``patchset.confine``) when it is used. The same seal (``seal.seal_of``, ``seal.has_seal``)
guards every other state patchset records and trusts again later (``patchset.sealed``: a rebase in
progress, its backups, the gate's state).

Testing hook: ``PATCHSET_TEST_CRASH_AFTER=k`` makes the process signal itself at the k-th step
(each staged file, the journal, each rename, the cleanup; steps of every journal of the process
are counted together), ``PATCHSET_TEST_CRASH_SIGNAL`` names the signal (``KILL`` by default,
``INT`` for a Ctrl-C). Read only from the environment; nothing happens when unset.

The package, one idea a module, each importing only those listed before it:

- ``files``: the file-system steps (a staged file written, a staging directory removed,
  directories fsynced);
- ``crash``: what a crash or a signal meets mid-commit (the crash-test hook, Ctrl-C held);
- ``seal``: the installation key and the seal of everything patchset trusts again later;
- ``txndir``: a transaction directory as found (layout, journal, whether it is ours); reads only;
- ``recovery``: the lock, a journal rolled forward or back, an interrupted commit finished;
- ``commit``: a commit (``Change``, ``Journal``): the files staged, the journal, the renames.
"""

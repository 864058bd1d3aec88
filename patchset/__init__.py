"""patchset: a declarative ledger and engine for downstream patch series.

Layers, each importing only those below it (checked by import-linter in CI):
``errors``/``atomic`` <- ``journal`` (the crash-safe commit) <- ``ledger`` (model, schema, lock, the
TOML store) <- ``patchfmt`` (patch bodies and headers) <- ``engine`` (hunks, series onto a tree) <-
``upstream`` (git, releases, histories, caches) <- ``rebase`` <- ``commands`` (one module per
command) <- ``build`` <- ... <- ``cli`` (shared CLI plumbing) <- ``clicmds`` (the commands, loaded lazily).
``patchset.tracker`` (GitHub state), ``patchset.verify`` (tests and checks) and ``patchset.ci``
(the gate) sit on top; in the repository they are the top-level folders ``tracker/``, ``verify/``
and ``ci/``, mapped under ``patchset`` at install time.
"""

__version__ = "0.1.0"

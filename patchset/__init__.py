"""patchset: a declarative ledger and engine for downstream patch series.

Layers, each importing only those below it (checked by import-linter in CI):
``errors``/``atomic`` <- ``ledger`` (model, schema, lock, the TOML store) <- ``patchfmt`` (patch
bodies and headers) <- ``engine`` (hunks, series onto a tree, crash-safe commit) <- ``upstream``
(git, releases, histories, caches) <- ``rebase`` <- ``commands`` (one module per command) <- ``cli``.
``patchset.tracker`` (GitHub state), ``patchset.verify`` (tests and checks) and ``patchset.ci``
(the gate) sit on top; in the repository they are the top-level folders ``tracker/``, ``verify/``
and ``ci/``, mapped under ``patchset`` at install time.
"""

__version__ = "0.1.0"

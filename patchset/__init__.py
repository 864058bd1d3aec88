"""patchset: a declarative ledger and engine for downstream patch series.

Its sub-packages are layers, each importing only those below it: the order is the first
import-linter contract of ``pyproject.toml`` (checked by ``bash .ci/static``); what each package is
for is ``docs/layout.md``. ``patchset.tracker``, ``patchset.verify`` and ``patchset.ci`` are the
top-level folders ``tracker/``, ``verify/`` and ``ci/`` of the repository, mapped under ``patchset``
at install time.
"""

__version__ = "0.1.0"

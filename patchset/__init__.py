"""patchset: a declarative ledger and engine for downstream patch series.

The package owns the ledger model (``model``), its TOML reader/writer (``ledger``), the lock
(``lock``), the series engine (``engine`` for hunks, ``apply`` for trees) and the rebaser.
"""

__version__ = "0.1.0"

"""Upstream code: the git runner (``git``), releases from the package index (``releases``, ``archives``,
``boundedtar``), git histories built from them (``history``, ``dirhistory``), the cache root (``cache``),
rebase bases (``bases``) and references to upstream pull requests and issues (``refs``)."""

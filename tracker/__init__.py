"""Upstream status: what GitHub says about the pull requests and issues the ledger tracks.

``patchset.tracker.github`` is the client (PyGithub underneath, an on-disk ETag cache beside it);
``tests.support.fakehub`` is a local GitHub-shaped server the tests and benchmarks talk to.
"""

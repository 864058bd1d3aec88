"""Upstream status: what GitHub says about the pull requests and issues the ledger tracks.

``github`` is the client, a package (PyGithub underneath, an on-disk ETag cache in
``github.httpcache``) whose face is all the rest of the product imports; ``status`` turns its answers into a
per-patch dashboard (``report``: its rows; ``drift``, ``histories``, ``rowfollowups``,
``actions``: what each row means; ``recording``: ``--refresh`` into the ledger), rendered by
``views`` (terminal, Markdown) and ``html`` (with ``links``). The tests'
GitHub-shaped server lives in ``tests/support/fakehub``, not here.
"""

"""A GitHub-shaped HTTP server on 127.0.0.1 for tests and benchmarks (this machine never reaches GitHub).

``server`` is the HTTP layer, ``state`` the repositories behind it, ``graphql`` the query engine,
``shapes`` the REST response bodies (after GitHub's published OpenAPI description), ``world`` a
ready-made world shaped like the production ledger's upstream. Run ``python -m tests.support.fakehub``.
"""

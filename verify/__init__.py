"""Per-patch regression tests and long-context checks against an OpenAI-compatible server.

``patchset.verify.pertest`` runs each patch's tests with and without it: ``selection`` picks the
tests, ``base_tree`` prepares the pristine tree, ``runner`` runs them (``testrun`` for commands,
``longctx_runs`` and ``engine_runs`` for tests on engines started from each tree, ``serving_judge``
for serving verdicts), ``outcomes`` holds what it reports. ``patchset.verify.longctx`` runs the
long-context checks (``run_checks``; the checks in ``longctx_checks``, their inputs in
``longctx_params``, records in ``longctx_report``, numbers in ``longctx_math``), ``openai_client`` is
the HTTP client they use and ``server`` the real vLLM CPU engine they run against (the tests' models
and fault plugin live in ``tests/support``).
"""

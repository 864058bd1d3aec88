"""Per-patch regression tests and long-context checks against an OpenAI-compatible server.

``patchset.verify.pertest`` runs each patch's tests with and without it (``testrun`` for commands,
``longctx_runs`` for long-context tests on engines started from each tree); ``patchset.verify.longctx``
holds the long-context checks (``run_checks``), ``openai_client`` the HTTP client they use and
``server`` the real vLLM CPU engine they run against (the tests' models and fault plugin live in
``tests/support``).
"""

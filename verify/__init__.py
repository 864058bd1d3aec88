"""Per-patch regression tests and long-context checks against an OpenAI-compatible server.

``pertest`` proves each patch with its own tests (with the series, and without that patch, on the
hard-linked trees of ``overlay``; commands run by ``testrun``; vLLM's test environment in
``vllm_env``); ``longctx`` holds the long-context checks past 2,048 tokens and ``openai_client`` the
HTTP client they use; ``server`` starts a real vLLM CPU server; ``junit`` writes JUnit XML.
"""

"""verify: per-patch regression tests and long-context checks against an OpenAI-compatible server.

``patchset.verify.longctx`` holds the long-context checks (``run_checks``); ``verify.openai_client`` the HTTP
client they use; ``patchset.verify.server`` / ``verify.models`` / ``verify/faults`` prove them on a real vLLM
CPU engine, healthy and deliberately broken.
"""

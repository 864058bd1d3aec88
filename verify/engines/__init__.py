"""Engines verify starts: the ledger's definitions (``definition``), one start of one (``launch``,
``process``), the CPU vLLM server of ``ci/setup_engine.sh`` (``vllm_cpu``), the client that talks to
a started one (``client``) and the scheduler that shares one engine between the tests of a tree
(``scheduler``)."""

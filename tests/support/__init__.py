"""Test doubles and helpers shared by the tests and the benchmarks (never shipped in the product):
a GitHub-shaped server (``fakehub``), a local package index (``localindex``), tiny models and a vLLM
fault plug-in for the engine tests (``models``, ``faults/``), generated diffs (``diffgen``), git
repository builders (``repo``)."""

"""The ledger text of tests that carry a small series on real vLLM releases: the ``vllm`` target as
the production ledger declares it (GitHub repository, package on the index, a release as base) and
one ``[[patch]]`` table per body. Callers add their own ``[patch.upstream]``/``[[patch.tests]]``
lines after a patch's entry.
"""

from __future__ import annotations


def vllm_target(base: str = "vllm==0.30.0") -> list[str]:
    return [
        "schema = 1",
        "",
        "[targets.vllm]",
        'upstream = "https://github.com/vllm-project/vllm.git"',
        'github = "vllm-project/vllm"',
        f'base = "{base}"',
        'package = "vllm"',
        "",
    ]


def patch_entry(pid: str, path: str, origin: str = "ours") -> list[str]:
    return [
        "[[patch]]",
        f'id = "{pid}"',
        'target = "vllm"',
        f'title = "{pid}"',
        f'origin = "{origin}"',
        f'files = ["{path}"]',
    ]

"""Test-only vLLM general plugin: breaks vLLM 0.30.0 past 2,048 tokens, on purpose, when asked.

Why this exists: a long-context check is only proven if it fails on an engine that has the kind of
bug it is meant to catch. vLLM loads every ``vllm.general_plugins`` entry point in each of its
processes; ``register()`` below does nothing unless the environment variable ``PATCHSET_FAULT``
names one of these faults, and then monkeypatches vLLM 0.30.0 internals in that process:

``stale-cache-hit``
    A prefix-cache hit that reaches past 2,048 tokens reads a stale block: for a new request whose
    cached prefix extends past position 2,048, every fully cached block after 2,048 is read from the
    block 2,048 tokens earlier (the scheduler's state and the cache itself stay intact; only this
    request's block table in the worker is wrong). Hits of at most 2,048 tokens are unaffected.
``rope-shift``
    The RoPE positions of a forward batch change once the batch holds a position past 2,048: the
    batch's positions are squeezed into 0..2,047 (p -> p * 2048 // (max + 1)), a per-batch dynamic
    position-interpolation bug, so the rotation a token gets depends on what else is in its batch.
``stale-decode``
    Decode steps (query length 1) of a sequence longer than 2,048 tokens read stale KV blocks: the
    blocks past 2,048 are looked up 16 table slots (2,048 tokens at block size 128) too early.
    Prefill is unaffected, so prompt logprobs stay right.

The code only wraps functions (it copies nothing from vLLM). It is installed into the engine venv
by ``ci/setup_engine.sh``; the engine puts this directory first on PYTHONPATH so the checked-out code
is the code that runs.
"""

from __future__ import annotations

import logging
import os

FAULTS = ("stale-cache-hit", "rope-shift", "stale-decode")
BOUNDARY = 2048

log = logging.getLogger("patchset_faults")
_applied: set[str] = set()


def register() -> None:
    fault = os.environ.get("PATCHSET_FAULT", "").strip()
    if not fault or fault in _applied:
        return
    if fault not in FAULTS:
        raise RuntimeError(f"PATCHSET_FAULT={fault!r} is not a known fault; known: {', '.join(FAULTS)}")
    {"stale-cache-hit": _stale_cache_hit, "rope-shift": _rope_shift, "stale-decode": _stale_decode}[fault]()
    _applied.add(fault)
    log.warning("patchset_faults: fault %r active in pid %d", fault, os.getpid())
    print(f"patchset_faults: fault {fault!r} active in pid {os.getpid()}", flush=True)


def _stale_cache_hit() -> None:
    from vllm.v1.worker import gpu_model_runner as gmr

    original = gmr.GPUModelRunner._update_states

    def _update_states(self, scheduler_output):  # type: ignore[no-untyped-def]
        for req in scheduler_output.scheduled_new_reqs:
            computed = int(req.num_computed_tokens or 0)
            if computed <= BOUNDARY:
                continue
            groups = []
            for group in req.block_ids:
                ids = list(group)
                block = int(self.cache_config.block_size)
                stride = BOUNDARY // block
                first, end = BOUNDARY // block, computed // block  # fully cached blocks past 2,048
                for idx in range(first, min(end, len(ids))):
                    ids[idx] = group[idx - stride]
                groups.append(ids)
            req.block_ids = tuple(groups)
        return original(self, scheduler_output)

    gmr.GPUModelRunner._update_states = _update_states


def _rope_shift() -> None:
    import torch
    from vllm.model_executor.layers.rotary_embedding import base

    def squeeze(positions: torch.Tensor) -> torch.Tensor:
        if positions.numel() == 0:
            return positions
        top = int(positions.max())
        if top < BOUNDARY:
            return positions
        return torch.div(positions * BOUNDARY, top + 1, rounding_mode="floor").to(positions.dtype)

    cls = base.RotaryEmbedding
    for name in ("forward_cpu", "forward_native"):
        original = getattr(cls, name)

        def wrapped(self, positions, query, key=None, _original=original):  # type: ignore[no-untyped-def]
            return _original(self, squeeze(positions), query, key)

        setattr(cls, name, wrapped)


def _stale_decode() -> None:
    from vllm.v1.attention.backends import cpu_attn

    original = cpu_attn.CPUAttentionMetadataBuilder.build

    def build(self, common_prefix_len, common_attn_metadata, fast_build=False):  # type: ignore[no-untyped-def]
        meta = original(self, common_prefix_len, common_attn_metadata, fast_build)
        qsl = meta.query_start_loc
        seq_lens = meta.seq_lens
        stride = BOUNDARY // self.block_size
        table = None
        for row in range(int(seq_lens.numel())):
            qlen = int(qsl[row + 1] - qsl[row])
            seq = int(seq_lens[row])
            if qlen != 1 or seq <= BOUNDARY:
                continue
            if table is None:
                table = meta.block_table.clone()
            used = (seq + self.block_size - 1) // self.block_size
            table[row, stride:used] = meta.block_table[row, 0 : used - stride]
        if table is not None:
            meta.block_table = table
        return meta

    cpu_attn.CPUAttentionMetadataBuilder.build = build

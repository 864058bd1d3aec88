"""A ready-made fake-hub world shaped like the production ledger's upstream: 21 refs in 3 repos.

Tests and ``bench/status.py`` need the same realistic set: the vLLM pull requests the ledger
tracks (numbers, authors and states as recorded on 2026-09-26), NVIDIA/nccl#2393 and the issue
it fixes (#2334), and FlashInfer pull requests. Numbers marked "synthetic" are made up to reach
the size of a real dashboard; titles and diffs are generated (no upstream code is copied).
"""

from __future__ import annotations

from typing import Any

from patchset.upstream.refs import PRRef

# (number, author, state, merged_at, draft, review, ci, file touched)
_VLLM: list[tuple[int, str, str, str | None, bool, str | None, str | None, str]] = [
    (
        57632,
        "Juntian777",
        "closed",
        "2026-09-24T10:00:00Z",
        False,
        "APPROVED",
        "SUCCESS",
        "vllm/v1/worker/gpu/spec_decode/dflash/cudagraph.py",
    ),
    (
        58704,
        "mmastrac",
        "closed",
        "2026-09-25T09:00:00Z",
        False,
        "APPROVED",
        "SUCCESS",
        "vllm/v1/attention/backends/mla/flashinfer_mla_sparse_sm90.py",
    ),
    (
        58454,
        "mmastrac",
        "closed",
        "2026-09-25T11:00:00Z",
        False,
        "APPROVED",
        "SUCCESS",
        "vllm/models/glm5next/common/attention.py",
    ),
    (58250, "mgoin", "open", None, True, "REVIEW_REQUIRED", "PENDING", "vllm/model_executor/models/qwen3_dflash2.py"),
    (
        55960,
        "mgoin",
        "closed",
        "2026-08-30T08:00:00Z",
        False,
        "APPROVED",
        "SUCCESS",
        "vllm/model_executor/models/qwen3_dflash2.py",
    ),
    (58834, "shiweijiezero", "open", None, False, "REVIEW_REQUIRED", "FAILURE", "vllm/models/glm5next/common/model.py"),
    (
        58021,
        "QHarshil",
        "closed",
        "2026-10-01T16:00:00Z",
        False,
        "APPROVED",
        "SUCCESS",
        "vllm/v1/core/kv_cache_utils.py",
    ),
    (
        57477,
        "JaredforReal",
        "closed",
        "2026-09-20T07:00:00Z",
        False,
        "APPROVED",
        "SUCCESS",
        "vllm/models/glm5next/nvidia/ops/kpool_compress.py",
    ),
    (58368, "netanel-haber", "open", None, False, "CHANGES_REQUESTED", "SUCCESS", "vllm/v1/core/kv_cache_utils.py"),
    (58434, "njhill", "open", None, False, None, "PENDING", "vllm/v1/core/sched/scheduler.py"),
    # synthetic
    (58901, "someone", "open", None, False, None, None, "vllm/platforms/cuda.py"),
    (58902, "someone", "open", None, False, "APPROVED", "SUCCESS", "vllm/model_executor/layers/indexer_topk.py"),
    (58903, "someone", "closed", None, False, None, "FAILURE", "vllm/model_executor/models/qwen3_dflash.py"),
    (58904, "someone", "open", None, True, None, "ERROR", "vllm/models/glm5next/common/kda.py"),
]
_FLASHINFER = [  # synthetic numbers
    (2101, "tonyd2wild", "open", None, False, "REVIEW_REQUIRED", "SUCCESS", "flashinfer/mla/_core.py"),
    (2102, "tonyd2wild", "open", None, False, None, "PENDING", "include/flashinfer/attention/mla.cuh"),
    (2103, "someone", "closed", "2026-09-10T12:00:00Z", False, "APPROVED", "SUCCESS", "flashinfer/decode.py"),
    (2104, "someone", "open", None, True, None, None, "flashinfer/prefill.py"),
    (2105, "someone", "closed", None, False, None, "FAILURE", "csrc/norm.cu"),
]


def small_diff(path: str, tag: str, lines: int = 1) -> str:
    """A valid one-file unified diff changing ``lines`` lines of ``path``."""
    old = "".join(f"-old line {i} {tag}\n" for i in range(lines))
    new = "".join(f"+new line {i} {tag}\n" for i in range(lines))
    return (
        f"diff --git a/{path} b/{path}\nindex 1111111..2222222 100644\n--- a/{path}\n+++ b/{path}\n"
        f"@@ -1,{lines + 1} +1,{lines + 1} @@\n context {tag}\n{old}{new}"
    )


def _pulls(rows: list[tuple[int, str, str, str | None, bool, str | None, str | None, str]]) -> dict[str, Any]:
    out = {}
    for number, author, state, merged_at, draft, review, ci, path in rows:
        out[str(number)] = {
            "title": f"Change {path.rsplit('/', 1)[-1]} (#{number})",
            "author": author,
            "state": state,
            "merged_at": merged_at,
            "draft": draft,
            "review_decision": review,
            "ci": ci,
            "diff": small_diff(path, str(number)),
            "updated_at": merged_at or "2026-09-26T08:00:00Z",
            "merged_by": "maintainer" if merged_at else None,
        }
    return out


def ledger_world() -> dict[str, Any]:
    """The JSON state for ``FakeHub``: vllm-project/vllm, flashinfer-ai/flashinfer, NVIDIA/nccl."""
    return {
        "repos": {
            "vllm-project/vllm": {
                "description": "A high-throughput and memory-efficient inference engine",
                "pulls": _pulls(_VLLM),
            },
            "flashinfer-ai/flashinfer": {
                "description": "FlashInfer: Kernel Library for LLM Serving",
                "pulls": _pulls(_FLASHINFER),
            },
            "NVIDIA/nccl": {
                "default_branch": "master",
                "description": "Optimized primitives for collective multi-GPU communication",
                "pulls": {
                    "2393": {
                        "title": "Add acquire fence in ncclIbIsend CTS poll",
                        "author": "kodlan",
                        "diff": small_diff("src/transport/net_ib.cc", "2393"),
                        "ci": None,
                    }
                },
                "issues": {"2334": {"title": "RoCE deadlock in ncclIbIsend", "author": "reporter"}},
            },
        }
    }


def ledger_refs() -> list[PRRef]:
    """The 21 refs of ``ledger_world``: 14 vLLM PRs, 5 FlashInfer PRs, an NCCL PR and issue."""
    refs = [PRRef("vllm-project/vllm", r[0]) for r in _VLLM]
    refs += [PRRef("flashinfer-ai/flashinfer", r[0]) for r in _FLASHINFER]
    refs += [PRRef("NVIDIA/nccl", 2393), PRRef("NVIDIA/nccl", 2334, "issue")]
    return refs


def world_for_refs(refs: list[PRRef]) -> dict[str, Any]:
    """``ledger_world`` plus every ref in ``refs`` it lacks (an open PR with a generated one-file
    diff, or an open issue), so a real ledger's ``status --refresh`` finds all its refs."""
    data = ledger_world()
    for ref in refs:
        repo = data["repos"].setdefault(ref.repo, {"description": None})
        key = str(ref.number)
        if ref.kind == "issue":
            if key not in repo.get("issues", {}) and key not in repo.get("pulls", {}):
                repo.setdefault("issues", {})[key] = {"title": f"Issue {ref.number}", "author": "reporter"}
        elif key not in repo.get("pulls", {}):
            repo.setdefault("pulls", {})[key] = {
                "title": f"Change #{ref.number}",
                "author": "someone",
                "diff": small_diff(f"src/change_{ref.number}.py", key),
            }
    return data

"""Plan inputs for the verify plan's decision tests: patches with watched files, and the proofs a
history keeps of them (``verify.plan.decide``, ``verify.proofs``)."""

from __future__ import annotations

import hashlib

from patchset.verify.outcomes import NOT_NEEDED
from patchset.verify.plan.decide import PlanPatch, PlanTest
from patchset.verify.plan.watch import Watch
from patchset.verify.proofs import LastVerdict, PatchProof, TargetHistory, WithoutProof

AT = "2026-10-01T02:00:00Z"
BASE = "vllm==0.31.0"
BODY = "b" * 16
SPEC = "s" * 16
ENGINE = "e" * 16


def digests(name: str) -> tuple[str, str, str]:
    """(base, with the series, without the patch) digests of a watched file, distinct per file."""
    base, with_, without = (hashlib.sha256(f"{name}:{side}".encode()).hexdigest()[:16] for side in ("b", "w", "o"))
    return base, with_, without


def plan_patch(
    pid: str,
    files: list[str],
    *,
    tests: list[PlanTest] | None = None,
    engine: str = ENGINE,
    engine_name: str = "cpu",
    cached: bool = False,
) -> PlanPatch:
    """A patch with one long-context test ``lc`` (unless ``tests``) watching ``files``."""
    w = Watch({f: "patched" for f in files})
    w.digests = {f: digests(f) for f in files}
    tests = tests if tests is not None else [PlanTest("lc", SPEC, engine, engine_name, cached_without=cached)]
    return PlanPatch(pid, BODY, tests, w)


def proof_of(
    p: PlanPatch, *, night: int, klass: str = NOT_NEEDED, outcome: str = "pass", base: str = BASE
) -> PatchProof:
    """The proof of ``p`` as a run ``night`` on ``base`` made it: nothing of it moved since."""
    return PatchProof(
        night,
        AT,
        base,
        klass,
        p.body,
        {t.name: WithoutProof(t.spec, outcome) for t in p.tests if not t.with_only},
        {f: list(d) for f, d in p.watch.digests.items()},
        dict(p.watch.why),
        {t.name: WithoutProof(t.spec, outcome) for t in p.tests if t.with_only},
    )


def history_of(*proofs: tuple[str, PatchProof], nights: int = 3, last: dict[str, str] | None = None) -> TargetHistory:
    """A history of ``nights`` runs with these proofs; ``last``: a patch's class in the last run."""
    h = TargetHistory(nights, dict(proofs))
    for pid, proof in proofs:
        h.last[pid] = LastVerdict(proof.klass, proof.night, AT, proof.base)
    for pid, klass in (last or {}).items():
        h.last[pid] = LastVerdict(klass, nights, AT, BASE)
    return h

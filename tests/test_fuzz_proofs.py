"""Fuzz tier: the verify proof history as a clone, a CI cache or a hand could leave it (issue #28).

The proofs decide which without-runs are *not* run, so a history is trusted only when this
installation sealed it, and even then field by field. Each case writes a history drawn from a valid
one with fields replaced by junk (wrong types, huge or negative counts, paths that climb out,
digests that are paths, deep nesting, unknown keys), sealed by this installation (so the field
checks run), carrying a forged or another kind's seal, no seal, or raw bytes; sometimes the file is
a link into the sentinel. Then ``load_history`` reads it, and when it loads, the planner decides on
it for a patch of tonight.

Every case must raise nothing but patchset's domain exceptions, leave the file byte for byte as it
was and the sentinel untouched, and finish within ``CASE_DEADLINE_S``.
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from patchset.errors import PatchsetError
from patchset.sealed import write_sealed
from patchset.verify.plan.decide import PlanOptions, PlanPatch, PlanTest, decide
from patchset.verify.plan.watch import Watch
from patchset.verify.proofs import KIND, load_history
from tests.support.fuzz import CASE_DEADLINE_S, Sentinel, examples

pytestmark = pytest.mark.fuzz

D = "0123456789abcdef"
VALID: dict[str, Any] = {
    "version": 1,
    "targets": {
        "vllm": {
            "nights": 3,
            "proofs": {
                "p1": {
                    "night": 2,
                    "at": "2026-10-01T02:00:00Z",
                    "base": "vllm==0.31.0",
                    "klass": "proven",
                    "body": D,
                    "tests": {"lc": {"spec": D, "outcome": "fail", "reason": "failed resume", "checks": []}},
                    "watch": {"vllm/a.py": [D, D, D]},
                    "why": {"vllm/a.py": "patched"},
                }
            },
            "last": {"p1": {"klass": "proven", "night": 2, "at": "x", "base": "y"}},
        }
    },
}
PATHS = [("targets",), ("targets", "vllm"), ("targets", "vllm", "nights"), ("targets", "vllm", "proofs", "p1")]
PATHS += [("targets", "vllm", "proofs", "p1", k) for k in VALID["targets"]["vllm"]["proofs"]["p1"]]
PATHS += [("targets", "vllm", "proofs", "p1", "tests", "lc", k) for k in ("spec", "outcome", "checks", "reason")]
PATHS += [("targets", "vllm", "last", "p1"), ("targets", "vllm", "last", "p1", "night"), ("version",)]

JUNK = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(10**12), max_value=10**12),
        st.floats(allow_nan=True),
        st.text(max_size=12),
        st.sampled_from(["../sentinel/victim.txt", "/etc/passwd", "unsafe", "absent", D, "proven", "pass", "x" * 5000]),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(alphabet="ab./\\\x00", max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


def _mutate(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


@settings(
    max_examples=examples(), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(
    path=st.sampled_from(PATHS),
    value=JUNK,
    extra=st.one_of(st.none(), st.tuples(st.text(max_size=8), JUNK)),
    how=st.sampled_from(["sealed", "forged", "other kind", "unsealed", "raw", "link", "deep"]),
    raw=st.binary(max_size=200),
)
def test_a_hostile_history_is_refused_or_checked(path, value, extra, how, raw) -> None:
    saved = os.environ.get("PATCHSET_STATE")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["PATCHSET_STATE"] = str(root / "key")
        try:
            _case(root, path, value, extra, how, raw)
        finally:
            if saved is None:
                os.environ.pop("PATCHSET_STATE", None)
            else:
                os.environ["PATCHSET_STATE"] = saved


def _case(root: Path, path: tuple[str, ...], value: Any, extra: Any, how: str, raw: bytes) -> None:
    sentinel = Sentinel(root)
    doc = _mutate(VALID, path, value)
    if extra is not None:
        try:  # an unknown key beside the proof's own (when the proof is still a table)
            doc = _mutate(doc, ("targets", "vllm", "proofs", "p1", extra[0] or "k"), extra[1])
        except (KeyError, TypeError):
            pass
    f = root / "led" / ".patchset" / "verify-proofs.json"
    f.parent.mkdir(parents=True)
    if how == "sealed":
        write_sealed(f, KIND, doc)
    elif how == "other kind":
        write_sealed(f, "gate state", doc)
    elif how == "forged":
        write_sealed(f, KIND, VALID)
        sealed = json.loads(f.read_text())
        f.write_text(json.dumps({**doc, "owner": sealed["owner"]}))
    elif how == "unsealed":
        f.write_text(json.dumps(doc, default=str))
    elif how == "raw":
        f.write_bytes(raw)
    elif how == "deep":
        f.write_text("[" * 100000 + "]" * 100000)
    else:
        f.symlink_to(sentinel.root / "victim.txt")
    before = f.read_bytes() if not f.is_symlink() else None
    t0 = time.monotonic()
    try:
        history = load_history(f)
    except PatchsetError:
        history = None
    if history:
        w = Watch({"vllm/a.py": "patched"}, {"vllm/a.py": (D, D, D)})
        patch = PlanPatch("p1", D, [PlanTest("lc", D, D, "cpu")], w)
        for th in history.values():
            decide(patch, th, PlanOptions(history=str(f)), th.nights + 1, "vllm==0.32.0")
    assert time.monotonic() - t0 < CASE_DEADLINE_S
    if before is not None:
        assert f.read_bytes() == before
    sentinel.assert_untouched()
    if how != "sealed" and not (how == "forged" and doc == VALID):
        assert history is None  # nothing but this installation's seal of this kind is read

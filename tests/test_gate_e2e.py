"""End to end on real vLLM releases: gate a series written for 0.30.0 as upstream moves 0.31.0 -> 0.33.0.

The release history comes from the package index (``patchset.upstream.history``, cached in
``$PATCHSET_CACHE``); ``--latest`` asks a local package index on 127.0.0.1 that serves the same
four cached sdists, so "the newest release" is 0.33.0 whatever the real index has by now. The
series is written here against the real 0.30.0 source, so each patch meets real upstream drift:

* ``metrics-note``: a comment in ``vllm/v1/core/kv_cache_metrics.py``, a file no release touches;
* ``kda-note``: a comment in ``vllm/models/glm5next/nvidia/kda.py``, which 0.31.0 moves to ``common/``;
* ``kda-ssm-dtype``: passes ``mamba_ssm_cache_dtype`` to the KDA state dtype calculator. 0.32.0
  makes the same change its own way, so the patch conflicts from 0.32.0 on;
* ``kv-blocks-cap``: a cap in ``may_override_num_blocks`` of ``vllm/v1/core/kv_cache_utils.py``.
  0.33.0 moves that function to ``kv_cache_planning.py``, so the patch conflicts from 0.33.0 on.

Green onto 0.31.0 (with the per-patch tests of the ``cpu`` tier run by ``verify``), nothing
to do when asked again, then red onto the latest release (0.33.0) with the first bad release
named for each broken patch: 0.32.0 and 0.33.0, found by bisecting 0.31.0..0.33.0.
"""

from __future__ import annotations

import difflib
import json
import time
from pathlib import Path

import pytest

from patchset.ci.gate import GateRun, run_gate
from patchset.upstream import cache
from patchset.upstream.history import ReleaseHistory
from tests.support.localindex import LocalIndex
from tests.support.repo import release_history
from tests.support.vllm_ledger import patch_entry, vllm_target

pytestmark = pytest.mark.network

VERSIONS = ["0.30.0", "0.31.0", "0.32.0", "0.33.0"]
KDA = "vllm/models/glm5next/nvidia/kda.py"
EDITS = {
    "metrics-note": (
        "vllm/v1/core/kv_cache_metrics.py",
        "        self.access_history: deque[int] = deque(maxlen=4)\n",
        "        self.access_history: deque[int] = deque(maxlen=4)\n"
        "        # downstream: four samples are enough for the GB10 dashboards\n",
    ),
    "kda-note": (
        KDA,
        "        # doesn't allow to override it\n",
        "        # doesn't allow to override it\n        # downstream: conv state stays float32 on SM12x\n",
    ),
    "kda-ssm-dtype": (
        KDA,
        "            self.model_config.dtype, self.cache_config.mamba_cache_dtype\n",
        "            self.model_config.dtype,\n            self.cache_config.mamba_cache_dtype,\n"
        '            getattr(self.cache_config, "mamba_ssm_cache_dtype", "auto"),\n',
    ),
    "kv-blocks-cap": (
        "vllm/v1/core/kv_cache_utils.py",
        "        num_blocks = vllm_config.cache_config.num_gpu_blocks_override\n",
        "        num_blocks = vllm_config.cache_config.num_gpu_blocks_override\n"
        '    cap = os.environ.get("DOWNSTREAM_KV_BLOCKS_CAP")\n'
        "    if cap:\n        num_blocks = min(num_blocks, int(cap))\n",
    ),
}
TESTS = {
    "metrics-note": "python3 -c \"import ast; ast.parse(open('vllm/v1/core/kv_cache_metrics.py').read())\"",
    "kv-blocks-cap": "grep -q DOWNSTREAM_KV_BLOCKS_CAP vllm/v1/core/kv_cache_utils.py",
}


@pytest.fixture(scope="module")
def history() -> ReleaseHistory:
    return release_history("vllm", VERSIONS)


def _write_series(root: Path, h: ReleaseHistory) -> Path:
    v30 = h.resolve("vllm==0.30.0")
    series = root / "patchset" / "series" / "vllm"
    series.mkdir(parents=True)
    lines = vllm_target()
    for pid, (path, old, new) in EDITS.items():
        text = h.read_blob(v30, path).decode()
        assert text.count(old) == 1, (pid, old)
        body = "".join(
            difflib.unified_diff(
                text.splitlines(True), text.replace(old, new).splitlines(True), f"a/{path}", f"b/{path}"
            )
        )
        (series / f"{pid}.patch").write_text(f"Subject: [PATCH] {pid}\n\n{body}")
        lines += patch_entry(pid, path)
        if pid in TESTS:
            lines += [
                "[[patch.tests]]",
                'name = "tree-check"',
                f"command = {json.dumps(TESTS[pid])}",
                'tags = ["cpu"]',
                "timeout = 60",
            ]
        lines.append("")
    (root / "patches.toml").write_text("\n".join(lines))
    return root / "patches.toml"


def test_gate_across_real_vllm_releases(history, tmp_path, monkeypatch):
    ledger = _write_series(tmp_path / "ledger", history)
    art = tmp_path / "artifacts"
    v31, v32, v33 = (history.resolve(f"vllm=={v}") for v in VERSIONS[1:])

    # 0.30.0 -> 0.31.0: green; the KDA patches follow the file to common/; the cpu tier passes
    r = run_gate(GateRun(ledger, onto="vllm==0.31.0", artifacts=art, tags=["cpu"]))
    assert (r.status, r.exit_code, r.commit) == ("green", 0, v31), r.to_json()
    verdicts = {p["id"]: (p["verdict"], p["how"]) for p in r.rebase["patches"]}
    assert verdicts["kda-note"] == ("carried", "moved") and verdicts["metrics-note"] == ("carried", "clean")
    # verify's classes: the grep needs the patch (proven); a syntax check passes without it (not needed)
    assert [(t["patch"], t["status"], t["class"]) for t in r.tests] == [
        ("metrics-note", "passed", "not-needed"),
        ("kv-blocks-cap", "passed", "proven"),
    ]
    assert any(w.startswith("metrics-note:") for w in r.warnings)
    patch = (art / "series.patch").read_text()
    assert '+base = "vllm==0.31.0"' in patch and "vllm/models/glm5next/common/kda.py" in patch
    assert r.apply["outcome"] == "applied" and "matches the lock" in r.apply["message"]
    assert "GREEN" in (art / "report.md").read_text()

    # asked again: upstream has not moved, nothing to do
    t0 = time.monotonic()
    r = run_gate(GateRun(ledger, onto="vllm==0.31.0", artifacts=art, tags=["cpu"]))
    took = time.monotonic() - t0
    assert (r.status, r.exit_code) == ("unchanged", 0) and took < 1.0, took

    # --latest: the newest release the (local) index lists is 0.33.0; two patches broke on the way
    served = tmp_path / "index"
    served.mkdir()
    for v in VERSIONS:
        (served / f"vllm-{v}.tar.gz").symlink_to(cache.dist_dir() / f"vllm-{v}.tar.gz")
    with LocalIndex(served) as index:
        monkeypatch.setenv("PATCHSET_INDEX_URL", index.url)
        r = run_gate(GateRun(ledger, latest=True, artifacts=art, tags=["cpu"]))
        assert (r.status, r.exit_code, r.onto, r.commit) == ("red", 1, "vllm==0.33.0", v33), r.to_json()
        assert sorted(r.conflicts) == ["kda-ssm-dtype", "kv-blocks-cap"]
        ssm, cap = r.first_bad["kda-ssm-dtype"], r.first_bad["kv-blocks-cap"]
        assert (ssm["commit"]["sha"], ssm["commit"]["release"], ssm["last_good"]) == (v32, "0.32.0", v31)
        assert (cap["commit"]["sha"], cap["commit"]["release"], cap["last_good"]) == (v33, "0.33.0", v32)
        assert ssm["range_size"] == cap["range_size"] == 2  # bisected from the last green release, 0.31.0
        assert r.apply["outcome"] == "skipped" and r.tests == []
        md = (art / "report.md").read_text()
        assert "first bad upstream commit" in md and "release 0.32.0" in md and "release 0.33.0" in md
        junit = (art / "junit.xml").read_text()
        assert 'failures="2"' in junit and "release 0.33.0" in junit
        state = json.loads((ledger.parent / ".patchset/gate-state.json").read_text())["targets"]["vllm"]
        assert (state["verdict"], state["last_clean"], state["last_green_label"]) == ("red", v31, "vllm==0.31.0")

        r = run_gate(GateRun(ledger, latest=True, artifacts=art, tags=["cpu"]))
        assert (r.status, r.exit_code, r.previous["verdict"]) == ("unchanged", 0, "red")

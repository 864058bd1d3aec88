"""``patchset verify`` proven on vLLM's own unit tests, on CPU, from real vLLM 0.30.0 source.

The example series ``examples/verify-kv`` patches ``vllm/v1/core/kv_cache_utils.py`` three times;
its tests run with vLLM's own test harness (``tests/v1/core/``, its conftest, the CPU torch) in
the venv ``ci/setup_vllm_tests.sh`` builds (~4 min the first time, then cached). The run must
classify the three patches proven / not needed / broken, and must test the *patched* source:
the tree's ``vllm/`` shadows the installed copy (checked here directly, and by every run).

Needs the package index (the vLLM sdist and the venv's packages): skipped with a reason without it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from patchset.engine.results import SeriesItem
from patchset.engine.tree import apply_series
from patchset.upstream.releases import probe_index
from patchset.verify import overlay, vllm_env
from patchset.verify.base_tree import index_base
from patchset.verify.outcomes import BROKEN, NOT_NEEDED, PROVEN
from patchset.verify.pertest import VerifyRun, run_verify
from tests.support.checkout import example_copy

pytestmark = pytest.mark.network

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "verify-kv" / "patches.toml"


@pytest.fixture(scope="module")
def vllm_ready() -> Path:
    """The vLLM test venv and the unpacked vLLM 0.30.0 base (both cached); their python."""
    if not vllm_env.venv_ready():
        problem = probe_index()
        if problem:
            pytest.skip(f"package index unreachable ({problem}): cannot build the vLLM test venv")
        vllm_env.ensure_venv()  # a failure here with a reachable index is a real failure
    try:
        base = index_base("vllm==0.30.0", "source")
    except Exception as exc:
        problem = probe_index()
        if problem:
            pytest.skip(f"package index unreachable ({problem}): no vLLM 0.30.0 source")
        raise exc
    return base


def test_example_series_is_proven_not_needed_and_broken(vllm_ready: Path, tmp_path: Path) -> None:
    junit = tmp_path / "verify.xml"
    rep = run_verify(VerifyRun(example_copy("verify-kv", tmp_path) / "patches.toml", tags=["cpu"], jobs=2, junit=junit))
    got = {p.patch_id: p.klass for p in rep.patches}
    assert got == {
        "01-kv-popleft-n-valueerror": PROVEN,
        "02-kv-popleft-empty-guard": NOT_NEEDED,
        "03-kv-popleft-n-keep-links": BROKEN,
    }, json.dumps(rep.to_json(), indent=1)[:6000]
    assert rep.exit_code == 1 and rep.base.startswith("vllm==0.30.0")
    assert "the tested tree matches the lock (every patched file)" in rep.notes
    t1, t2, t3 = (p.tests[0] for p in rep.patches)
    # 01: without the patch vLLM 0.30.0 raises its bare AssertionError from the tree's own source
    assert "AssertionError" in t1.without_run.output and "vllm/v1/core/kv_cache_utils.py:" in t1.without_run.output
    assert "1 passed" in t1.with_run.output
    # 02: both sides pass: vLLM 0.30.0 already raises "No free blocks available"
    assert "2 passed" in t2.with_run.output and "2 passed" in t2.without_run.output
    # 03: vLLM's own popleft_n test fails with the series and passes without the patch
    assert "FAILED tests/v1/core/test_kv_cache_utils.py::test_free_kv_cache_block_queue_popleft_n" in t3.with_run.output
    assert "failed tests/v1/core/test_kv_cache_utils.py::test_free_kv_cache_block_queue_popleft_n" in t3.note
    assert "6 passed" in t3.without_run.output
    # every run imported vllm from its own build tree, never from the venv's installed copy
    for t in rep.tests:
        for run in (t.with_run, t.without_run):
            line = next(ln for ln in run.output.splitlines() if ln.startswith("vllm_env: vllm imported from "))
            assert "/verify-work/" in line and "site-packages" not in line, line
    root = ET.parse(junit).getroot()
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("3", "2", "0")


def test_the_tree_vllm_shadows_the_installed_copy(vllm_ready: Path, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    overlay.make_overlay(vllm_ready, tree)
    lines = (vllm_ready / "vllm/v1/core/kv_cache_metrics.py").read_bytes().splitlines(keepends=True)[:4]
    body = (
        b"--- a/vllm/v1/core/kv_cache_metrics.py\n+++ b/vllm/v1/core/kv_cache_metrics.py\n@@ -1,4 +1,5 @@\n"
        + b"".join(b" " + ln for ln in lines[:2])
        + b"+PATCHSET_MARKER = 'patched tree'\n"
        + b"".join(b" " + ln for ln in lines[2:])
    )
    assert apply_series(tree, [SeriesItem("marker", body)]).ok
    env = vllm_env.test_env(tree)
    proc = subprocess.run(
        [
            str(vllm_env.venv_python()),
            "-c",
            "import vllm, vllm.v1.core.kv_cache_metrics as m; print(vllm.__file__, m.PATCHSET_MARKER)",
        ],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""  # vLLM may log to stdout first
    assert last == f"{tree / 'vllm' / '__init__.py'} patched tree", proc.stderr[-2000:]
    # the installed copy is the unpatched one: without PYTHONPATH the marker is not there
    plain = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [
            str(vllm_env.venv_python()),
            "-c",
            "import vllm.v1.core.kv_cache_metrics as m; print(hasattr(m, 'PATCHSET_MARKER'), m.__file__)",
        ],
        cwd=tmp_path,
        env=plain,
        capture_output=True,
        text=True,
        timeout=300,
    )
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("False ") and "site-packages" in last, proc.stderr[-2000:]


def test_wrapper_refuses_to_test_the_installed_copy(vllm_ready: Path, tmp_path: Path) -> None:
    empty = tmp_path / "not-a-vllm-tree"
    empty.mkdir()
    proc = subprocess.run(
        [sys.executable, str(REPO / "verify" / "vllm_env.py"), "--tree", str(empty), "--", "-q"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ},
    )
    assert proc.returncode == 99, proc.stdout[-2000:]
    assert "refusing to test the wrong code" in proc.stdout + proc.stderr

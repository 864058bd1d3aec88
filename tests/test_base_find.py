"""``patchset base find`` on real vLLM releases from the package index (issue 33): the releases a
series applies to with zero fuzz, newest first, probed by release order, each verdict held against
GNU ``patch --dry-run -F0`` on that release's files; asked again, everything comes from the cache."""

from __future__ import annotations

import difflib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from packaging.version import Version

from tests.support.repo import release_history

pytestmark = pytest.mark.network

KV = "vllm/v1/core/kv_cache_utils.py"  # changes between every release (real-sources.md)


def _patch_on(data: bytes) -> bytes:
    lines = data.decode().splitlines(keepends=True)
    k = next(i for i, ln in enumerate(lines) if ln.startswith("def ") and i > len(lines) // 3)
    new = [*lines[:k], "# spark: a downstream note\n", *lines[k:]]
    return (
        f"diff --git a/{KV} b/{KV}\n".encode()
        + "".join(difflib.unified_diff(lines, new, f"a/{KV}", f"b/{KV}")).encode()
    )


def test_base_find_names_the_releases_a_series_fits_as_gnu_patch_does(run, tmp_path: Path) -> None:
    if shutil.which("patch") is None:
        pytest.skip("GNU patch is not installed")
    history = release_history("vllm", ["0.30.0", "0.31.0"])
    body = _patch_on(history.read_blob(history.resolve("vllm==0.31.0"), KV))
    led = tmp_path / "led"
    led.mkdir()
    assert run("init", "--target", "vllm", cwd=led).code == 0
    (tmp_path / "kv.patch").write_bytes(body)
    assert run("import", tmp_path / "kv.patch", cwd=led).code == 0
    r = run("base", "find", "--since", "0.30.0", "--json", cwd=led)
    assert r.code == 0, r
    rep = json.loads(r.stdout)
    assert "0.31.0" in rep["fits"] and rep["newest"] == rep["fits"][0]
    for v, fits in rep["checked"].items():  # the oracle: GNU patch on that release's file
        tree = tmp_path / f"tree-{v}"
        (tree / KV).parent.mkdir(parents=True)
        (tree / KV).write_bytes(history.read_blob(history.resolve(f"vllm=={v}"), KV))
        gnu = subprocess.run(["patch", "--dry-run", "-F0", "-p1", "-d", str(tree)], input=body, capture_output=True)
        assert (gnu.returncode == 0) == fits, (v, gnu.stdout)
    # newest first, a run of releases in the index's order
    assert rep["fits"] == sorted(rep["fits"], key=Version, reverse=True)
    again = json.loads(run("base", "find", "--since", "0.30.0", "--json", cwd=led).stdout)
    assert again["fits"] == rep["fits"] and again["from_cache"] == len(again["checked"])
    r = run("base", "find", "--since", "0.30.0", cwd=led)
    assert r.code == 0 and f"--base vllm=={rep['newest']}" in r.stdout, r

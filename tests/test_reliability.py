"""Reliability findings of issue #16, one test per finding: each failed before its fix.

Real trees, real processes (``multiprocessing`` / ``subprocess``) and real GNU patch where a
behaviour is copied from it. The heavy tiers (hundreds of kill points, many concurrent runs)
are in ``tests/test_reliability_stress.py`` behind the ``stress`` marker.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from patchset.engine.hunks import apply_file
from patchset.errors import PatchFormatError
from patchset.patchfmt.diffs import parse_patch

NUMS = b"".join(b"%d\n" % i for i in range(1, 21))

MISORDERED = b"""--- a/f
+++ b/f
@@ -9,3 +9,3 @@
 9
-10
+TEN
 11
@@ -1,3 +1,3 @@
 1
-2
+TWO
 3
"""


def _gnu(old: bytes, patch: bytes, tmp: Path) -> subprocess.CompletedProcess:
    (tmp / "f").write_bytes(old)
    return subprocess.run(
        ["patch", "-p1", "-F0", "--dry-run", "-s"], input=patch, cwd=tmp, capture_output=True, timeout=30
    )


# --------------------------------------------------------------------------- 4: misordered hunks


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_misordered_hunks_are_refused_like_gnu_patch(tmp_path: Path) -> None:
    gnu = _gnu(NUMS, MISORDERED, tmp_path)
    assert gnu.returncode == 1 and b"misordered hunks" in gnu.stdout + gnu.stderr
    out = apply_file(NUMS, parse_patch(MISORDERED)[0])
    assert not out.ok
    assert [h.status for h in out.hunks] == ["clean", "failed"]
    assert "misordered" in out.hunks[1].describe()


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_overlapping_hunks_are_refused_like_gnu_patch(tmp_path: Path) -> None:
    # both hunks change line 5: GNU patch refuses the second one
    patch = b"--- a/f\n+++ b/f\n@@ -4,3 +4,3 @@\n 4\n-5\n+FIVE\n 6\n@@ -4,3 +4,3 @@\n 4\n-5\n+V\n 6\n"
    gnu = _gnu(NUMS, patch, tmp_path)
    assert gnu.returncode == 1 and b"misordered hunks" in gnu.stdout + gnu.stderr
    out = apply_file(NUMS, parse_patch(patch)[0])
    assert not out.ok and out.hunks[1].status == "failed" and out.hunks[1].misordered


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_hunks_sharing_only_context_still_apply_like_gnu_patch(tmp_path: Path) -> None:
    patch = b"--- a/f\n+++ b/f\n@@ -4,3 +4,3 @@\n 4\n-5\n+FIVE\n 6\n@@ -5,3 +5,3 @@\n 5\n-6\n+SIX\n 7\n"
    assert _gnu(NUMS, patch, tmp_path).returncode == 0
    out = apply_file(NUMS, parse_patch(patch)[0])
    assert out.ok and out.new == NUMS.replace(b"5\n6\n", b"FIVE\nSIX\n", 1)


# --------------------------------------------------------------------------- 5: hunk numbers


@pytest.mark.parametrize("start", ["10000000", "1000000000000"])
def test_far_hunk_numbers_fail_fast(start: str) -> None:
    patch = b"--- a/f\n+++ b/f\n@@ -%s,3 +%s,3 @@\n 9\n-10\n+TEN\n 11\n" % (start.encode(), start.encode())
    t0 = time.perf_counter()
    out = apply_file(NUMS, parse_patch(patch)[0])
    assert time.perf_counter() - t0 < 1.0
    # GNU patch finds the hunk anywhere in the file whatever its number: so does the engine
    assert out.ok and out.new == NUMS.replace(b"10\n", b"TEN\n")


def test_absurd_hunk_numbers_are_a_located_error() -> None:
    patch = b"--- a/f\n+++ b/f\n@@ -99999999999999999999,3 +99999999999999999999,3 @@\n 9\n-10\n+TEN\n 11\n"
    t0 = time.perf_counter()
    with pytest.raises(PatchFormatError) as exc:
        parse_patch(patch, source="p.patch")
    assert time.perf_counter() - t0 < 1.0
    assert "p.patch:3" in exc.value.render() and "too large" in exc.value.render()

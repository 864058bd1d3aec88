"""CI cannot hide a tier: under CI=true a skip fails the run unless PATCHSET_TIERS_OFF names it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.repo import REPO_ROOT
from tests.support.tiers import ci_verdict, tier_of, tiers_off

SKIPPING = """
import pytest

def test_needs_browser():
    pytest.skip("chromium is not installed (apt-get install chromium)")
"""


def _pytest(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_skipping.py").write_text(SKIPPING)
    # the project's conftest is loaded through -p, so the hook under test is the real one
    full = {**os.environ, **env, "PYTHONPATH": str(REPO_ROOT)}
    if "PATCHSET_TIERS_OFF" not in env:
        full.pop("PATCHSET_TIERS_OFF", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        env=full,
        cwd=tmp_path,
        timeout=120,
    )


def test_a_skip_fails_under_ci(tmp_path: Path) -> None:
    r = _pytest(tmp_path, CI="true")
    assert r.returncode == 1, r.stdout
    assert "tier 'chromium' may not skip" in r.stdout


def test_a_tier_named_off_with_a_reason_stays_a_skip(tmp_path: Path) -> None:
    r = _pytest(tmp_path, CI="true", PATCHSET_TIERS_OFF="chromium=no browser on this runner")
    assert r.returncode == 0, r.stdout
    assert "1 skipped" in r.stdout


def test_outside_ci_a_skip_is_a_skip(tmp_path: Path) -> None:
    r = _pytest(tmp_path, CI="")
    assert r.returncode == 0 and "1 skipped" in r.stdout, r.stdout


def test_tier_names_and_reasons(monkeypatch) -> None:
    assert tier_of("package index unreachable: timed out") == "network"
    assert tier_of("Debian corpus: vim could not be fetched") == "debian"
    assert tier_of("something new") == "other"
    assert tiers_off("chromium=no browser; engine=; debian") == {"chromium": "no browser"}
    monkeypatch.delenv("CI", raising=False)
    assert ci_verdict("chromium is not installed") is None
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("PATCHSET_TIERS_OFF", "debian=no deb-src here")
    assert "PATCHSET_TIERS_OFF='chromium=<why>'" in (ci_verdict("chromium is not installed") or "")
    assert ci_verdict("Debian corpus: no sources") is None

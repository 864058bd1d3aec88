"""The search ``base find`` runs over releases (issue 33), offline: verdicts come from its own cache
file (as a second ``base find`` reads them), so the gallop and the bisection are measured on 40
releases without downloading any: the run of releases that fit is found exactly, in far fewer
probes than releases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from patchset.commands.onboard import bases
from patchset.ledger.store import load_ledger

VERSIONS = [f"0.{n}.0" for n in range(40, 0, -1)]  # newest first


@pytest.fixture
def found(run, tmp_path: Path):
    led = tmp_path / "led"
    led.mkdir()
    assert run("init", "--target", "vllm", cwd=led).code == 0
    (tmp_path / "x.diff").write_text("--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1 +1 @@\n-a\n+b\n")
    assert run("import", tmp_path / "x.diff", cwd=led).code == 0
    ledger = load_ledger(led / "patches.toml")

    def search(run_of: range) -> bases.Find:
        f = bases.Find(ledger, ledger.targets["vllm"], list(VERSIONS))
        digest = bases.series_digest(ledger, f.target)
        verdicts = {f"{digest} {v}": i in run_of for i, v in enumerate(VERSIONS)}
        path = bases._cache_file()
        path.write_text(json.dumps(verdicts))
        return bases.search(f)

    return search


@pytest.mark.parametrize(
    ("run_of", "probes"),
    [
        (range(10, 15), 18),
        (range(0, 3), 12),
        (range(37, 40), 14),
        (range(0, 40), 8),
        (range(30, 40), 14),
        (range(20, 21), 40),
    ],
)
def test_the_search_finds_the_run_that_fits_in_few_probes(found, run_of: range, probes: int) -> None:
    """A wide run is found in a gallop and two bisections; a one-release run the gallop steps over
    is still found (the widest unprobed stretches first)."""
    f = found(run_of)
    assert bases.fitting(f) == [VERSIONS[i] for i in run_of]
    assert len(f.verdicts) <= probes, (len(f.verdicts), sorted(f.verdicts))


def test_no_release_fits(found) -> None:
    f = found(range(0))
    assert bases.fitting(f) == [] and len(f.verdicts) == len(VERSIONS)  # a "none" is said only when all were checked

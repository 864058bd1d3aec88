"""Messages a new user meets in the first hour, and one meaning per option name across commands:
an empty ledger, a relative ``--tree`` under ``-C``, a failing hunk (its path printed once),
``rebase --upstream`` (``--repo`` kept as a deprecated alias), ``verify --tree NAME=DIR`` as in
apply, and the one progress callback shape."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from patchset.commands.apply import TreeArg
from patchset.commands.apply import run as run_apply
from patchset.ledger.store import load_ledger

LEDGER = """\
schema = 1
[targets.lib]
upstream = "https://example.invalid/lib.git"

[[patch]]
id = "lib-01-fix-the-cap"
target = "lib"
title = "fix the cap"
origin = "ours"
"""
OLD = "".join(f"line {i}\n" for i in range(12))


@pytest.fixture
def led(tmp_path: Path, run) -> Path:
    d = tmp_path / "led"
    d.mkdir()
    (d / "patches.toml").write_text(LEDGER)
    body = "".join(
        difflib.unified_diff(
            OLD.splitlines(True), OLD.replace("line 5\n", "line five\n").splitlines(True), "a/pkg/m.py", "b/pkg/m.py"
        )
    )
    (tmp_path / "lib-01-fix-the-cap.patch").write_text(body)
    assert run("import", tmp_path / "lib-01-fix-the-cap.patch", cwd=d).code == 0
    (d / "tree/pkg").mkdir(parents=True)
    (d / "tree/pkg/m.py").write_text(OLD)
    return d


def test_apply_on_an_empty_ledger_says_what_to_do(run, tmp_path: Path) -> None:
    assert run("init", cwd=tmp_path).code == 0
    (tmp_path / "t").mkdir()
    r = run("apply", "--tree", "t", cwd=tmp_path)
    assert r.code == 2
    assert "no active patches" in r.stderr and "patchset import" in r.stderr
    assert not r.stderr.rstrip().endswith(":"), r.stderr


def test_a_missing_relative_tree_under_C_names_the_path_tried(run, led: Path) -> None:
    r = run("apply", "--tree", "nothere", cwd=led)
    assert r.code == 2
    assert f"{led.resolve() / 'nothere'} is not a directory" in r.stderr
    r = run("verify", "--tree", "lib=nothere", cwd=led)
    assert r.code == 2 and f"{led.resolve() / 'nothere'} is not a directory" in r.stderr, r


def test_a_failing_hunk_names_its_file_once(run, led: Path) -> None:
    (led / "tree/pkg/m.py").write_text(OLD.replace("line 5\n", "something else\n"))
    r = run("apply", "--tree", "tree", cwd=led)
    assert r.code == 1
    line = next(ln for ln in r.stdout.splitlines() if "FAILED" in ln)
    assert line.count("pkg/m.py") == 1, line
    r = run("apply", "--tree", "tree", "--json", cwd=led)
    assert '"message": "1 out of 1 hunk(s) FAILED"' in r.stdout


def test_rebase_names_the_upstream_clone_upstream_and_warns_on_repo(run, led: Path, tmp_path: Path) -> None:
    new = run("rebase", "--onto", str(tmp_path), "--dry-run", "--upstream", str(tmp_path / "nogit"), cwd=led)
    old = run("rebase", "--onto", str(tmp_path), "--dry-run", "--repo", str(tmp_path / "nogit"), cwd=led)
    assert new.code == old.code == 2
    assert "deprecated" in old.stderr and "--upstream" in old.stderr and "deprecated" not in new.stderr
    assert new.stderr.splitlines()[-1] == old.stderr.splitlines()[-1]  # the same meaning
    assert "--repo" not in run("rebase", "--help").stdout


def test_one_progress_shape(led: Path) -> None:
    calls: list[tuple] = []
    ledger = load_ledger(led / "patches.toml")
    reps = run_apply(
        ledger,
        {"lib": TreeArg("tree", led / "tree")},
        dry_run=True,
        progress=lambda what, done, total: calls.append((what, done, total)),
    )
    assert reps[0].ok
    assert calls and all(isinstance(w, str) and isinstance(d, int) for w, d, _ in calls)
    assert calls[-1] == ("lib-01-fix-the-cap", 1, 1)

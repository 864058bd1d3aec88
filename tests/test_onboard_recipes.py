"""The survey's reading of recipes and repositories without the package index (issue 33): which
diff each ``patch``/``git apply`` line of a script names, in order, confined to the repository; a
target the user names; links never followed. The vLLM-shaped repositories are in
``test_onboard_survey.py``."""

from __future__ import annotations

import json
import os
from pathlib import Path

from patchset.commands.onboard import recipes
from tests.support.repo import tree_digest

RUN_SH = """#!/bin/bash
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# patch -p1 < commented-out.diff
patch -p1 -d / < "$HERE/first.diff"
patch -Np2 --directory=/workspace/vllm -i second.diff
cd /workspace/vllm && git apply --whitespace=nowarn ../shared/third.patch
curl -sL https://github.com/vllm-project/vllm/pull/31000.diff | git apply
for p in "$HERE"/*.patch; do patch -p1 < "$p"; done
patch -p1 < ../../../etc/passwd
"""


def test_a_recipe_names_its_diffs_in_order_confined_to_the_repository(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "mods/gb10").mkdir(parents=True)
    (repo / "mods/shared").mkdir()
    for rel in ("mods/gb10/first.diff", "mods/gb10/second.diff", "mods/shared/third.patch"):
        (repo / rel).write_text("--- a/x\n+++ b/x\n")
    script = repo / "mods/gb10/run.sh"
    script.write_text(RUN_SH)
    got = recipes.steps(repo, script)
    assert [(s.diff, s.strip, s.directory) for s in got if s.diff] == [
        ("mods/gb10/first.diff", 1, "/"),
        ("mods/gb10/second.diff", 2, "/workspace/vllm"),
        ("mods/shared/third.patch", None, ""),
    ]
    assert [s.line for s in got if s.diff] == [5, 6, 7]
    problems = {s.written: s.problem for s in got if s.problem}
    assert "computed by the script" in problems["$p"]  # a loop variable: the survey finds those diffs itself
    assert "not in the repository" in problems["../../../etc/passwd"]  # never read outside the repository
    assert not any("31000" in s.written for s in got)  # a PR piped in is the PR list's business


def test_a_named_target_takes_its_files_and_is_created(run, tmp_path: Path) -> None:
    """A target patchset has no preset for is created only when the user names it."""
    repo = tmp_path / "build"
    (repo / "patches").mkdir(parents=True)
    (repo / "patches/fix.diff").write_text(
        "--- a/mylib/src/core.c\n+++ b/mylib/src/core.c\n@@ -1,2 +1,2 @@\n int a;\n-int b;\n+int c;\n"
    )
    (repo / "README.md").write_text("# build\n")
    led = tmp_path / "led"
    led.mkdir()
    assert run("init", cwd=led).code == 0
    before = tree_digest(led)
    r = run("import", repo, cwd=led)  # no target: mylib is nobody's package
    assert r.code == 2 and "no changes to vllm (or any target) found" in r.stderr, r
    assert "in no target's package" in r.stderr and tree_digest(led) == before
    r = run("import", repo, "--target", "mylib", "--json", cwd=led)
    assert r.code == 0, r
    rep = json.loads(r.stdout)
    assert rep["created"] == ["mylib"] and rep["added"] == ["fix"], rep
    assert 'target = "mylib"' in (led / "patches.toml").read_text()
    assert "[targets.patches]" not in (led / "patches.toml").read_text()  # never a target named after a folder


def test_links_are_not_followed(run, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.diff").write_text("--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1 +1 @@\n-a\n+b\n")
    repo = tmp_path / "repo"
    (repo / "patches").mkdir(parents=True)
    os.symlink(outside / "secret.diff", repo / "patches/linked.diff")
    os.symlink(outside, repo / "linked-dir")
    led = tmp_path / "led"
    led.mkdir()
    assert run("init", "--target", "vllm", cwd=led).code == 0
    r = run("import", repo, "--dry-run", "--json", cwd=led)
    assert r.code == 0, r
    assert json.loads(r.stdout)["findings"] == []


def test_a_nested_quilt_series_gives_the_order(run, tmp_path: Path) -> None:
    repo = tmp_path / "build"
    (repo / "docker/patches").mkdir(parents=True)
    for n in ("a-first", "b-second"):
        (repo / f"docker/patches/{n}.patch").write_text(f"--- a/vllm/{n}.py\n+++ b/vllm/{n}.py\n@@ -1 +1 @@\n-a\n+b\n")
    (repo / "docker/patches/series").write_text("# applied by quilt push -a\nb-second.patch\na-first.patch -p1\n")
    (repo / "docker/Dockerfile").write_text("FROM vllm/vllm-openai\n")
    led = tmp_path / "led"
    led.mkdir()
    assert run("init", "--target", "vllm", cwd=led).code == 0
    r = run("import", repo, "--dry-run", "--json", cwd=led)
    assert r.code == 0, r
    diffs = [f["path"] for f in json.loads(r.stdout)["findings"] if f["kind"] == "diff"]
    assert diffs == ["docker/patches/b-second.patch", "docker/patches/a-first.patch"], diffs  # the series' order


def test_a_recipe_that_also_edits_says_those_edits_are_not_imported(run, tmp_path: Path) -> None:
    """A recipe applying a diff and then ``sed -i`` on an installed file: the diff is imported, and
    the inventory names the edit line as not imported (never silently dropped)."""
    repo = tmp_path / "build"
    (repo / "mods/fix").mkdir(parents=True)
    (repo / "mods/fix/fix.diff").write_text("--- a/vllm/a.py\n+++ b/vllm/a.py\n@@ -1 +1 @@\n-a\n+b\n")
    (repo / "mods/fix/run.sh").write_text(
        "#!/bin/bash\n"
        'patch -p1 -d /usr/local/lib/python3.12/dist-packages < "$(dirname "$0")/fix.diff"\n'
        "# sed -i 's/x/y/' commented.py\n"
        "sed -i 's/BLOCK = 16/BLOCK = 32/' /usr/local/lib/python3.12/dist-packages/vllm/b.py\n"
    )
    led = tmp_path / "led"
    led.mkdir()
    assert run("init", "--target", "vllm", cwd=led).code == 0
    r = run("import", repo, "--dry-run", "--json", cwd=led)
    assert r.code == 0, r
    found = {(f["kind"], f["path"]): f for f in json.loads(r.stdout)["findings"]}
    assert ("diff", "mods/fix/fix.diff") in found, found
    edit = found.get(("edit script", "mods/fix/run.sh:4"))
    assert edit, json.dumps(list(found.values()), indent=1)
    assert "edits files (line 4)" in edit["reason"] and not edit["imported"], edit
    plain = run("import", repo, "--dry-run", cwd=led)
    assert "mods/fix/run.sh:4" in plain.stdout + plain.stderr

"""Messages a new user meets in the first hour, and one meaning per option name across commands:
an empty ledger, a relative ``--tree`` under ``-C``, a failing hunk (its path printed once),
``rebase --upstream`` (``--repo`` kept as a deprecated alias), ``verify --tree NAME=DIR`` as in
apply, and the one progress callback shape."""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import pytest

from patchset.commands.apply import run as run_apply
from patchset.commands.apply.target import ApplyRun, TreeArg
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
    job = ApplyRun(ledger, dry_run=True, progress=lambda what, done, total: calls.append((what, done, total)))
    reps = run_apply(job, {"lib": TreeArg("tree", led / "tree")})
    assert reps[0].ok
    assert calls and all(isinstance(w, str) and isinstance(d, int) for w, d, _ in calls)
    assert calls[-1] == ("lib-01-fix-the-cap", 1, 1)


# --------------------------------------------------------------------------- one meaning per name (issue 24)


def every_command() -> dict[str, object]:
    """``{"apply": <click.Command>, "build wheel": ..., ...}``: every leaf command, lazily loaded ones too."""
    import click

    from patchset import cli

    found: dict[str, click.Command] = {}

    def walk(group: click.Group, prefix: str) -> None:
        ctx = click.Context(group)
        for name in group.list_commands(ctx):
            cmd = group.get_command(ctx, name)
            assert cmd is not None, name
            if isinstance(cmd, click.Group):
                walk(cmd, f"{prefix}{name} ")
            else:
                found[f"{prefix}{name}"] = cmd

    walk(cli.main, "")
    return found  # type: ignore[return-value]


def test_an_option_name_has_one_metavar_everywhere() -> None:
    import click

    seen: dict[str, dict[str, str]] = {}
    for path, cmd in every_command().items():
        ctx = click.Context(cmd)  # type: ignore[arg-type]
        for p in cmd.params:  # type: ignore[attr-defined]
            if isinstance(p, click.Option) and not p.hidden and not p.is_flag:
                for name in p.opts:
                    seen.setdefault(name, {})[path] = p.make_metavar(ctx)
    mixed = {name: uses for name, uses in seen.items() if len(set(uses.values())) > 1}
    assert mixed == {}
    assert set(seen["--target"].values()) == {"NAME"}
    assert set(seen["--tree"].values()) == {"[NAME=]DIR"}
    assert set(seen["--upstream"].values()) == {"PATH|URL"}
    assert set(seen["--only"].values()) == {"ID"}
    assert {"apply", "build overlay", "recover", "verify"} <= set(seen["--tree"])
    assert {"rebase", "gate"} <= set(seen["--upstream"])
    assert {"gate", "fetch"} <= set(seen["--only"])


@pytest.mark.parametrize(
    "name, shape",
    [
        ("--target", "The target NAME to "),
        ("--tree", "A build tree, a plain directory (NAME=: of target NAME); "),
        ("--only", "Only the patch ID (repeatable): "),
        ("--upstream", ""),
        ("--plan", "Print the plan (what runs, what is carried and why, the engine starts) and start nothing."),
        ("--full-every", "Re-prove a patch whose proof is N runs old"),
        ("--all", "Every patch"),
        ("--no-cache", "Measure again even when a tree's results are cached."),
    ],
)
def test_a_shared_option_has_one_help_shape(name: str, shape: str) -> None:
    import click

    helps = {}
    for path, cmd in every_command().items():
        for p in cmd.params:  # type: ignore[attr-defined]
            if isinstance(p, click.Option) and name in p.opts and not p.hidden:
                helps[path] = p.help or ""
    assert len(helps) >= 2
    assert all(h.startswith(shape) for h in helps.values()), helps
    if name == "--upstream":
        assert all("URL" in h for h in helps.values()), helps


def test_gate_patch_is_a_deprecated_spelling_of_only(run, led: Path) -> None:
    new = run("gate", "--onto", "v2", "--only", "lib-01-fix-the-cap", "--artifacts", led / "a1", cwd=led)
    old = run("gate", "--onto", "v2", "--patch", "lib-01-fix-the-cap", "--artifacts", led / "a2", cwd=led)
    assert new.code == old.code == 2, (new, old)
    assert "deprecated" in old.stderr and "--only" in old.stderr and "deprecated" not in new.stderr
    assert "--patch" not in run("gate", "--help").stdout


def test_fetch_ids_are_a_deprecated_spelling_of_only(run, led: Path) -> None:
    new = run("fetch", "--only", "lib-01-fix-the-cap", "--offline", "--json", cwd=led)
    old = run("fetch", "lib-01-fix-the-cap", "--offline", "--json", cwd=led)
    assert new.code == old.code and new.stdout == old.stdout, (new, old)
    assert "deprecated" in old.stderr and "--only" in old.stderr and "deprecated" not in new.stderr


def test_build_overlay_takes_the_tree_as_apply_does(run, led: Path) -> None:
    r = run("build", "overlay", "--tree", "lib=nothere", "--out", led / "o", cwd=led)
    assert r.code == 2 and f"{led.resolve() / 'nothere'} is not a directory" in r.stderr, r
    r = run("build", "overlay", "--tree", "lib=tree", "--out", led / "o", cwd=led)
    assert r.code == 2 and "installed_root" in r.stderr and "not a directory" not in r.stderr, r


def test_recover_takes_the_tree_as_apply_does(run, led: Path) -> None:
    for value in ("tree", "lib=tree", str(led / "tree")):
        r = run("recover", "--tree", value, "--json", cwd=led)
        assert r.code == 0, r
        assert json.loads(r.stdout) == [{"tree": str((led / "tree").resolve()), "done": "nothing to recover"}]


def test_rebase_upstream_takes_a_url_as_the_gate_does(run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support.rebase_demo import build

    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    demo = build(tmp_path, include=["p-clean", "p-offset"])
    by_path = run("rebase", "--onto", "v2", "--dry-run", "--json", "--upstream", demo.up, cwd=demo.root)
    by_url = run("rebase", "--onto", "v2", "--dry-run", "--json", "--upstream", f"file://{demo.up}", cwd=demo.root)
    assert by_path.code == by_url.code == 0, (by_path, by_url)

    def classes(r) -> list[tuple[str, str, str]]:
        return [(p["id"], p["verdict"], p["how"]) for p in json.loads(r.stdout)["patches"]]

    assert classes(by_url) == classes(by_path) and len(classes(by_path)) == 2
    assert any((tmp_path / "cache").rglob("HEAD"))  # the clone lives in the cache
    r = run("rebase", "--onto", "v2", "--dry-run", "--upstream", "file:///nonexistent/x.git", cwd=demo.root)
    assert r.code == 2 and "Traceback" not in r.stderr, r

"""Commands import only what they use: ``--version``, ``list``, ``validate``, ``status --offline``
and a piped ``apply --tree`` load none of rich, tomlkit, GitPython, PyGithub, requests (checked
on ``sys.modules`` in a fresh interpreter, on the production ledger and a small applied series).
The timings are bench/cli.py's job, not a test's."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.repo import REPO_ROOT

HEAVY = ("rich", "tomlkit", "git", "github", "requests", "urllib3", "numpy", "scipy")
PROBE = """
import sys
sys.argv = ["patchset", *sys.argv[1:]]
from patchset.cli import main
try:
    main()
except SystemExit:
    pass
print("LOADED", " ".join(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)
"""


def loaded(args: list[str], cwd: Path, printed: str = "") -> set[str]:
    """The heavy libraries the command loaded; ``printed``: text its stdout must hold (it ran)."""
    r = subprocess.run(
        [sys.executable, "-P", "-c", PROBE.format(heavy=HEAVY), *args], cwd=cwd, capture_output=True, text=True
    )
    line = [ln for ln in r.stderr.splitlines() if ln.startswith("LOADED")]
    assert line, r.stderr
    assert printed in r.stdout, r
    return set(line[-1].split()[1:])


@pytest.mark.parametrize(
    "args", [["--version"], ["list"], ["validate"], ["status", "--offline"], ["show", "01-pdl-sm12x"]]
)
def test_light_commands_import_no_heavy_library(args: list[str]) -> None:
    assert loaded(args, REPO_ROOT) == set()


def test_a_heavy_command_still_finds_its_libraries() -> None:
    """The probe can fail: a command that does need tomlkit (writing the ledger) loads it."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        assert "tomlkit" in loaded(["init"], Path(d))


def test_apply_tree_imports_no_heavy_library(run, tmp_path: Path) -> None:
    led = tmp_path / "led"
    led.mkdir()
    (led / "patches.toml").write_text('schema = 1\n[targets.lib]\nupstream = "https://example.invalid/lib.git"\n')
    (tmp_path / "01-fix.patch").write_text("--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,2 @@\n a = 1\n-b = 2\n+b = 3\n")
    assert run("import", tmp_path / "01-fix.patch", cwd=led).code == 0
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "m.py").write_text("a = 1\nb = 2\n")
    assert loaded(["apply", "--tree", str(tree)], led) == set()
    assert (tree / "m.py").read_text() == "a = 1\nb = 3\n"


def test_verify_plan_leaves_scipy_unloaded(tmp_path: Path) -> None:
    """scipy.stats costs about half a second to import: only a run that judges loads it
    (verify/stats.py imports it on first use), not ``verify --plan``."""
    example = tmp_path / "longctx-cpu"
    shutil.copytree(REPO_ROOT / "examples" / "longctx-cpu", example)
    assert "scipy" not in loaded(["verify", "--plan"], example, printed="verify plan")


def test_every_registered_command_loads_under_its_name() -> None:
    """The lazy registry and the command modules agree (a renamed function or command is caught)."""
    import click

    from patchset import cli, clicmds

    ctx = click.Context(cli.main)
    for name in cli.COMMANDS:
        cmd = cli.main.get_command(ctx, name)
        assert isinstance(cmd, click.Command) and cmd.name == name, name
    modules = {p.stem for p in Path(clicmds.__file__).parent.glob("*.py")} - {"__init__", "options"}
    assert modules == {v.split(":")[0].rsplit(".", 1)[1] for v in cli.COMMANDS.values()}


def test_a_command_loads_only_its_own_module(tmp_path: Path) -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-P",
            "-c",
            PROBE.replace(
                "{heavy!r}", repr(("patchset.clicmds.query", "patchset.clicmds.gating", "patchset.clicmds.onboard"))
            ),
            "list",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    line = [ln for ln in r.stderr.splitlines() if ln.startswith("LOADED")]
    assert line and set(line[-1].split()[1:]) == {"patchset.clicmds.query"}, r.stderr


def test_rebase_and_check_longctx_print_without_rich(tmp_path: Path) -> None:
    """Their reports go through the table helper: off a terminal, rich is never imported."""
    from tests.support.completions_double import serving
    from tests.support.rebase_demo import build

    demo = build(tmp_path)
    assert "rich" not in loaded(["rebase", "--onto", "v2", "--dry-run"], demo.root, "#\tpatch\tresult\tdetails")
    with serving() as (url, _):
        args = ["check", "longctx", "--url", url, "--checks", "causality"]
        assert "rich" not in loaded(args, tmp_path, "causality\tN=2048 of 4096")


def test_the_product_declares_its_data_classes_with_dataclasses() -> None:
    """Records are the standard library's ``dataclasses``: no home-made data-class machinery."""
    import ast

    assert not (REPO_ROOT / "patchset" / "records.py").exists()
    offenders = []
    for d in ("patchset", "tracker", "verify", "ci"):
        for path in sorted((REPO_ROOT / d).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ClassDef):
                    for deco in node.decorator_list:
                        target = deco.func if isinstance(deco, ast.Call) else deco
                        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
                        if name == "record":
                            offenders.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno} {node.name}")
    assert offenders == []


WORK_PROBE = """
import gc, json, sys
import patchset.commands.inspection as insp
seen = []
real = insp.list_rows
def probe(*a, **k):
    seen.append((gc.isenabled(), gc.get_freeze_count()))
    return real(*a, **k)
insp.list_rows = probe
sys.argv = ["patchset", "list"]
from patchset.cli import main
try:
    main()
except SystemExit:
    pass
print("GC", json.dumps(seen), file=sys.stderr)
"""


def test_the_cli_leaves_the_garbage_collector_alone() -> None:
    """Issue 24: the console script is ``patchset.cli:main`` itself; nothing disables or freezes
    the collector before or during a command (the ``console.py`` shim and the freeze are gone)."""
    import tomllib

    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"patchset": "patchset.cli:main"}
    assert not (REPO_ROOT / "patchset" / "console.py").exists()
    r = subprocess.run([sys.executable, "-P", "-c", WORK_PROBE], cwd=REPO_ROOT, capture_output=True, text=True)
    line = [ln for ln in r.stderr.splitlines() if ln.startswith("GC")]
    assert line, r.stderr
    assert json.loads(line[-1].removeprefix("GC ")) == [[True, 0]]

"""Commands import only what they use: ``--version``, ``list``, ``validate``, ``status --offline``
and a piped ``apply --tree`` load none of rich, tomlkit, GitPython, PyGithub, requests (checked
on ``sys.modules`` in a fresh interpreter, on the production ledger and a small applied series).
The timings are bench/cli.py's job, not a test's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.repo import REPO_ROOT

HEAVY = ("rich", "tomlkit", "git", "github", "requests", "urllib3")
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


def test_every_registered_command_loads_under_its_name() -> None:
    """The lazy registry and the command modules agree (a renamed function or command is caught)."""
    import click

    from patchset import cli, clicmds

    ctx = click.Context(cli.main)
    for name in cli.COMMANDS:
        cmd = cli.main.get_command(ctx, name)
        assert isinstance(cmd, click.Command) and cmd.name == name, name
    modules = {p.stem for p in Path(clicmds.__file__).parent.glob("*.py")} - {"__init__"}
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


GC_PROBE = """
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
print("GC", json.dumps({"work": seen, "enabled_at_exit": gc.isenabled(), "frozen_at_exit": gc.get_freeze_count()}), file=sys.stderr)
"""


def test_a_process_collects_garbage_during_the_work_but_not_while_loading_or_exiting() -> None:
    """The console script holds collection while modules load and skips it at exit; the command's
    own work (which may be a long rebase) runs with the collector on."""
    r = subprocess.run([sys.executable, "-P", "-c", GC_PROBE], cwd=REPO_ROOT, capture_output=True, text=True)
    line = [ln for ln in r.stderr.splitlines() if ln.startswith("GC")]
    assert line, r.stderr
    got = json.loads(line[-1].removeprefix("GC "))
    ((enabled, frozen),) = got["work"]
    assert enabled, got  # the work itself is collected
    assert frozen > 1000, got  # what was loaded moved out of the collector's sight
    assert got["frozen_at_exit"] >= frozen, got  # exit: the final collections walk nothing


def test_the_test_runner_leaves_the_collector_alone() -> None:
    """click's test runner (``args`` given) must not disable or freeze anything in the test process."""
    import gc

    from click.testing import CliRunner

    from patchset.cli import main

    before = gc.get_freeze_count()
    assert gc.isenabled()
    r = CliRunner().invoke(main, ["-C", str(REPO_ROOT), "list"])
    assert r.exit_code == 0, r.output
    assert gc.isenabled() and gc.get_freeze_count() == before


# Modules that only `patchset verify` and the gate load (engines, serving checks, their statistics
# and result cache), whose new classes are plain dataclasses as the developers' guide asks now:
# no other command pays for them (test_verify_only_modules_stay_out_of_other_commands).
VERIFY_ONLY = {
    "verify/engines.py",
    "verify/engine_runs.py",
    "verify/serving.py",
    "verify/stats.py",
    "verify/results_cache.py",
}


def test_verify_only_modules_stay_out_of_other_commands() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from patchset.cli import main\n"
        "try:\n    main(['-C', sys.argv[1], 'list'], standalone_mode=False)\nexcept SystemExit:\n    pass\n"
        "print('loaded:', *sorted(m for m in sys.modules if m.startswith('patchset.verify')))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(REPO_ROOT)], capture_output=True, text=True, cwd=REPO_ROOT, check=True
    )
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("loaded:"))
    loaded = {f"verify/{m.rsplit('.', 1)[1]}.py" for m in line.split()[1:]}
    assert not loaded & VERIFY_ONLY, loaded


def test_the_product_declares_its_data_classes_as_records() -> None:
    """``@dataclass`` compiles a ``__repr__`` and an ``__eq__`` (and more) per class at import;
    ``@record`` shares one of each (``patchset/records.py``). A ``@dataclass`` creeping back into
    the product would cost every command that loads its module."""
    import ast

    offenders = []
    for d in ("patchset", "tracker", "verify", "ci"):
        for path in sorted((REPO_ROOT / d).rglob("*.py")):
            if path.relative_to(REPO_ROOT).as_posix() in VERIFY_ONLY:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ClassDef):
                    for deco in node.decorator_list:
                        target = deco.func if isinstance(deco, ast.Call) else deco
                        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
                        if name == "dataclass":
                            offenders.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno} {node.name}")
    assert offenders == []


def test_a_caller_that_goes_on_keeps_its_collector() -> None:
    """``main(standalone_mode=False)`` returns to its caller: nothing may be left frozen or off."""
    code = (
        "import gc, sys\n"
        "sys.argv = ['patchset', '--version']\n"
        "from patchset.cli import main\n"
        "before = gc.get_freeze_count()\n"
        "main(standalone_mode=False)\n"
        "print('GC', gc.isenabled(), gc.get_freeze_count() == before)\n"
    )
    r = subprocess.run([sys.executable, "-P", "-c", code], cwd=REPO_ROOT, capture_output=True, text=True)
    assert "GC True True" in r.stdout, r


CONSOLE_PROBE = """
import gc, json, sys
seen = {}
class Spy:
    def find_spec(self, name, path=None, target=None):
        if name in ("click", "patchset.cli") and name not in seen:
            seen[name] = gc.isenabled()
        return None
sys.meta_path.insert(0, Spy())
sys.argv = ["patchset", "--version"]
from patchset.console import main
try:
    main()
except SystemExit:
    pass
print("GC", json.dumps(seen), file=sys.stderr)
"""


def test_the_console_script_holds_collection_before_click_loads() -> None:
    r = subprocess.run([sys.executable, "-P", "-c", CONSOLE_PROBE], cwd=REPO_ROOT, capture_output=True, text=True)
    line = [ln for ln in r.stderr.splitlines() if ln.startswith("GC")]
    assert line, r.stderr
    assert json.loads(line[-1].removeprefix("GC ")) == {"patchset.cli": False, "click": False}

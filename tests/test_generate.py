"""Edit scripts as generated patches (issue #25): ``import --script`` runs an anchored edit script on
a private copy of the base and keeps its diff; what it must not do (exit non-zero, touch the ledger
or its working directory, leave a symlink, name no ``{root}``, change nothing, run forever) is
refused; ``validate`` notices a changed script; ``rebase`` runs it again on the new base: same diff
carried, another diff refreshed with its range-diff, a vanished anchor a conflict with the
script's own message. The real-release version is in ``tests/test_onboard_real.py``."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from patchset.errors import InputError
from patchset.ledger.model import Generate, Target
from patchset.ledger.store import load_ledger
from patchset.rebase.generate import ScriptFailed, Workspace, run_generate
from tests.support.repo import tree_digest

CUDA = "CAP = (9, 10)\n" + "".join(f"x{i} = {i}\n" for i in range(30))
ANCHORED = """\
import sys
from pathlib import Path

p = Path(sys.argv[1])
text = p.read_text()
if text.count("CAP = (9, 10)") != 1:
    sys.exit("patch_cuda: anchor 'CAP = (9, 10)' not found in " + str(p))
p.write_text(text.replace("CAP = (9, 10)", "CAP = (9, 10, 12)"))
import py_compile
py_compile.compile(str(p))
"""


def _world(tmp: Path) -> tuple[Path, Path, Path]:
    base = tmp / "base"
    (base / "vllm/platforms").mkdir(parents=True)
    (base / "vllm/platforms/cuda.py").write_text(CUDA)
    (base / "vllm/other.py").write_text("y = 1\n")
    script = tmp / "mods" / "patch_cuda.py"
    script.parent.mkdir()
    script.write_text(ANCHORED)
    led = tmp / "led"
    led.mkdir()
    return base, script, led


def _import(run, led: Path, script: Path, base: Path, *extra: str, cmd: str | None = None):
    command = cmd or f"python3 {script} {{root}}/vllm/platforms/cuda.py"
    return run(
        "import", "--script", command, "--id", "cap-sm12x", "--target", "vllm", "--base-tree", base, *extra, cwd=led
    )


def test_an_edit_script_becomes_a_generated_patch(run, tmp_path: Path) -> None:
    base, script, led = _world(tmp_path)
    assert run("init", "--target", "vllm", cwd=led).code == 0
    before = tree_digest(base)
    r = _import(run, led, script, base, "--json")
    assert r.code == 0, r
    rep = json.loads(r.stdout)
    assert rep["files"] == ["vllm/platforms/cuda.py"] and rep["script"] == "patchset/scripts/cap-sm12x/patch_cuda.py"
    assert rep["ignored"], "the .pyc py_compile wrote is left out of the diff"
    assert tree_digest(base) == before  # the user's tree is never touched
    p = load_ledger(led / "patches.toml").get("cap-sm12x")
    assert p.generate is not None and p.generate.command == [
        "python3",
        "{ledger}/patchset/scripts/cap-sm12x/patch_cuda.py",
        "{root}/vllm/platforms/cuda.py",
    ]
    assert (led / p.generate.script).read_text() == ANCHORED
    body = (led / p.body_path).read_text()
    assert "-CAP = (9, 10)\n+CAP = (9, 10, 12)\n" in body and "__pycache__" not in body
    tree = tmp_path / "tree"
    shutil.copytree(base, tree)
    r = run("apply", "--tree", tree, cwd=led)
    assert r.code == 0, r
    assert (tree / "vllm/platforms/cuda.py").read_text() == CUDA.replace("(9, 10)", "(9, 10, 12)")
    # the same command again: unchanged, nothing written
    before = tree_digest(led)
    r = _import(run, led, script, base, "--json")
    assert r.code == 0 and json.loads(r.stdout)["outcome"] == "unchanged", r
    assert tree_digest(led) == before
    # validate notices a script changed since its body was made
    assert run("validate", cwd=led).code == 0
    (led / p.generate.script).write_text(ANCHORED.replace("12)", "12, 13)"))
    r = run("validate", cwd=led)
    assert r.code == 1 and "changed since its body was made" in r.stdout + r.stderr, r


@pytest.mark.parametrize(
    ("script", "said"),
    [
        ("import sys\nsys.exit('patch_cuda: anchor not found')\n", "exited with status 1"),
        ("import sys\nopen(sys.argv[2] + '/stolen.txt', 'w').write('x')\n", "outside {root}, in the ledger directory"),
        ("open('left-behind.txt', 'w').write('x')\n", "left files in its working directory"),
        ("import os, sys\nos.symlink('/etc/passwd', sys.argv[1] + '.link')\n", "symbolic link"),
        ("pass\n", "changed nothing"),
    ],
    ids=["exit-1", "touches-ledger", "writes-cwd", "symlink", "no-change"],
)
def test_a_script_that_misbehaves_is_refused_and_nothing_is_written(
    run, tmp_path: Path, script: str, said: str
) -> None:
    base, path, led = _world(tmp_path)
    path.write_text(script)
    assert run("init", "--target", "vllm", cwd=led).code == 0
    before = tree_digest(led)
    cmd = f"python3 {path} {{root}}/vllm/platforms/cuda.py {{ledger}}"
    r = _import(run, led, path, base, cmd=cmd)
    assert r.code == 2, r
    assert said in r.stderr, r.stderr
    if "exit" in said:
        assert "patch_cuda: anchor not found" in r.stderr  # the script's own message
    (led / "stolen.txt").unlink(missing_ok=True)
    assert tree_digest(led) == before


def test_a_command_without_root_is_refused(run, tmp_path: Path) -> None:
    base, script, led = _world(tmp_path)
    assert run("init", "--target", "vllm", cwd=led).code == 0
    r = _import(run, led, script, base, cmd=f"python3 {script} /usr/lib/python3/dist-packages/vllm/platforms/cuda.py")
    assert r.code == 2 and "names no {root}" in r.stderr and "--bind" in r.stderr, r


def test_a_command_that_runs_forever_is_killed(tmp_path: Path) -> None:
    base, _, led = _world(tmp_path)
    gen = Generate(command=["sh", "-c", "echo started; sleep 30", "{root}"], timeout=1)
    t0 = time.monotonic()
    ws = Workspace(lambda d: shutil.copytree(base, d), lambda k: None, Target("vllm"))
    with ws, pytest.raises(ScriptFailed, match="did not finish within 1 s") as err:
        run_generate(gen, led, ws)
    assert time.monotonic() - t0 < 10 and "started" in err.value.output


def test_bind_mounts_the_copy_where_a_script_hard_codes_its_path(run, tmp_path: Path) -> None:
    if not (shutil.which("bwrap") or shutil.which("unshare")):
        pytest.skip("needs bubblewrap or unshare")
    base, script, led = _world(tmp_path)
    site = tmp_path / "site-packages"  # stands for the image's install path the script hard-codes
    shutil.copytree(base, site)
    before = tree_digest(site)
    script.write_text(ANCHORED.replace("Path(sys.argv[1])", f"Path({str(site / 'vllm/platforms/cuda.py')!r})"))
    assert run("init", "--target", "vllm", cwd=led).code == 0
    r = _import(run, led, script, base, "--bind", str(site), cmd=f"python3 {script}")
    if r.code == 2 and "neither works here" in r.stderr:
        pytest.skip("user namespaces are not available here")
    assert r.code == 0, r
    assert tree_digest(site) == before  # the hard-coded path itself was never written
    body = (led / "patchset/series/vllm/cap-sm12x.patch").read_text()
    assert "+CAP = (9, 10, 12)" in body


def test_rebase_regenerates_carries_refreshes_or_names_the_scripts_failure(run, tmp_path: Path) -> None:
    base, script, led = _world(tmp_path)
    assert run("init", "--target", "vllm", cwd=led).code == 0
    assert _import(run, led, script, base).code == 0
    # 1. a new base that leaves the anchored file alone: the same diff, carried
    same = tmp_path / "same"
    shutil.copytree(base, same)
    (same / "vllm/other.py").write_text("y = 2\n")
    r = run("rebase", "--onto", same, "--dry-run", "--json", cwd=led)
    assert r.code == 0, r
    (p,) = json.loads(r.stdout)["patches"]
    assert (p["verdict"], p["how"], p["range_diff"]) == ("carried", "regenerated", "")
    # 2. upstream changed the file around the anchor: another diff, refreshed, with its range-diff
    moved = tmp_path / "moved"
    shutil.copytree(base, moved)
    (moved / "vllm/platforms/cuda.py").write_text("# upstream header\n\n\n\n\n" + CUDA.replace("x3 = 3", "x3 = 33"))
    r = run("rebase", "--onto", moved, "--json", cwd=led)
    assert r.code == 0, r
    (p,) = json.loads(r.stdout)["patches"]
    assert (p["verdict"], p["how"]) == ("carried", "refreshed") and "@@" in p["range_diff"], p
    led_data = load_ledger(led / "patches.toml")
    body = led_data.body_file(led_data.get("cap-sm12x")).read_text()
    assert "@@ -3,7 +3,7 @@\n \n \n \n-CAP = (9, 10)\n+CAP = (9, 10, 12)\n" in body  # taken on the new file
    assert run("validate", cwd=led).code == 0
    # 3. the anchor is gone: a conflict carrying the script's own message
    gone = tmp_path / "gone"
    shutil.copytree(moved, gone)
    (gone / "vllm/platforms/cuda.py").write_text(CUDA.replace("CAP = (9, 10)", "CAPS = {9: 10}"))
    r = run("rebase", "--onto", gone, cwd=led)
    assert r.code == 1, r
    assert "conflict" in r.stdout and "anchor 'CAP = (9, 10)' not found" in r.stdout, r.stdout


def test_run_generate_refuses_an_empty_command(tmp_path: Path) -> None:
    ws = Workspace(lambda d: d.mkdir(), lambda k: None, Target("x"))
    with ws, pytest.raises(InputError, match="empty"):
        run_generate(Generate(command=[]), tmp_path, ws)


def test_a_file_name_with_a_newline_is_refused(run, tmp_path: Path) -> None:
    base, script, led = _world(tmp_path)
    script.write_text("import sys\nopen(sys.argv[1] + '/vllm/x\\ny.py', 'w').write('x')\n")
    assert run("init", "--target", "vllm", cwd=led).code == 0
    before = tree_digest(led)
    r = _import(run, led, script, base, cmd=f"python3 {script} {{root}}")
    assert r.code == 2 and "control character" in r.stderr, r
    assert tree_digest(led) == before


FOLLOW = """\
import sys
from pathlib import Path

for name in ("cuda.py", "cuda_new.py"):  # wherever the anchor lives now
    p = Path(sys.argv[1]) / "vllm/platforms" / name
    text = p.read_text()
    if "CAP = (9, 10)" in text:
        p.write_text(text.replace("CAP = (9, 10)", "CAP = (9, 10, 12)"))
        break
else:
    sys.exit("anchor not found")
"""


def test_a_regenerated_patch_may_change_a_file_the_old_body_did_not(run, tmp_path: Path) -> None:
    """Upstream moved the anchored line to another file that both bases have: the script follows
    it, and the refreshed body changes that file as the new base has it (not as a new file)."""
    base, script, led = _world(tmp_path)
    (base / "vllm/platforms/cuda_new.py").write_text("# new home\n" + "".join(f"n{i} = {i}\n" for i in range(10)))
    script.write_text(FOLLOW)
    assert run("init", "--target", "vllm", cwd=led).code == 0
    assert _import(run, led, script, base, cmd=f"python3 {script} {{root}}").code == 0
    new = tmp_path / "new"
    shutil.copytree(base, new)
    (new / "vllm/platforms/cuda.py").write_text(CUDA.replace("CAP = (9, 10)\n", ""))
    (new / "vllm/platforms/cuda_new.py").write_text(
        (base / "vllm/platforms/cuda_new.py").read_text() + "CAP = (9, 10)\n"
    )
    r = run("rebase", "--onto", new, "--json", cwd=led)
    assert r.code == 0, r
    (p,) = json.loads(r.stdout)["patches"]
    assert (p["verdict"], p["how"]) == ("carried", "refreshed"), p
    tree = tmp_path / "tree"
    shutil.copytree(new, tree)
    r = run("apply", "--tree", tree, cwd=led)
    assert r.code == 0, r
    assert (tree / "vllm/platforms/cuda_new.py").read_text().endswith("# new home\n"[:0] + "CAP = (9, 10, 12)\n")
    assert (tree / "vllm/platforms/cuda_new.py").read_text().startswith("# new home\n")


GEN_LEDGER = """\
schema = 1

[targets.vllm]
upstream = "https://example.invalid/vllm.git"

[[patch]]
id = "cap"
target = "vllm"
title = "t"
origin = "ours"

[patch.generate]
command = {command}
"""


@pytest.mark.parametrize(
    ("command", "said"),
    [
        ('["python3", "{ledger}/s.py", "{tree}/vllm/x.py"]', "unknown placeholder {tree}"),  # an engine's
        ('["python3", "{ledger}/s.py", "{ROOT}/vllm/x.py"]', "unknown placeholder {ROOT}"),
        ('["python3", "{ledger}/s.py", "--file={base}/x.py"]', "unknown placeholder {base}"),
        ('["sh", "{ledger}/../../elsewhere/s.sh", "{root}"]', "climbs out of the ledger directory"),
    ],
)
def test_generate_placeholders_are_checked_when_the_ledger_loads(run, tmp_path: Path, command: str, said: str) -> None:
    """Before: the ledger loaded and validated (exit 0); the script got the literal ``{tree}`` on
    rebase, or ran from outside the ledger."""
    from patchset.errors import LedgerError

    (tmp_path / "patches.toml").write_text(GEN_LEDGER.replace("{command}", command, 1))
    with pytest.raises(LedgerError) as exc:
        load_ledger(tmp_path / "patches.toml")
    rendered = exc.value.render()
    assert "patches.toml:13" in rendered and said in rendered and "generate.command" in rendered, rendered
    r = run("validate", cwd=tmp_path)
    assert r.code == 2 and said in r.stderr and "Traceback" not in r.stderr, r


def test_import_script_refuses_an_unknown_placeholder_before_it_runs(run, tmp_path: Path) -> None:
    base, script, led = _world(tmp_path)
    assert run("init", "--target", "vllm", cwd=led).code == 0
    before = tree_digest(led)
    r = _import(run, led, script, base, cmd=f"python3 {script} {{root}}/vllm/platforms/cuda.py {{tree}}")
    assert r.code == 2 and "unknown placeholder {tree}" in r.stderr and "nothing was run" in r.stderr, r
    assert tree_digest(led) == before


def test_generate_braces_that_are_the_scripts_own_pass(tmp_path: Path) -> None:
    command = '["python3", "-c", "import sys; d = {}; print(f\'{0}\'.format(1))", "{root}/x.py", "{ledger}/s.py"]'
    (tmp_path / "patches.toml").write_text(GEN_LEDGER.replace("{command}", command, 1))
    gen = load_ledger(tmp_path / "patches.toml").get("cap").generate
    assert gen is not None and gen.command[3] == "{root}/x.py"

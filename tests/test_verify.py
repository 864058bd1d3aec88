"""``patchset verify`` on small real trees: real patches, real shell commands, real hard links.

Each test builds a tiny pristine project, a ledger whose patches fix, duplicate or break it, and
test commands (python scripts kept beside the ledger), then checks the class verify gives every
patch, the JSON / JUnit output, the time box, the parallel runs and that the pristine tree is never
touched. The vLLM proof of the same machinery is tests/test_verify_vllm.py.
"""

from __future__ import annotations

import difflib
import json
import os
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from patchset.errors import ApplyFailed, InputError
from patchset.text import split_list
from patchset.verify import overlay, testrun, vllm_env
from patchset.verify.outcomes import BROKEN, ERROR, NOT_NEEDED, PROVEN, classify
from patchset.verify.pertest import VerifyRun, run_verify
from patchset.verify.pertest_view import render_verify

CALC = """\
def add(a, b):
    return a - b


def mul(a, b):
    return a * b


def neg(a):
    return -a
"""


def make_diff(path: str, old: str, new: str) -> str:
    lines = difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}")
    return f"diff --git a/{path} b/{path}\n" + "".join(lines)


def write_ledger(root: Path, patches: list[dict]) -> Path:
    """A ledger with target 'demo' and the given patches: {id, diff, tests: [toml snippets]}."""
    series = root / "patchset" / "series" / "demo"
    series.mkdir(parents=True, exist_ok=True)
    text = (
        'schema = 1\n\n[targets.demo]\nupstream = "https://example.invalid/demo.git"\n'
        'github = "example/demo"\nstrip = 1\n'
    )
    for p in patches:
        (series / f"{p['id']}.patch").write_text(p["diff"])
        text += f'\n[[patch]]\nid = "{p["id"]}"\ntarget = "demo"\ntitle = "{p["id"]}"\norigin = "ours"\n'
        if p.get("switches"):
            text += f"[patch.switches]\nenv = {p['switches']}\n"
        for t in p.get("tests", []):
            text += "\n[[patch.tests]]\n" + textwrap.dedent(t).strip() + "\n"
    (root / "patches.toml").write_text(text)
    return root / "patches.toml"


def check_script(root: Path, name: str, body: str) -> str:
    """A python test script beside the ledger; the command that runs it in the build tree."""
    root.mkdir(parents=True, exist_ok=True)
    (root / name).write_text("import sys\nsys.path.insert(0, '.')\n" + textwrap.dedent(body))
    return f'"{sys.executable}" "$PATCHSET_LEDGER_DIR/{name}"'


@pytest.fixture
def project(tmp_path: Path) -> Path:
    tree = tmp_path / "pristine"
    tree.mkdir()
    (tree / "calc.py").write_text(CALC)
    (tree / "README").write_text("a pristine tree\n")
    (tree / "docs").mkdir()
    (tree / "docs" / "notes.txt").write_text("notes\n")
    return tree


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("PATCHSET_CACHE", str(cache))
    return cache


def three_class_ledger(root: Path) -> Path:
    fixed = CALC.replace("return a - b", "return a + b")
    commented = fixed.replace("    return a * b", "    # a product\n    return a * b")
    broken = commented.replace("return -a", "return a")
    return write_ledger(
        root,
        [
            {
                "id": "01-fix-add",
                "diff": make_diff("calc.py", CALC, fixed),
                "tests": [
                    f"""
            name = "add"
            command = '{check_script(root, "t_add.py", "import calc; assert calc.add(2, 3) == 5, calc.add(2, 3)")}'
            tags = ["cpu"]
            timeout = 60
            """
                ],
            },
            {
                "id": "02-comment-mul",
                "diff": make_diff("calc.py", fixed, commented),
                "tests": [
                    f"""
            name = "mul"
            command = '{check_script(root, "t_mul.py", "import calc; assert calc.mul(2, 3) == 6")}'
            tags = ["cpu"]
            """
                ],
            },
            {
                "id": "03-break-neg",
                "diff": make_diff("calc.py", commented, broken),
                "tests": [
                    f"""
            name = "neg"
            command = '{check_script(root, "t_neg.py", "import calc; assert calc.neg(1) == -1")}'
            tags = ["cpu", "gpu"]
            """
                ],
            },
        ],
    )


# --------------------------------------------------------------------------- the three classes


def test_proven_not_needed_broken(tmp_path: Path, project: Path, digest) -> None:
    ledger = three_class_ledger(tmp_path / "ledger")
    before = digest(project)
    junit = tmp_path / "out" / "verify.xml"
    rep = run_verify(VerifyRun(ledger, project, tags=["cpu"], jobs=2, junit=junit))
    classes = {p.patch_id: p.klass for p in rep.patches}
    assert classes == {"01-fix-add": PROVEN, "02-comment-mul": NOT_NEEDED, "03-break-neg": BROKEN}
    runs = {
        (t.patch_id, v): r.outcome for t in rep.tests for v, r in (("with", t.with_run), ("without", t.without_run))
    }
    assert runs == {
        ("01-fix-add", "with"): "pass",
        ("01-fix-add", "without"): "fail",
        ("02-comment-mul", "with"): "pass",
        ("02-comment-mul", "without"): "pass",
        ("03-break-neg", "with"): "fail",
        ("03-break-neg", "without"): "pass",
    }
    assert "AssertionError" in rep.patches[0].tests[0].without_run.output
    assert not rep.ok and rep.exit_code == 1
    assert digest(project) == before, "verify must never touch the tree it was given"
    # JSON: the whole report is serialisable and says the same
    data = json.loads(json.dumps(rep.to_json()))
    assert data["counts"] == {PROVEN: 1, NOT_NEEDED: 1, BROKEN: 1, ERROR: 0}
    assert [p["class"] for p in data["patches"]] == [PROVEN, NOT_NEEDED, BROKEN]
    assert data["patches"][2]["tests"][0]["with"]["exit_code"] == 1
    # JUnit: proven passes, not needed and broken are failures
    root = ET.parse(junit).getroot()
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("3", "2", "0")
    cases = {c.get("classname"): c for c in root.iter("testcase")}
    assert cases["01-fix-add"].find("failure") is None
    assert cases["02-comment-mul"].find("failure").get("type") == NOT_NEEDED
    assert cases["03-break-neg"].find("failure").get("type") == BROKEN
    assert "AssertionError" in cases["01-fix-add"].find("system-out").text


def test_all_proven_is_ok_and_the_view_renders(tmp_path: Path, project: Path) -> None:
    import io

    from patchset.commands.table import Term

    ledger = three_class_ledger(tmp_path / "ledger")
    rep = run_verify(VerifyRun(ledger, project, tags=["cpu"], jobs=1))
    rep.patches = [p for p in rep.patches if p.klass == PROVEN]
    assert rep.ok and rep.exit_code == 0
    buf = io.StringIO()
    render_verify(Term(buf, tty=True, width=120, color=False), run_verify(VerifyRun(ledger, project, jobs=1)))
    text = buf.getvalue()
    for word in ("01-fix-add", "proven", "not needed", "broken", "seconds", "without"):
        assert word in text


def test_tags_select_tests_and_unknown_tags_are_bad_input(tmp_path: Path, project: Path) -> None:
    ledger = three_class_ledger(tmp_path / "ledger")
    rep = run_verify(VerifyRun(ledger, project, tags=["gpu"]))
    assert [p.patch_id for p in rep.patches] == ["03-break-neg"]
    assert rep.untested == ["01-fix-add", "02-comment-mul"]
    with pytest.raises(InputError, match="no test carries the tags tpu") as exc:
        run_verify(VerifyRun(ledger, project, tags=["tpu"]))
    assert "cpu, gpu" in (exc.value.hint or "")
    assert split_list(["cpu,gpu", " cpu", ""]) == ["cpu", "gpu"]


# --------------------------------------------------------------------------- errors


def test_error_missing_tool_timeout_and_dependent_patch(tmp_path: Path, project: Path) -> None:
    root = tmp_path / "ledger"
    step1 = CALC + "\n\ndef sq(a):\n    return a * a\n"
    step2 = step1.replace("return a * a", "return a ** 2")  # needs 01's new lines
    ledger = write_ledger(
        root,
        [
            {
                "id": "01-add-sq",
                "diff": make_diff("calc.py", CALC, step1),
                "tests": [
                    f"""name = "sq"
            command = '{check_script(root, "t_sq.py", "import calc; assert calc.sq(3) == 9")}'""",
                    """name = "tool"
            command = "no-such-tool-for-patchset --version"
            """,
                    """name = "slow"
            command = "sleep 30"
            timeout = 1
            """,
                ],
            },
            {"id": "02-sq-pow", "diff": make_diff("calc.py", step1, step2)},
        ],
    )
    t0 = time.monotonic()
    rep = run_verify(VerifyRun(ledger, project, jobs=2))
    assert time.monotonic() - t0 < 20, "the 1 s time box did not hold"
    tests = {t.name: t for t in rep.tests}
    assert rep.patches[0].klass == ERROR and rep.exit_code == 2
    assert rep.untested == ["02-sq-pow"]
    for t in tests.values():
        assert t.klass == ERROR
        assert "the series without 01-add-sq does not apply: patch 02-sq-pow does not apply" in t.without_run.reason
    assert tests["sq"].with_run.outcome == "pass"
    assert tests["tool"].with_run.exit_code == 127 and "command not found" in tests["tool"].with_run.reason
    assert tests["slow"].with_run.reason == "timed out after 1 s"


def test_timeout_override_and_bad_arguments(tmp_path: Path, project: Path) -> None:
    root = tmp_path / "ledger"
    fixed = CALC.replace("return a - b", "return a + b")
    ledger = write_ledger(
        root,
        [
            {
                "id": "01-fix-add",
                "diff": make_diff("calc.py", CALC, fixed),
                "tests": ['command = "sleep 20"\ntimeout = 600'],
            }
        ],
    )
    rep = run_verify(VerifyRun(ledger, project, timeout=1))
    assert rep.tests[0].timeout == 1
    assert rep.tests[0].with_run.reason == rep.tests[0].without_run.reason == "timed out after 1 s"
    with pytest.raises(InputError, match="--jobs 0"):
        run_verify(VerifyRun(ledger, project, jobs=0))
    with pytest.raises(InputError, match="either --tree or --from-index"):
        run_verify(VerifyRun(ledger, project, from_index="demo==1.0"))
    with pytest.raises(InputError, match="not a directory"):
        run_verify(VerifyRun(ledger, tmp_path / "nope"))


def test_bad_test_specs_name_file_line_and_patch(tmp_path: Path, project: Path) -> None:
    root = tmp_path / "ledger"
    fixed = CALC.replace("return a - b", "return a + b")
    ledger = write_ledger(
        root,
        [
            {
                "id": "01-fix-add",
                "diff": make_diff("calc.py", CALC, fixed),
                "tests": ['name = "up"\ncommand = "true"\ncwd = "../.."'],
            }
        ],
    )
    with pytest.raises(InputError, match=r"patches.toml:\d+: .*cwd: path '../..' is outside the build tree"):
        run_verify(VerifyRun(ledger, project))
    ledger = write_ledger(
        root,
        [
            {
                "id": "01-fix-add",
                "diff": make_diff("calc.py", CALC, fixed),
                "tests": ['name = "never"\ncommand = "true"\ntimeout = 0'],
            }
        ],
    )
    with pytest.raises(InputError, match=r"patches.toml:\d+: patch 01-fix-add: tests never: test timeout 0"):
        run_verify(VerifyRun(ledger, project))


def test_missing_cwd_is_an_error_and_cwd_is_used(tmp_path: Path, project: Path) -> None:
    root = tmp_path / "ledger"
    fixed = CALC.replace("return a - b", "return a + b")
    ledger = write_ledger(
        root,
        [
            {
                "id": "01-fix-add",
                "diff": make_diff("calc.py", CALC, fixed),
                "tests": [
                    'name = "in-docs"\ncommand = "test -f notes.txt && ! test -f calc.py"\ncwd = "docs"',
                    'name = "nowhere"\ncommand = "true"\ncwd = "no/such/dir"',
                ],
            }
        ],
    )
    rep = run_verify(VerifyRun(ledger, project))
    t = {t.name: t for t in rep.tests}
    assert t["in-docs"].with_run.outcome == "pass" and t["in-docs"].klass == NOT_NEEDED
    assert t["nowhere"].klass == ERROR and "does not exist in the build tree" in t["nowhere"].with_run.reason


def test_series_that_does_not_apply_and_tree_that_carries_it(tmp_path: Path, project: Path) -> None:
    root = tmp_path / "ledger"
    fixed = CALC.replace("return a - b", "return a + b")
    ledger = write_ledger(
        root, [{"id": "01-fix-add", "diff": make_diff("calc.py", CALC, fixed), "tests": ['command = "true"']}]
    )
    other = tmp_path / "other"
    other.mkdir()
    (other / "calc.py").write_text("something else\n")
    with pytest.raises(ApplyFailed, match="patch 01-fix-add does not apply"):
        run_verify(VerifyRun(ledger, other))
    (other / "calc.py").write_text(fixed)
    with pytest.raises(InputError, match="already carries patches of the series"):
        run_verify(VerifyRun(ledger, other))


def test_test_that_writes_through_a_hard_link_is_caught(tmp_path: Path, project: Path, digest) -> None:
    root = tmp_path / "ledger"
    fixed = CALC.replace("return a - b", "return a + b")
    ledger = write_ledger(
        root,
        [
            {
                "id": "01-fix-add",
                "diff": make_diff("calc.py", CALC, fixed),
                "tests": ['name = "scribbler"\ncommand = "echo scribble >> README"'],
            }
        ],
    )
    before = digest(project)
    rep = run_verify(VerifyRun(ledger, project))
    t = rep.tests[0]
    assert t.klass == ERROR
    assert "rewrote" in t.with_run.reason and "README" in t.with_run.reason
    assert any("README" in n for n in rep.notes)
    assert digest(project) == before, "the user's tree is protected by the private copy"


# --------------------------------------------------------------------------- environment, parallel runs


def test_environment_of_a_run(tmp_path: Path, project: Path) -> None:
    root = tmp_path / "ledger"
    fixed = CALC.replace("return a - b", "return a + b")
    script = check_script(
        root,
        "t_env.py",
        """
        import json, os
        keys = ["PATCHSET_TREE", "PATCHSET_VARIANT", "PATCHSET_PATCH", "PATCHSET_LEDGER_DIR", "PATCHSET_PYTHON",
                "PATCHSET_HOME", "MY_PATH", "OMP_NUM_THREADS"]
        out = os.path.join(os.environ["PATCHSET_LEDGER_DIR"], "env-" + os.environ["PATCHSET_VARIANT"] + ".json")
        json.dump({k: os.environ.get(k) for k in keys} | {"cwd": os.getcwd()}, open(out, "w"))
        """,
    )
    ledger = write_ledger(
        root,
        [
            {
                "id": "01-fix-add",
                "diff": make_diff("calc.py", CALC, fixed),
                "tests": [f"""command = '{script}'\nenv = {{ MY_PATH = "$PATCHSET_TREE/lib" }}"""],
            }
        ],
    )
    run_verify(VerifyRun(ledger, project, jobs=2))
    for variant in ("with", "without"):
        env = json.loads((root / f"env-{variant}.json").read_text())
        assert env["PATCHSET_VARIANT"] == variant
        assert env["PATCHSET_PATCH"] == "01-fix-add"
        assert env["PATCHSET_LEDGER_DIR"] == str(root.resolve())
        assert env["PATCHSET_PYTHON"] == sys.executable
        assert Path(env["PATCHSET_HOME"], "verify", "runner.py").is_file()
        assert env["MY_PATH"] == env["PATCHSET_TREE"] + "/lib"
        assert os.path.realpath(env["cwd"]) == os.path.realpath(env["PATCHSET_TREE"])
        assert env["OMP_NUM_THREADS"] == os.environ.get("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // 2)))
    with_tree = json.loads((root / "env-with.json").read_text())["PATCHSET_TREE"]
    without_tree = json.loads((root / "env-without.json").read_text())["PATCHSET_TREE"]
    assert with_tree != without_tree
    assert not Path(with_tree).exists(), "work trees are removed after the run"


def test_runs_go_in_parallel_with_jobs(tmp_path: Path, project: Path) -> None:
    root = tmp_path / "ledger"
    fixed = CALC.replace("return a - b", "return a + b")
    stamp = check_script(
        root,
        "t_stamp.py",
        """
        import os, time
        log = os.path.join(os.environ["PATCHSET_LEDGER_DIR"], "stamps.log")
        start = time.time(); time.sleep(0.4); end = time.time()
        with open(log, "a") as f:
            f.write(f"{start} {end}\\n")
        """,
    )
    ledger = write_ledger(
        root,
        [
            {
                "id": "01-fix-add",
                "diff": make_diff("calc.py", CALC, fixed),
                "tests": [f"name = 'a'\ncommand = '{stamp}'", f"name = 'b'\ncommand = '{stamp}'"],
            }
        ],
    )
    run_verify(VerifyRun(ledger, project, jobs=2))
    spans = sorted(tuple(map(float, ln.split())) for ln in (root / "stamps.log").read_text().splitlines())
    assert len(spans) == 4
    assert any(spans[i + 1][0] < spans[i][1] for i in range(3)), f"no two runs overlapped: {spans}"
    (root / "stamps.log").unlink()
    run_verify(VerifyRun(ledger, project, jobs=1))
    spans = sorted(tuple(map(float, ln.split())) for ln in (root / "stamps.log").read_text().splitlines())
    assert all(spans[i + 1][0] >= spans[i][1] for i in range(3)), "jobs=1 must run one at a time"


def test_keep_trees_keeps_logs_and_trees(tmp_path: Path, project: Path) -> None:
    ledger = three_class_ledger(tmp_path / "ledger")
    rep = run_verify(VerifyRun(ledger, project, tags=["gpu"], keep_trees=True))
    work = Path(rep.work_dir)
    logs = sorted((work / "logs").iterdir())
    assert len(logs) == 2 and all("03-break-neg" in p.name for p in logs)
    with_tree = next(p for p in (work / "trees").iterdir() if p.name.endswith("-with"))
    assert "return a\n" in (with_tree / "calc.py").read_text()
    assert rep.tests[0].with_run.log in {str(p) for p in logs}


def test_switches_env_note_for_a_not_needed_patch(tmp_path: Path, project: Path) -> None:
    root = tmp_path / "ledger"
    fixed = CALC.replace("return a * b", "return a * b  # honours CALC_FAST")
    ledger = write_ledger(
        root,
        [
            {
                "id": "01-fast",
                "diff": make_diff("calc.py", CALC, fixed),
                "switches": '{ CALC_FAST = "1 enables it" }',
                "tests": ['command = "true"'],
            }
        ],
    )
    rep = run_verify(VerifyRun(ledger, project))
    assert rep.patches[0].klass == NOT_NEEDED
    assert "acts only with CALC_FAST set" in rep.patches[0].note


def test_stale_work_directories_are_swept(tmp_path: Path) -> None:
    from patchset.verify.base_tree import sweep_stale

    old, new = tmp_path / "run-old", tmp_path / "run-new"
    for d in (old, new):
        (d / "trees").mkdir(parents=True)
    os.utime(old, (time.time() - 2 * 86400, time.time() - 2 * 86400))
    assert sweep_stale(tmp_path) == [old]
    assert not old.exists() and new.is_dir()


def test_classify_table() -> None:
    r = lambda o: testrun.CommandResult(o, 0, 0.1, f"why-{o}")  # noqa: E731
    assert classify(r("pass"), r("fail"))[0] == PROVEN
    assert classify(r("pass"), r("pass"))[0] == NOT_NEEDED
    assert classify(r("fail"), r("pass")) == (
        BROKEN,
        "fails with the patch (why-fail); passes without it: this patch breaks the test",
    )
    assert "predates" in classify(r("fail"), r("fail"))[1]
    assert classify(r("fail"), r("error"))[0] == BROKEN
    assert classify(r("error"), r("pass"))[0] == ERROR
    assert classify(r("pass"), r("error")) == (ERROR, "without the patch: why-error")


# --------------------------------------------------------------------------- building blocks


def test_overlay_links_untouched_files_and_apply_breaks_only_patched_links(tmp_path: Path, project: Path) -> None:
    from patchset.engine.results import SeriesItem
    from patchset.engine.tree import apply_series

    snap = overlay.Snapshot.take(project)
    dest = tmp_path / "ov"
    stats = overlay.make_overlay(project, dest)
    assert stats.linked == 3 and stats.copied == 0
    assert os.stat(dest / "README").st_ino == os.stat(project / "README").st_ino
    fixed = CALC.replace("return a - b", "return a + b")
    res = apply_series(dest, [SeriesItem("p", make_diff("calc.py", CALC, fixed).encode())])
    assert res.ok
    assert (dest / "calc.py").read_text() == fixed and (project / "calc.py").read_text() == CALC
    assert os.stat(dest / "calc.py").st_ino != os.stat(project / "calc.py").st_ino
    assert snap.changed() == []
    with open(dest / "docs" / "notes.txt", "a") as fh:  # the hazard the snapshot exists for
        fh.write("oops\n")
    assert snap.changed() == ["docs/notes.txt"]


def test_private_copy_skips_git_and_is_independent(tmp_path: Path, project: Path) -> None:
    (project / ".git").mkdir()
    (project / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    os.symlink("calc.py", project / "link.py")
    dest = tmp_path / "copy"
    overlay.private_copy(project, dest)
    assert not (dest / ".git").exists()
    assert os.readlink(dest / "link.py") == "calc.py"
    assert os.stat(dest / "README").st_ino != os.stat(project / "README").st_ino


def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    res = testrun.run_command(
        f"sleep 60 & echo $! > {pidfile}; wait", tmp_path, dict(os.environ), 1.0, tmp_path / "log.txt"
    )
    assert res.outcome == "error" and res.exit_code is None and res.seconds < 10
    pid = int(pidfile.read_text())
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"grandchild {pid} survived the timeout")
    assert "killed after the 1 s timeout" in (tmp_path / "log.txt").read_text()


def test_exit_status_convention(tmp_path: Path) -> None:
    env = dict(os.environ)
    run = lambda cmd: testrun.run_command(cmd, tmp_path, env, 30, tmp_path / "log")  # noqa: E731
    assert run("exit 0").outcome == "pass"
    assert (run("echo boom; exit 3").outcome, run("echo boom; exit 3").reason) == ("fail", "exit 3: boom")
    assert run("kill -SEGV $$").outcome == "fail"
    for code in (77, 99, 126, 127):
        assert run(f"exit {code}").outcome == "error"
    pytest_like = run("echo 'FAILED tests/test_a.py::test_x - assert 1 == 2'; echo '1 failed in 0.1s'; exit 1")
    assert pytest_like.reason == "exit 1: failed tests/test_a.py::test_x; 1 failed in 0.1s"
    long = run("for i in $(seq 3000); do echo line-$i; done; exit 1")
    assert long.output.endswith("line-3000\n") and "line-1\n" not in long.output and len(long.output) < 4100


# --------------------------------------------------------------------------- the vLLM environment (no venv needed)


def test_vllm_env_maps_pytest_exit_codes() -> None:
    assert [vllm_env._map_pytest(c) for c in (0, 1, 2, 3, 4, 5)] == [0, 1, 1, 99, 99, 99]


def test_vllm_env_add_file_never_writes_through_a_hard_link(tmp_path: Path) -> None:
    base, tree = tmp_path / "base", tmp_path / "tree"
    (base / "tests").mkdir(parents=True)
    (base / "tests" / "test_x.py").write_text("pristine\n")
    overlay.make_overlay(base, tree)
    src = tmp_path / "test_x.py"
    src.write_text("ours\n")
    vllm_env.add_file(src, tree, "tests/")
    assert (tree / "tests" / "test_x.py").read_text() == "ours\n"
    assert (base / "tests" / "test_x.py").read_text() == "pristine\n"
    with pytest.raises(Exception, match="leaves the tree"):
        vllm_env.add_file(src, tree, "../elsewhere/")


def test_vllm_env_without_venv_says_it_cannot_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("PATCHSET_VLLM_TESTS_VENV", str(tmp_path / "no-venv"))
    assert vllm_env.main(["--tree", str(tmp_path), "--", "-q"]) == 77
    assert "not set up" in capsys.readouterr().out


def test_vllm_env_test_env_and_model_redirects(tmp_path: Path) -> None:
    env = vllm_env.test_env(tmp_path, {"PATH": "/usr/bin", "PYTHONHOME": "/x"})
    assert env["PYTHONPATH"] == str(tmp_path) and "PYTHONHOME" not in env
    assert env["VLLM_TARGET_DEVICE"] == "cpu" and env["HF_HUB_OFFLINE"] == "1"
    mapping = json.loads(Path(env["VLLM_MODEL_REDIRECT_PATH"]).read_text())
    assert set(mapping) == set(vllm_env.MODEL_CONFIGS)
    for name, d in mapping.items():
        config = json.loads((Path(d) / "config.json").read_text())
        assert config == vllm_env.MODEL_CONFIGS[name]
        assert config["architectures"] and config["num_hidden_layers"] > 0


def test_a_patch_of_the_same_size_never_runs_the_bases_bytecode(tmp_path: Path, monkeypatch) -> None:
    """The base is byte-compiled once and its .pyc files are hard-linked into every tree; Python trusts
    a .pyc whose recorded source size and mtime (whole seconds) match. A patch that keeps the file's
    size and ends up with the base file's mtime second must still run the patched code."""
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    tree = tmp_path / "pristine"
    tree.mkdir()
    (tree / "knob.py").write_text("DELAY = 0.001\n")
    stamp = 1_700_000_000
    os.utime(tree / "knob.py", (stamp, stamp))
    # the test gives the patched file the base file's mtime (as a patch applied within the same
    # second as the base's copy would have), then imports it
    script = check_script(
        tmp_path / "led",
        "check_knob.py",
        f"""
        import os
        os.utime("knob.py", ({stamp}, {stamp}))
        import knob
        sys.exit(0 if knob.DELAY == 0.004 else 1)
        """,
    )
    led = write_ledger(
        tmp_path / "led",
        [
            {
                "id": "k1",
                "diff": make_diff("knob.py", "DELAY = 0.001\n", "DELAY = 0.004\n"),
                "tests": [f"command = '{script}'"],
            }
        ],
    )
    report = run_verify(VerifyRun(led, tree=tree))
    (po,) = report.patches
    assert po.tests[0].with_run.outcome == "pass", po.tests[0].with_run.output
    assert po.klass == PROVEN


def test_drop_stale_bytecode_unlinks_only_the_overlays_links(tmp_path: Path) -> None:
    import compileall

    base = tmp_path / "base"
    base.mkdir()
    (base / "m.py").write_text("X = 1\n")
    (base / "n.py").write_text("Y = 1\n")
    compileall.compile_dir(str(base), quiet=2)
    tree = tmp_path / "tree"
    overlay.make_overlay(base, tree)
    removed = overlay.drop_stale_bytecode(tree, {"m.py": "digest", "README": None})
    assert [p.name.split(".")[0] for p in removed] == ["m"]
    assert list((base / "__pycache__").glob("m.*.pyc"))  # the base keeps its own
    assert list((tree / "__pycache__").glob("n.*.pyc")) and not list((tree / "__pycache__").glob("m.*.pyc"))

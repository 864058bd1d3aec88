"""Every command's human output at 60, 80, 120 and 200 columns and piped: each id and PR reference
appears whole on one line, no column is squeezed away, lines fit the width (except a line holding a
single unbreakable token), and piped output is plain tab-separated text without box drawing or
colour.

The material is the real production ledger (``patches.toml`` at the repository root: real ids
and PR references, bodies not imported), a small ledger applied to a real directory (for
``apply``), a real git upstream with one commit per kind of drift (for ``rebase``, the demo of
``tests.support.rebase_demo``), the completions double on 127.0.0.1 (for ``check longctx``), and report objects for ``verify`` and the gate (their runners need
vLLM's test environment or an upstream history, which other tests cover).
"""

from __future__ import annotations

import difflib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from patchset.ci.report import GateReport
from patchset.ci.report import render as render_gate
from patchset.commands.table import Col, Term
from patchset.ledger.store import load_ledger
from patchset.verify.outcomes import BROKEN, NOT_NEEDED, PROVEN, PatchOutcome, VerifyReport
from patchset.verify.outcomes import TestOutcome as Outcome
from patchset.verify.pertest_view import render_verify
from patchset.verify.testrun import CommandResult
from tests.support.build_repo import example_build_repo
from tests.support.completions_double import serving
from tests.support.rebase_demo import ALL, EXPECTED, build_upstream
from tests.support.rebase_demo import build as build_rebase_demo
from tests.support.repo import REPO_ROOT
from tests.support.text import joined
from tests.support.wheel_demo import make_demo as make_wheel_demo

WIDTHS = (60, 80, 120, 200)
MODES = [*(str(w) for w in WIDTHS), "piped"]
BOX = re.compile(r"[│┃━─┏┓┗┛┡┩╇┳┻╋]")


@pytest.fixture
def prod(tmp_path: Path) -> Path:
    """A copy of the production ledger (no bodies: a fresh clone's state)."""
    d = tmp_path / "prod"
    d.mkdir()
    for name in ("patches.toml", "patches.lock"):
        if (REPO_ROOT / name).exists():
            shutil.copy(REPO_ROOT / name, d / name)
    return d


def prod_tokens() -> tuple[list[str], list[str]]:
    led = load_ledger(REPO_ROOT / "patches.toml")
    ids = [p.id for p in led.patches]
    prs = [ref for p in led.patches for ref in p.upstream.prs]
    assert len(ids) > 20 and len(prs) > 5
    return ids, prs


def check(text: str, mode: str, tokens: list[str], header: list[str] | None = None) -> None:
    """The invariants every rendering keeps."""
    lines = text.splitlines()
    assert lines, "no output"
    read = joined(text).splitlines()  # (a path wraps at "/")
    for tok in tokens:
        assert any(tok in ln for ln in read), f"{tok!r} is not whole on one line at {mode}:\n{text}"
    assert not BOX.search(text), f"box drawing at {mode}"
    assert "\x1b" not in text, f"escape codes at {mode}"
    if mode == "piped":
        if header:
            head = next(i for i, ln in enumerate(lines) if ln.split("\t") == header)
            n = len(header)
            rows = [ln for ln in lines[head + 1 :] if "\t" in ln]
            assert rows and all(len(r.split("\t")) == n for r in rows), f"ragged tab-separated rows:\n{text}"
        return
    width = int(mode)
    for ln in lines:
        assert len(ln) <= width or len(ln.split()) <= 2, f"line longer than {width} columns:\n{ln}"
    if header:
        head = [ln for ln in lines if all(h in ln.split("  ") or h in ln.split() for h in header[:2])]
        assert head, f"no header naming {header[:2]} at {mode}:\n{text}"


def env_for(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    if mode == "piped":
        monkeypatch.setenv("PATCHSET_TTY", "0")
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("PATCHSET_TTY", "1")
        monkeypatch.setenv("COLUMNS", mode)


@pytest.mark.parametrize("mode", MODES)
def test_list(run, prod: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    env_for(monkeypatch, mode)
    r = run("list", *(["--header"] if mode == "piped" else []), cwd=prod)
    assert r.code == 0, r
    if mode == "piped":  # without --header: the same rows, no header line
        assert run("list", cwd=prod).stdout.splitlines() == r.stdout.splitlines()[1:]
    ids, prs = prod_tokens()
    check(r.stdout, mode, ids + prs, header=["#", "id", "target", "origin", "PR", "PR state", "state", "body", "files"])
    # a patch without a PR says so instead of "unknown"
    line = next(ln for ln in r.stdout.splitlines() if "01-pdl-sm12x" in ln)
    block = r.stdout.split(line, 1)[1].split("\n 3 ", 1)[0] if mode != "piped" else line
    assert "unknown" not in (line + block).split("01-pdl-sm12x", 1)[1].split("02-")[0]
    if mode == "piped":  # cut -f2 gives the ids, in series order
        col2 = [ln.split("\t")[1] for ln in r.stdout.splitlines()[1:]]
        assert col2 == [p.id for p in load_ledger(prod / "patches.toml").patches]
        assert "\tno PR\t" in line


@pytest.mark.parametrize("mode", MODES)
def test_validate_and_show(run, prod: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    env_for(monkeypatch, mode)
    r = run("validate", cwd=prod)
    assert r.code == 0, r
    # every patch that declares tests is named in the "tests declared" line (from the ledger, not the output)
    tested = [p.id for p in load_ledger(prod / "patches.toml").patches if p.tests]
    assert len(tested) >= 5
    check(r.stdout, mode, ["vllm", "flashinfer", "nccl", *tested])
    for pid in ("u57632-dflash-context-kv-in-draft-cudagraph", "01-pdl-sm12x"):
        r = run("show", pid, cwd=prod)
        assert r.code == 0, r
        led = load_ledger(prod / "patches.toml")
        check(r.stdout, mode, [pid, *led.get(pid).upstream.prs, *led.get(pid).files])


@pytest.mark.parametrize("mode", MODES)
def test_status_and_fetch(run, prod: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    env_for(monkeypatch, mode)
    ids, prs = prod_tokens()
    r = run("status", "--offline", cwd=prod)
    assert r.code == 0, r
    header = ["#", "patch", "origin", "upstream", "drift", "action", "follow-ups", "files", "age", "detail", "data"]
    check(r.stdout, mode, ids + prs, header=header)
    r = run("fetch", "--offline", "--all", cwd=prod)
    led = load_ledger(prod / "patches.toml")
    sources = [p.source.ref for p in led.patches if p.source.ref]
    check(r.stdout, mode, [p.id for p in led.patches if p.source.ref] + sources)
    if mode in ("60", "80"):  # one row is at most three lines, not eight
        rows = [ln for ln in r.stdout.splitlines()[1:] if not ln.startswith(" ")]
        assert len(joined(r.stdout).splitlines()) <= 3 * len(rows) + 1  # (read joined at "/")


def _diff(rel: str, old: str, new: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{rel}", f"b/{rel}"))


LONG_IDS = ["u58834-glm5next-non-mhc-sp-decoder-layout-with-a-long-tail", "p4-glm5next-fp8-attn-helper-nvfp4-scales"]
DEEP = "vllm/model_executor/layers/quantization/compressed_tensors/schemes/compressed_tensors_w8a16_fp8.py"


@pytest.fixture
def applied_ledger(tmp_path: Path, run) -> tuple[Path, Path]:
    led = tmp_path / "led"
    led.mkdir()
    body = "".join(
        f'\n[[patch]]\nid = "{pid}"\ntarget = "vllm"\ntitle = "t"\norigin = "port"\n'
        f'[patch.upstream]\nprs = ["vllm-project/vllm#5883{i}"]\n'
        for i, pid in enumerate(LONG_IDS)
    )
    (led / "patches.toml").write_text(
        'schema = 1\n[targets.vllm]\nupstream = "https://github.com/vllm-project/vllm"\n'
        'github = "vllm-project/vllm"\n' + body
    )
    src = tmp_path / "src"
    src.mkdir()
    old = "".join(f"line {i}\n" for i in range(30))
    (src / f"{LONG_IDS[0]}.patch").write_text(_diff(DEEP, old, old.replace("line 3\n", "line three\n")))
    (src / f"{LONG_IDS[1]}.patch").write_text(_diff(DEEP, old, old.replace("line 20\n", "line twenty\n")))
    assert run("import", *sorted(src.iterdir(), key=lambda p: LONG_IDS.index(p.stem)), cwd=led).code == 0
    tree = tmp_path / "tree"
    (tree / DEEP).parent.mkdir(parents=True)
    (tree / DEEP).write_text(old)
    return led, tree


@pytest.mark.parametrize("mode", MODES)
def test_apply(run, applied_ledger, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    env_for(monkeypatch, mode)
    led, tree = applied_ledger
    r = run("apply", "--tree", tree, "--dry-run", cwd=led)
    assert r.code == 0, r
    check(r.stdout, mode, LONG_IDS, header=["#", "patch", "result", "detail"])
    # a failing patch: the detail names the file once, whole
    (tree / DEEP).write_text("".join(f"other {i}\n" for i in range(30)))
    r = run("apply", "--tree", tree, cwd=led)
    assert r.code == 1, r
    check(r.stdout, mode, [LONG_IDS[0]])
    assert r.stdout.count(DEEP) <= 2 or mode != "piped", r.stdout
    for ln in r.stdout.splitlines():
        assert ln.count(DEEP) <= 1, f"a path printed twice on one line: {ln}"


def verify_report() -> VerifyReport:
    def res(outcome: str) -> CommandResult:
        return CommandResult(outcome, 0 if outcome == "pass" else 1, 1.5)

    pats = []
    for pid, klass, w, wo in (
        (LONG_IDS[0], PROVEN, "pass", "fail"),
        (LONG_IDS[1], NOT_NEEDED, "pass", "pass"),
        ("08-glm5-drafter-kv-group-flag", BROKEN, "fail", "fail"),
    ):
        name = "tests/v1/core/test_kv_cache_utils.py::test_get_kv_cache_configs_single_group_prefix_match"
        t = Outcome(pid, name, f"pytest {name}", ".", ["cpu"], 600, res(w), res(wo), klass, note="why")
        pats.append(PatchOutcome(pid, "title", [t], klass))
    return VerifyReport("patches.toml", "vllm", "vllm==0.30.0", ["cpu"], 2, pats, wall_seconds=3.0)


def gate_report() -> GateReport:
    patches = [
        {"id": LONG_IDS[0], "verdict": "carried", "how": "offset"},
        {"id": LONG_IDS[1], "verdict": "conflict"},
    ]
    bad = {"commit": {"sha": "3f2a9c1b7d4e5f60718293a4b5c6d7e8f9012345", "subject": "move kda", "pr": 58021}}
    return GateReport(
        "red",
        target="vllm",
        onto="vllm==0.33.0",
        rebase={"patches": patches},
        first_bad={LONG_IDS[1]: bad},
        tests=[{"patch": LONG_IDS[0], "name": "test_kv_cache_utils", "status": "passed"}],
    )


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("what", ["verify", "gate"])
def test_verify_and_gate_reports(mode: str, what: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    buf = io.StringIO()
    term = Term(buf, tty=mode != "piped", width=None if mode == "piped" else int(mode))
    if what == "verify":
        render_verify(term, verify_report())
    else:
        render_gate(gate_report(), term)
    tokens = [*LONG_IDS, "3f2a9c1b7d4e", "#58021"] if what == "gate" else [*LONG_IDS, "08-glm5-drafter-kv-group-flag"]
    if what == "verify":
        tokens.append("tests/v1/core/test_kv_cache_utils.py::test_get_kv_cache_configs_single_group_prefix_match")
    check(buf.getvalue(), mode, tokens)


def test_a_table_shows_every_path_whole() -> None:
    """A narrow table: the files go under the row, whole (not "3 files", not "…/c.py"); a path
    longer than a line wraps at "/" and reads whole joined."""
    files = ["vllm/a.py", "vllm/bbbbbbbbbbbbbbbbbbbbbb.py", DEEP]
    buf = io.StringIO()
    Term(buf, tty=True, width=40, color=False).table([Col("id", whole=True), Col("files", drop=1)], [["x-1", files]])
    text = buf.getvalue()
    check_paths(text, "40", files)
    assert "3 files" not in text


def check_paths(text: str, mode: str, paths: list[str]) -> None:
    """Paths are whole, always: each appears with every component (read joined at "/"), nothing
    is cut with "…", no line is longer than the width."""
    assert paths
    assert "…" not in text, f"a path cut with … at {mode}:\n{text}"
    read = joined(text)
    for path in paths:
        assert re.search(rf"(^|[\s:(,]){re.escape(path)}($|[\s,;:)])", read, re.M), (
            f"{path!r} is not whole at {mode}:\n{text}"
        )
    if mode != "piped":
        long = [  # a line holding (a piece of) a path; a single component longer than a line has its own
            ln
            for ln in text.splitlines()
            if len(ln) > int(mode) and "/" in ln and (len(ln.split()) > 1 or "/" in ln.strip(" /"))
        ]
        assert not long, f"lines longer than {mode} columns:\n" + "\n".join(long)


def ledger_files(root: Path) -> list[str]:
    return sorted({f for p in load_ledger(root / "patches.toml").patches for f in p.files})


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("where", ["prod", "example"])
def test_list_shows_whole_paths(run, prod: Path, where: str, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``list`` on the production ledger and on the example: ``vllm/v1/…`` keeps its ``vllm/``,
    ``include/flashinfer/…`` its ``include/``, at every width."""
    root = prod if where == "prod" else REPO_ROOT / "examples" / "spark-sm12x"
    env_for(monkeypatch, mode)
    r = run("list", cwd=root)
    assert r.code == 0, r
    check_paths(r.stdout, mode, ledger_files(root))


@pytest.mark.parametrize("mode", MODES)
def test_show_and_validate_show_whole_paths(
    run, prod: Path, applied_ledger, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``show`` without a body (the ledger's files), with bodies (the diffstat: the example, and a
    98-character path), and ``validate``'s files touched by several patches."""
    env_for(monkeypatch, mode)
    led = load_ledger(prod / "patches.toml")
    for p in led.patches:
        r = run("show", p.id, cwd=prod)
        assert r.code == 0, r
        check_paths(r.stdout, mode, [*p.files, f"patchset/series/{p.target}/{p.id}.patch"])
    example = REPO_ROOT / "examples" / "spark-sm12x"
    for p in load_ledger(example / "patches.toml").patches:
        r = run("show", p.id, cwd=example)
        assert r.code == 0, r
        check_paths(r.stdout, mode, list(p.files))
    r = run("show", LONG_IDS[0], cwd=applied_ledger[0])
    assert r.code == 0, r
    check_paths(r.stdout, mode, [DEEP])
    r = run("validate", cwd=prod)
    assert r.code == 0, r
    shared = [f for f in ledger_files(prod) if sum(f in p.files for p in led.patches) > 1]
    assert len(shared) >= 3
    check_paths(r.stdout, mode, shared)


@pytest.mark.parametrize("mode", MODES)
def test_status_apply_verify_show_whole_paths(
    run, prod: Path, applied_ledger, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_for(monkeypatch, mode)
    r = run("status", "--offline", cwd=prod)
    assert r.code == 0, r
    check_paths(r.stdout, mode, [str(prod / "patches.toml")])
    led, tree = applied_ledger
    r = run("apply", "--tree", tree, "--dry-run", cwd=led)
    assert r.code == 0, r
    check_paths(r.stdout, mode, [str(tree)])
    (tree / DEEP).write_text("".join(f"other {i}\n" for i in range(30)))
    r = run("apply", "--tree", tree, cwd=led)
    assert r.code == 1, r
    check_paths(r.stdout, mode, [DEEP, str(tree)])
    buf = io.StringIO()
    render_verify(Term(buf, tty=mode != "piped", width=None if mode == "piped" else int(mode)), verify_report())
    check_paths(
        buf.getvalue(),
        mode,
        ["tests/v1/core/test_kv_cache_utils.py::test_get_kv_cache_configs_single_group_prefix_match"],
    )


REBASE_PREFIX = "u58834-glm5next-non-mhc-sp-decoder-layout-"


@pytest.fixture(scope="module")
def rebase_upstream(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    up = tmp_path_factory.mktemp("rebase-upstream") / "up"
    return up, build_upstream(up)


@pytest.mark.parametrize("mode", MODES)
def test_rebase(run, tmp_path: Path, rebase_upstream, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real git upstream with one commit per kind of drift: every class, a conflict with the
    upstream commit that caused it, the range-diffs."""
    up, shas = rebase_upstream
    demo = build_rebase_demo(tmp_path, upstream=up, shas=shas, prefix=REBASE_PREFIX)
    env_for(monkeypatch, mode)
    r = run("rebase", "--onto", "v2", "--dry-run", cwd=demo.root)
    assert r.code == 1, r  # the demo has a conflict
    ids = [REBASE_PREFIX + pid for pid in ALL]
    tokens = [*ids, "example/demo#7", "example/demo#9", "sub/b.py", shas["conflict"][:12]]
    check(r.stdout, mode, tokens, header=["#", "patch", "result", "details"])
    lines = r.stdout.splitlines()
    assert any(ln.startswith("+++ new/" + ids[3]) for ln in lines), "the range-diff is printed as it is"
    if mode == "piped":  # cut -f2,3 gives each patch and its class
        rows = [ln.split("\t") for ln in lines if ln.count("\t") == 3][1:]
        assert [(r[1], r[2].split()[0]) for r in rows] == [(REBASE_PREFIX + p, EXPECTED[p][0]) for p in ALL]
    check_paths(r.stdout, mode, ["sub/b.py", "a.py", "g.py"])
    r = run("rebase", "--onto", "v2", "--dry-run", "--json", cwd=demo.root)  # --json stays the machine format
    data = json.loads(r.stdout)
    assert [p["id"] for p in data["patches"]] == ids and data["counts"]["conflict"] == 1


@pytest.mark.parametrize("mode", MODES)
def test_check_longctx(run, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Against the completions double (vLLM 0.30.0's /v1/completions schema on 127.0.0.1): a healthy
    server, and one whose context ends at 2,048 tokens (each failure says why under the table)."""
    env_for(monkeypatch, mode)
    checks = ["causality", "resume", "cached", "rescore"]
    header = ["check", "case", "metric", "value", "bar", "control", "verdict"]
    with serving() as (url, _):
        r = run("check", "longctx", "--url", url)
        assert r.code == 0, r
        check(r.stdout, mode, [url, *checks, "N=2048", "max |dlogprob|" if mode != "60" else "PASS"], header)
        data = json.loads(run("check", "longctx", "--url", url, "--json").stdout)  # the machine format
        assert [c["name"] for c in data["checks"]] == checks and data["ok"]
    with serving(max_model_len=2048) as (url, _):
        r = run("check", "longctx", "--url", url, "--checks", "causality,rescore")
        assert r.code == 1, r
        check(r.stdout, mode, [url, "causality", "rescore", "HTTP 400", "FAIL"], header)
        notes = [ln for ln in r.stdout.splitlines() if ln.strip().startswith("FAIL rescore")]
        assert notes and "maximum context length is 2048" in " ".join(joined(r.stdout).split()), r.stdout


UNTOUCHED = "usr/local/lib/python3.12/dist-packages/vllm/model_executor/layers/fused_moe/configs/untouched.json"


@pytest.mark.parametrize("mode", MODES)
def test_onboarding_export_and_audit(run, tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``init``, ``target add``, ``import`` of a build repository made of the example bodies,
    ``export`` and ``audit`` of the export with three planted disagreements."""
    env_for(monkeypatch, mode)
    build = example_build_repo(tmp_path / "image-build", extra_expected=(UNTOUCHED,))
    led = tmp_path / "led"
    led.mkdir()
    r = run("init", "--target", "nccl", cwd=led)
    assert r.code == 0, r
    check(r.stdout, mode, ["nccl", "NVIDIA/nccl", str(led / "patches.toml")])
    r = run(
        "target", "add", "mylib", "--upstream", "https://git.example.org/mylib.git", "--map", "src/=mylib/", cwd=led
    )
    assert r.code == 0, r
    check(r.stdout, mode, ["mylib", "https://git.example.org/mylib.git", "src/=mylib/"])
    r = run("import", build, cwd=led)
    assert r.code == 0, r
    ids = [p.id for p in load_ledger(led / "patches.toml").patches]
    vllm = [p.id for p in load_ledger(led / "patches.toml").patches if p.target == "vllm"]
    assert len(ids) == 7 and len(vllm) == 5
    check(r.stdout, mode, [*ids, UNTOUCHED, str(build / "EXPECTED.sha256")])
    dest = tmp_path / "exported-for-the-image-build" / "patches" / "vllm"
    r = run("export", "--format", "quilt", "--target", "vllm", dest, cwd=led)
    assert r.code == 0, r
    check(r.stdout, mode, [str(dest)])
    series = (dest / "series").read_text().splitlines()
    (dest / "series").write_text("\n".join([series[1], series[0], *series[2:]]) + "\n")  # out of order
    body = dest / f"{vllm[3]}.patch"
    body.write_text(body.read_text().replace("\n+", "\n+ ", 1))  # not the locked bytes
    (dest / "u58834-glm5next-non-mhc-sp-decoder-layout-with-a-long-tail.patch").write_text(
        (dest / series[2]).read_text()
    )
    r = run("audit", dest.parent.parent, "--target", "vllm", cwd=led)
    assert r.code == 1, r
    findings = [
        "patches/vllm/series:1:",
        f"patches/vllm/{vllm[3]}.patch:",
        "patches/vllm/u58834-glm5next-non-mhc-sp-decoder-layout-with-a-long-tail.patch:",
    ]
    check(r.stdout, mode, [*findings, *vllm[:2], "3 finding(s)"])


@pytest.mark.parametrize("mode", MODES)
def test_recover(run, applied_ledger, tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An apply killed (SIGKILL) after its journal is written, then ``recover`` in a deep directory."""
    led, tree = applied_ledger
    deep = tmp_path / "builds" / "vllm-0.30.0-sm12x-glm5next-image" / "site-packages-copy"
    deep.parent.mkdir(parents=True)
    tree.rename(deep)
    env = dict(os.environ, PATCHSET_TEST_CRASH_AFTER="2")
    argv = [sys.executable, "-c", "from patchset.cli import main; main()", "-C", str(led), "apply", "--tree", str(deep)]
    killed = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    env_for(monkeypatch, mode)
    r = run("recover", "--tree", deep, cwd=led)
    assert r.code == 0, r
    check(r.stdout, mode, [f"{deep}:"])
    assert f"{deep}: rolled forward" in " ".join(joined(r.stdout).split())
    r = run("recover", "--tree", deep, cwd=led)
    check(r.stdout, mode, [f"{deep}:"])
    assert "nothing to recover" in " ".join(joined(r.stdout).split())


@pytest.mark.parametrize("mode", MODES)
def test_fetch_check(run, prod: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    env_for(monkeypatch, mode)
    led = load_ledger(prod / "patches.toml")
    r = run("fetch", "--check", "--offline", cwd=prod)
    assert r.code == 0, r  # offline, nothing fetched yet: every row says so, nothing is out of date
    pinned = [p for p in led.patches if p.source.ref]
    assert pinned
    check(r.stdout, mode, [p.id for p in pinned] + [p.source.ref for p in pinned])


@pytest.mark.parametrize("mode", MODES)
def test_build_wheel_and_overlay(run, tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The build demo (a wheel written as a build backend writes it, a locked series): the wheel
    and overlay written, then a tree that does not match the lock refused, each path whole."""
    demo = make_wheel_demo(tmp_path, run, prefix="p4-glm5next-fp8-attn-helper-nvfp4-scales-")
    env_for(monkeypatch, mode)
    out = tmp_path / "dist-for-the-sm12x-image" / "patched-wheels"
    r = run("build", "wheel", "--wheel", demo["wheel"], "--out", out, cwd=demo["ledger"])
    assert r.code == 0, r
    (wheel,) = out.glob("*.whl")  # beside patchset.outdir's marker
    check(r.stdout, mode, [str(wheel)])
    overlay = tmp_path / "overlay-for-the-sm12x-image"
    r = run("build", "overlay", "--tree", demo["tree"], "--out", overlay, cwd=demo["ledger"])
    assert r.code == 0, r
    check(r.stdout, mode, [str(overlay), "overlay/usr/lib/python3/dist-packages/demo/data/include/demo/tile.h"])
    (demo["tree"] / "demo/core.py").write_text("changed\n")
    r = run("build", "overlay", "--tree", demo["tree"], "--out", tmp_path / "refused", cwd=demo["ledger"])
    assert r.code == 1, r
    check(r.stdout, mode, ["demo/core.py"])

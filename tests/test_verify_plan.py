"""The verify plan (issue #28): per-patch verdicts in about two engine starts on an ordinary night.

* the gate night by night over a synthetic upstream history on the completions double
  (``tests.support.nights``): the plan's engine starts each night (1 when nothing a patch watches
  moved, 2 when one tested patch's file or an import of it moved), the starts made, and every
  test's class against a full run (``--all``, nothing cached) of the same night; the break of night 3
  found the night it lands; ``gate --plan`` before a night, writing nothing; the carried verdicts
  in report.md, report.json and junit.xml;
* the decisions one by one (``verify.plan.decide``): each reason a without-run is needed, carrying;
* the watched files (``verify.plan.watch``): the import scan, digests, a path out of the tree;
* group testing: patches expected to be not needed tried together, split when a test fails there,
  the same classes as a full run, the starts saved;
* the proof history is sealed state: foreign, forged, linked or malformed histories are refused;
* ``verify --plan``/``--all`` and ``gate --plan`` on the production ledger (a fresh clone: no bodies,
  no history).

The same night-by-night test on the real vLLM CPU engine: ``tests/test_verify_plan_engine.py``.
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from patchset.errors import ForeignState, InputError
from patchset.verify.outcomes import BROKEN, NOT_NEEDED, PROVEN
from patchset.verify.plan.decide import AFTER_WITH, CARRY, RUN, PlanOptions, PlanPatch, PlanTest, decide
from patchset.verify.plan.grouping import choose_groups, simulate
from patchset.verify.plan.watch import UNSAFE, Watch, file_digest, imports_of
from patchset.verify.proofs import LastVerdict, PatchProof, TargetHistory, WithoutProof, load_history, save_history
from tests.support.consent import allow_ledger
from tests.support.nights import double_world, run_nights
from tests.support.repo import REPO_ROOT, git

NIGHT_STARTS = [4, 1, 2, 2]  # night 0 proves everything; then the plan's starts night by night


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATCHSET_STATE", str(tmp_path / "state"))
    return tmp_path


# --------------------------------------------------------------------------- night by night


def test_the_gate_night_by_night_plans_two_starts_and_agrees_with_a_full_run(isolated: Path, run) -> None:
    world = double_world(isolated / "world")
    nights = run_nights(world)
    assert [n.planned_starts for n in nights] == NIGHT_STARTS, [n.to_json() for n in nights]
    assert [n.started for n in nights] == NIGHT_STARTS  # what the plan said is what started
    assert [n.full_starts for n in nights] == [4, 4, 4, 4]  # a full run: the series + one tree per tested patch
    for n in nights:
        assert n.classes == n.full_classes, n.to_json()  # the plan's verdicts are the full run's, every night
        assert n.status == n.full_status
    first = {"d2-stale-cache-fix/lc": PROVEN, "d3-banner/lc": NOT_NEEDED, "d4-decode-drift/lc": BROKEN}
    assert nights[0].classes == nights[1].classes == nights[2].classes == first
    assert nights[1].carried == ["d2-stale-cache-fix", "d3-banner", "d4-decode-drift"]
    assert nights[2].proven_tonight == ["d2-stale-cache-fix"] and nights[2].carried == ["d3-banner", "d4-decode-drift"]
    # night 3: upstream made d1's fault inert through blocks.py, a file d2's cache.py imports
    assert nights[3].classes["d2-stale-cache-fix/lc"] == NOT_NEEDED
    assert nights[3].proven_tonight == ["d2-stale-cache-fix"]
    (change,) = nights[3].changed
    assert (change["patch"], change["was"], change["now"]) == ("d2-stale-cache-fix", PROVEN, NOT_NEEDED)

    art = world.root / "art-3"
    report = json.loads((art / "report.json").read_text())
    plan = report["plan"]["plan"]
    d2 = next(d for d in plan["decisions"] if d["patch"] == "d2-stale-cache-fix")
    assert d2["action"] == RUN
    assert any(
        "upstream changed fakeengine/blocks.py::REMAP (used by fakeengine/cache.py)" in r for r in d2["reasons"]
    ), d2
    d3 = next(d for d in plan["decisions"] if d["patch"] == "d3-banner")
    assert d3["action"] == CARRY and d3["carried_from"].startswith("run 1 (") and "did not touch it" in d3["carry_note"]
    assert any("verdict changed: proven -> not-needed" in w for w in report["warnings"])
    md = (art / "report.md").read_text()
    assert "What was proven tonight and what was carried" in md
    plain = md.replace("\\", "")
    assert (
        "carried: d3-banner: from run 1 (" in plain and "proven tonight: d2-stale-cache-fix: upstream changed" in plain
    )
    junit = ET.fromstring((art / "junit.xml").read_bytes())
    case = junit.find(".//testcase[@classname='tests.d3-banner']")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["class"] == NOT_NEEDED and props["carried from"].startswith("carried from run 1 (")
    verify_junit = ET.fromstring((art / "logs" / "verify-junit.xml").read_bytes())
    carried_case = verify_junit.find(".//testcase[@classname='d3-banner']")
    assert carried_case.find("skipped") is not None and carried_case.find("failure") is None  # not a new verdict
    found = verify_junit.find(".//testcase[@classname='d2-stale-cache-fix']")
    assert found.find("failure") is not None and found.find("skipped") is None  # not needed tonight: a finding

    # gate --plan of a night to come: what it would start, without starting or writing anything
    from tests.support.repo import commit_files

    state_dir = world.root / "state-planned"
    before = {p.name: p.read_bytes() for p in state_dir.iterdir()}
    nxt = commit_files(world.upstream, "Docs again (#204)", {"README.md": "fakeengine, documented twice\n"})
    r = run(
        "gate",
        "--plan",
        "--onto",
        nxt,
        "--tags",
        "cpu",
        "--state-file",
        state_dir / "gate-state.json",
        cwd=world.ledger.parent,
    )
    assert r.code == 0, r
    assert "1 engine start(s) tonight" in r.stdout and "a full run: 4" in r.stdout
    assert "carried d3-banner: from run 1 (" in r.stdout and "needed d2-stale-cache-fix" not in r.stdout
    assert {p.name: p.read_bytes() for p in state_dir.iterdir()} == before  # nothing written
    assert not (world.ledger.parent / "gate-artifacts").exists()


# --------------------------------------------------------------------------- decisions


def _patch(body: str = "b" * 16, spec: str = "s" * 16, digests: dict | None = None) -> PlanPatch:
    w = Watch({"pkg/a.py": "patched", "pkg/b.py": "imported by pkg/a.py"})
    w.digests = digests or {"pkg/a.py": ("1" * 16, "2" * 16, "1" * 16), "pkg/b.py": ("3" * 16,) * 3}
    return PlanPatch("p", body, [PlanTest("lc", spec, "e" * 16, "cpu")], w)


def _history(klass: str = PROVEN, night: int = 3, last: str | None = None) -> TargetHistory:
    proof = PatchProof(
        night,
        "2026-10-01T02:00:00Z",
        "vllm==0.31.0",
        klass,
        "b" * 16,
        {"lc": WithoutProof("s" * 16, "fail" if klass == PROVEN else "pass")},
        {"pkg/a.py": ["1" * 16, "2" * 16, "1" * 16], "pkg/b.py": ["3" * 16] * 3},
        {"pkg/a.py": "patched", "pkg/b.py": "imported by pkg/a.py"},
    )
    h = TargetHistory(night, {"p": proof})
    h.last["p"] = LastVerdict(last or klass, night, "2026-10-01T02:00:00Z", "vllm==0.31.0")
    return h


OPTS = PlanOptions(history="proofs.json")


def test_nothing_moved_carries_the_verdict_from_the_run_that_proved_it() -> None:
    d = decide(_patch(), _history(), OPTS, 4, "vllm==0.32.0")
    assert d.action == CARRY and d.reasons == []
    assert d.text() == (
        "carried from run 3 (2026-10-01T02:00:00Z on vllm==0.31.0) (upstream vllm==0.31.0..vllm==0.32.0 did not touch it)"
    )


@pytest.mark.parametrize(
    "change, reason",
    [
        (dict(history=None), "no earlier proof"),
        (dict(body="c" * 16), "its body changed since run 3"),
        (dict(spec="t" * 16), "its test lc changed since run 3"),
        (
            dict(digests={"pkg/a.py": ("1" * 16, "2" * 16, "1" * 16), "pkg/b.py": ("4" * 16,) * 3}),
            "upstream changed pkg/b.py (imported by pkg/a.py) since run 3 (2026-10-01T02:00:00Z on vllm==0.31.0) "
            "(upstream vllm==0.31.0..vllm==0.32.0)",
        ),
        (
            dict(digests={"pkg/a.py": ("1" * 16, "5" * 16, "1" * 16), "pkg/b.py": ("3" * 16,) * 3}),
            "the series around it changed pkg/a.py (patched) since run 3",
        ),
        (dict(digests={"pkg/a.py": ("1" * 16, "2" * 16, "1" * 16)}), "it no longer watches pkg/b.py"),
        (dict(digests={"pkg/a.py": (UNSAFE,) * 3, "pkg/b.py": ("3" * 16,) * 3}), "cannot read pkg/a.py (patched)"),
        (dict(night=17), "due by rotation: its turn of every 7 runs, proven 14 runs ago"),
        (dict(last="error"), "it was in error in run 3"),
        (dict(opts=PlanOptions(all_=True, history="x")), "asked for (--all)"),
        (dict(opts=PlanOptions(only=["p"], history="x")), "asked for (--only)"),
        (dict(opts=PlanOptions()), "no proof history is kept"),
        (
            dict(opts=PlanOptions(history="x", unknown="tonight's upstream is not named")),
            "tonight's upstream is not named",
        ),
    ],
)
def test_each_reason_a_without_run_is_needed(change: dict, reason: str) -> None:
    patch = _patch(change.get("body", "b" * 16), change.get("spec", "s" * 16), change.get("digests"))
    history = _history(last=change.get("last")) if "history" not in change else None
    d = decide(patch, history, change.get("opts", OPTS), change.get("night", 4), "vllm==0.32.0")
    assert d.action == RUN, d
    assert any(r.startswith(reason) for r in d.reasons), d.reasons


def test_a_patch_broken_last_time_waits_for_the_series() -> None:
    d = decide(_patch(), _history(last=BROKEN), OPTS, 4, "vllm==0.32.0")
    assert d.action == AFTER_WITH and d.reasons[0].startswith("it was broken in run 3")
    assert d.detail().startswith("runs only if its tests pass with the series tonight")
    assert decide(_patch(), _history(last=BROKEN), PlanOptions(all_=True, history="x"), 4, "v").action == RUN
    assert decide(_patch(), _history(), PlanOptions(history="x", full_every=0), 40, "v").action == CARRY


def test_only_runs_a_patch_broken_last_time_tonight() -> None:
    d = decide(_patch(), _history(last=BROKEN), PlanOptions(only=["p"], history="x"), 4, "v")
    assert d.action == RUN and "asked for (--only)" in d.reasons
    assert decide(_patch(), _history(last=BROKEN), PlanOptions(only=["q"], history="x"), 4, "v").action == AFTER_WITH
    patch = _patch()
    patch.minus_error = "the series without it does not apply"
    assert decide(patch, _history(last=BROKEN), OPTS, 4, "v").action == RUN  # an error, no engine start


@pytest.mark.parametrize("which", [1, 2])
def test_a_change_of_either_series_digest_is_noticed(which: int) -> None:
    """The watch keeps three digests per file (base, with the series, without the patch): the base
    is upstream's, the other two the series' around the patch; each one moving is a reason."""
    a = ["1" * 16, "2" * 16, "1" * 16]
    a[which] = "9" * 16
    d = decide(_patch(digests={"pkg/a.py": tuple(a), "pkg/b.py": ("3" * 16,) * 3}), _history(), OPTS, 4, "v")
    assert d.action == RUN
    assert d.reasons == [
        "the series around it changed pkg/a.py (patched) since run 3 (2026-10-01T02:00:00Z on vllm==0.31.0)"
    ]


# --------------------------------------------------------------------------- watched files


def test_the_import_scan_finds_the_modules_a_patched_file_imports(tmp_path: Path) -> None:
    files = {
        "pkg/__init__.py": "",
        "pkg/a.py": "import pkg.b\nfrom pkg import c\nfrom .d import thing\nfrom . import e\nimport os, numpy\n"
        "def f():\n    from pkg.sub import deep\n",
        "pkg/b.py": "",
        "pkg/c.py": "",
        "pkg/d.py": "",
        "pkg/e/__init__.py": "",
        "pkg/sub/deep.py": "",
        "pkg/new.py": "",
        "pkg/never.py": "",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    added = ["from pkg import (", "    new,", ")", "x = 1"]
    found = imports_of(files["pkg/a.py"], "pkg/a.py", added, lambda r: (tmp_path / r).is_file())
    assert found == [
        "pkg/b.py",
        "pkg/__init__.py",
        "pkg/c.py",
        "pkg/d.py",
        "pkg/e/__init__.py",
        "pkg/sub/deep.py",
        "pkg/new.py",
    ]
    assert imports_of("def broken(:\n", "pkg/a.py", [], lambda r: True) == []  # unparsable: nothing, no error
    # a digest is the engine's (sha256 of the bytes); a path out of the tree is never read
    (tmp_path / "pkg" / "out.py").symlink_to("/etc/hostname")
    assert file_digest(tmp_path, "pkg/out.py") == UNSAFE
    assert file_digest(tmp_path, "pkg/missing.py") == "absent"
    import hashlib

    assert file_digest(tmp_path, "pkg/b.py") == hashlib.sha256(b"").hexdigest()[:16]


# --------------------------------------------------------------------------- group testing


def test_group_testing_costs_one_start_per_needed_patch_plus_one() -> None:
    members = [f"p{i}" for i in range(16)]
    assert simulate(members, set()) == 1
    assert simulate(members, {"p3"}) == 2
    assert simulate(members, {"p3", "p9"}) == 3 < 2 * 4  # k·log2(n) would be 8
    assert simulate(members, set(members)) == 17  # why only patches expected to be not needed are grouped
    a, b, c = (Watch({"x.py": "patched"}), Watch({"y.py": "patched"}), Watch({"x.py": "imported by z.py"}))
    groups, notes = choose_groups([("a", a), ("b", b), ("c", c)], lambda ids: "")
    assert groups == [["a", "b"]] and notes == []  # c shares x.py with a: never dropped with it
    groups, notes = choose_groups([("a", a), ("b", b)], lambda ids: "patch b does not apply")
    assert groups == [] and "tried one by one" in notes[0]


GROUP_FILES = {f"fakeengine/n{i}.py": f"# note {i}\nGUARD = False\nA = 1\nB = 2\nNOTE = {i}\n" for i in range(1, 5)}
# e3's guard matters once upstream turns DRIFT on in n3.py: then its decode test (rescore) fails without
# it; the others check prefix-cache resumes (resume), which a decode drift does not touch
GROUP_PATCHES = [
    (f"e{i}", f"fakeengine/n{i}.py", "GUARD = False", "GUARD = True", '"rescore"' if i == 3 else '"resume"')
    for i in range(1, 5)
]
GROUP_FAULTS = (
    "from fakeengine import cache, decode, n3\n\n"
    'FAULTS = {"stale_cache": cache.STALE, "decode_drift": decode.DECODE_DRIFT or '
    '(getattr(n3, "DRIFT", False) and not n3.GUARD)}\n'
)


def test_patches_expected_not_needed_are_tried_together_and_split_when_a_test_fails(isolated: Path) -> None:
    from patchset.verify.pertest import VerifyRun, run_verify
    from tests.support.nights import FAKE, double_ledger

    files = {**FAKE, **GROUP_FILES, "fakeengine/faults.py": GROUP_FAULTS}
    tree = isolated / "tree"
    for rel, text in files.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)
    ledger = double_ledger(isolated / "led", files, GROUP_PATCHES, upstream="x", base="")
    hist = isolated / "proofs.json"

    def night(**kw):
        return run_verify(VerifyRun(ledger, tree=tree, history=hist, use_cache=False, **kw))

    def move(extra: str = "") -> None:  # upstream changes every watched file
        for rel in GROUP_FILES:
            (tree / rel).write_text((tree / rel).read_text() + f"# moved{extra}\n")

    first = night()
    assert {p.patch_id: p.klass for p in first.patches} == dict.fromkeys(["e1", "e2", "e3", "e4"], NOT_NEEDED)
    assert first.engine_starts == 5 and first.group_tries == []  # no history: one tree per patch
    move()  # all four need a without-run; expected not needed, watching disjoint files: one try together
    second = night()
    assert second.plan is not None and [g.patches for g in second.plan.groups] == [["e1", "e2", "e3", "e4"]]
    assert second.plan.starts == 2 and second.engine_starts == 2  # the series, the tree without all four
    (g,) = second.group_tries
    assert g["passed_together"] == ["e1", "e2", "e3", "e4"] and g["starts_saved"] == 3
    assert all(p.klass == NOT_NEEDED for p in second.patches)
    assert "passed with e2, e3, e4 missing too" in second.patches[0].proof
    assert second.patches[0].tests[0].without_also == ["e2", "e3", "e4"]
    move(" again")  # and upstream turns on the drift e3 guards: e3 is needed now
    (tree / "fakeengine/n3.py").write_text((tree / "fakeengine/n3.py").read_text() + "DRIFT = True\n")
    third = night()
    (g,) = third.group_tries
    assert g["passed_together"] == ["e1", "e2", "e4"] and g["tried_alone"] == ["e3"] and g["starts_saved"] == 2
    assert third.engine_starts == 3
    classes = {p.patch_id: p.klass for p in third.patches}
    assert classes == {"e1": NOT_NEEDED, "e2": NOT_NEEDED, "e3": PROVEN, "e4": NOT_NEEDED}
    full = run_verify(VerifyRun(ledger, tree=tree, use_cache=False))  # no history: every tree alone
    assert {p.patch_id: p.klass for p in full.patches} == classes and full.engine_starts == 5
    assert [c["patch"] for c in third.changed] == ["e3"]


# --------------------------------------------------------------------------- the history is sealed state


def _sealed_history(path: Path) -> dict:
    save_history(path, {"fake": _history()})
    return json.loads(path.read_text())


def test_a_history_this_installation_did_not_write_is_refused(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = isolated / "proofs.json"
    doc = _sealed_history(path)
    assert load_history(path)["fake"].proofs["p"].klass == PROVEN  # ours: read back
    # another installation's key: the same file is foreign
    monkeypatch.setenv("PATCHSET_STATE", str(isolated / "other-state"))
    with pytest.raises(ForeignState, match=r"proofs\.json: a verify proof history not written by this installation"):
        load_history(path)
    monkeypatch.setenv("PATCHSET_STATE", str(isolated / "state"))
    # a forged verdict (the seal no longer matches), no seal, a link, not JSON: refused, the file left alone
    forged = dict(doc)
    forged["targets"]["fake"]["proofs"]["p"]["klass"] = NOT_NEEDED
    path.write_text(json.dumps(forged))
    with pytest.raises(ForeignState, match="its seal is not this installation's"):
        load_history(path)
    assert json.loads(path.read_text()) == forged
    del forged["owner"]
    path.write_text(json.dumps(forged))
    with pytest.raises(ForeignState, match="carries no seal"):
        load_history(path)
    real = isolated / "real.json"
    _sealed_history(real)
    link = isolated / "link.json"
    link.symlink_to(real)
    with pytest.raises(ForeignState, match="symbolic link"):
        load_history(link)
    path.write_text("{not json")
    with pytest.raises(ForeignState, match="not readable JSON"):
        load_history(path)
    # sealed by us but malformed (a writer's bug): checked field by field
    from patchset.sealed import write_sealed
    from patchset.verify.proofs import KIND

    bad = json.loads(real.read_text())
    del bad["owner"]
    bad["targets"]["fake"]["proofs"]["p"]["watch"] = {"../x": ["not a digest", "1", "2"]}
    write_sealed(path, KIND, bad)
    with pytest.raises(InputError, match=r"watch '\.\./x': not three digests"):
        load_history(path)
    bad["targets"]["fake"]["proofs"]["p"]["watch"] = {}
    bad["targets"]["fake"]["nights"] = -1
    write_sealed(path, KIND, bad)
    with pytest.raises(InputError, match="nights: not a count"):
        load_history(path)


def test_the_gate_refuses_a_foreign_history_before_it_judges_anything(isolated: Path, run) -> None:
    world = double_world(isolated / "world")
    state = world.root / "state" / "gate-state.json"
    proofs = state.parent / "gate-proofs.json"
    state.parent.mkdir(parents=True)
    proofs.write_text(json.dumps({"version": 1, "targets": {"fake": {"nights": 9, "proofs": {}}}}))
    onto = world.nights[1][1]
    allow_ledger(world.ledger)
    r = run("gate", "--onto", onto, "--tags", "cpu", "--state-file", state, "--json", cwd=world.ledger.parent)
    data = json.loads(r.stdout)
    assert r.code == 2 and data["status"] == "error" and data["rebase"] == {} and data["tests"] == []
    assert "gate-proofs.json: a verify proof history not written by this installation" in data["errors"][0]
    assert "carries no seal" in data["errors"][0] and not state.exists()  # nothing judged, nothing remembered
    assert json.loads(proofs.read_text())["targets"]["fake"]["nights"] == 9  # left alone
    r = run("gate", "--plan", "--onto", onto, "--tags", "cpu", "--state-file", state, cwd=world.ledger.parent)
    assert r.code == 2 and "not written by this installation" in r.stdout


# --------------------------------------------------------------------------- the command line


def test_verify_plans_carries_and_re_proves_on_request(isolated: Path, run) -> None:
    world = double_world(isolated / "world")
    led = world.ledger.parent
    tree = isolated / "tree"
    git(world.upstream, "worktree", "add", "-q", "--detach", str(tree), world.nights[0][1])
    r = run("verify", "--tree", tree, "--plan", cwd=led)
    assert r.code == 0, r
    assert "needed d2-stale-cache-fix: no earlier proof" in r.stdout and "4 engine start(s) tonight" in r.stdout
    assert not (led / ".patchset" / "verify-proofs.json").exists()  # a plan writes nothing
    assert run("verify", "--tree", tree, "--json", cwd=led).code == 2  # its engine is not allowed yet
    allow_ledger(world.ledger)
    assert run("verify", "--tree", tree, "--json", cwd=led).code == 1  # d4 is broken, d3 not needed
    r = run("verify", "--tree", tree, "--json", cwd=led)
    data = json.loads(r.stdout)
    assert sorted(data["carried"]) == ["d2-stale-cache-fix", "d3-banner", "d4-decode-drift"]
    assert data["engine_starts"] == data["plan"]["engine_starts"] == 0  # the same tree: the series' results cached
    assert data["plan"]["full_run_engine_starts"] == 4 and len(data["reused"]) == 3
    d2 = next(p for p in data["patches"] if p["patch"] == "d2-stale-cache-fix")
    assert d2["class"] == PROVEN and d2["carried_from"].startswith("run 1 (")
    assert d2["tests"][0]["without"]["carried_from"] == d2["carried_from"]
    r = run("verify", "--tree", tree, "--all", "--no-cache", cwd=led)
    assert "proven tonight d2-stale-cache-fix: asked for (--all)" in " ".join(r.stdout.split())
    assert "4 engine start(s) (planned 4; a full run: 4)" in r.stdout


def test_gate_plan_on_the_production_ledger_prints_a_plan_from_a_fresh_clone(isolated: Path, run) -> None:
    """No body imported, no history, no upstream named: every tested patch is needed, "no earlier proof"."""
    clone = isolated / "clone"
    clone.mkdir()
    for name in ("patches.toml", "engines", "verify/baselines"):  # what the ledger names (no patchset/series)
        src, dest = REPO_ROOT / name, clone / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dest)
    r = run("gate", "--plan", "--target", "vllm", "--tags", "spark", cwd=clone)
    assert r.code == 0, r
    lines = r.stdout.splitlines()
    needed = [ln for ln in lines if ln.strip().startswith("needed ")]
    assert len(needed) == 13 and all(ln.endswith(": no earlier proof") for ln in needed)
    assert "19 engine start(s) tonight; a full run: 19" in r.stdout  # 4 engine configurations + 15 patches
    assert "with the series on spark [--mamba-ssm-cache-dtype float32]" in r.stdout
    assert not (clone / ".patchset").exists()
    r = run("gate", "--plan", "--target", "vllm", "--tags", "spark", "--json", cwd=clone)
    data = json.loads(r.stdout)
    assert data["status"] == "planned" and data["plan"]["plan"]["full_run_engine_starts"] == 19


def test_broken_last_time_comes_first_among_the_reasons() -> None:
    d = decide(_patch(body="c" * 16), _history(last=BROKEN), OPTS, 4, "vllm==0.32.0")
    assert d.action == AFTER_WITH and len(d.reasons) == 2
    assert d.reasons[0].startswith("it was broken in run 3") and d.reasons[1].startswith("its body changed")

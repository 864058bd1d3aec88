"""Every patch kind through every command (issue #31): one ledger per way a patch enters a ledger
(``tests.support.kindworld.Form``: a plain diff, a format-patch mail, a quilt series, an overlay, an
edit script, a revert, a PR fetched and not yet fetched), each run through every ``Command`` below
on one small real upstream (an ordinary git clone), its release on a local index and its PR on the
local GitHub-shaped server.

A new kind (a ``PatchKind`` member) fails ``test_every_kind_has_a_form`` until it has a form here;
a new command gets a ``Command`` member, and ``test_every_command_has_a_cell`` fails until it has a
cell. A cell that cannot apply (an unfetched PR has no body to apply) asserts the documented
answer: its message and exit code. No cell may change the ledger it reads (``fetch`` runs on a copy).
"""

from __future__ import annotations

import enum
import json
import shutil
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from patchset.ledger.model import PatchKind
from patchset.ledger.store import load_ledger
from tests.support.cli import Result, invoke
from tests.support.kindworld import FIXED, PATH, REPO, TOKEN, Form, World, build_world, make_ledger
from tests.support.repo import git, tree_digest

NOT_FETCHED = ("body not imported for 1 patch(es): pr-7", "patchset fetch")


class Command(enum.Enum):
    LIST = "list"
    SHOW = "show"
    VALIDATE = "validate"
    APPLY_TREE = "apply-tree"
    APPLY_REPO = "apply-repo"
    APPLY_INDEX = "apply-index"
    REBASE_CLEAN = "rebase-clean"
    REBASE_OFFSET = "rebase-offset"
    REBASE_CONFLICT = "rebase-conflict"
    REBASE_UPSTREAM = "rebase-upstream"
    GATE = "gate"
    GATE_TESTS = "gate-tests"
    EXPORT = "export"
    FETCH = "fetch"
    STATUS = "status"
    AUDIT = "audit"
    BUILD_WHEEL = "build-wheel"
    BUILD_OVERLAY = "build-overlay"
    VERIFY_PLAN = "verify-plan"


class Worlds:
    """The world and its ledgers, each made on first use (a form that cannot be imported fails its
    own cells, not the module)."""

    def __init__(self, world: World, root: Path) -> None:
        self.world, self.root = world, root
        self._made: dict[tuple[Form, bool], Path | AssertionError] = {}

    def ledger(self, form: Form, *, tests: bool = False) -> Path:
        """The ledger of ``form``; ``tests``: the same with a command test on the patch."""
        key = (form, tests)
        if key not in self._made:
            dest = self.root / ("tested" if tests else "plain") / form.value
            try:
                self._made[key] = make_ledger(self.world, form, dest, invoke, tests=tests)
            except AssertionError as exc:
                self._made[key] = exc
        made = self._made[key]
        if isinstance(made, AssertionError):
            raise AssertionError(f"the {form.value} ledger could not be made: {made}")
        return made


@pytest.fixture(scope="module")
def worlds(tmp_path_factory) -> Iterator[Worlds]:
    from tests.support.fakehub.server import FakeHub
    from tests.support.localindex import LocalIndex

    root = tmp_path_factory.mktemp("kinds")
    w = build_world(root)
    with pytest.MonkeyPatch.context() as mp, FakeHub(w.hub_data()) as hub, LocalIndex(w.wheels) as index:
        mp.setenv("PATCHSET_GITHUB_API", hub.base_url)
        mp.setenv("GITHUB_TOKEN", TOKEN)
        mp.setenv("PATCHSET_INDEX_URL", index.url)
        mp.setenv("PATCHSET_CACHE", str(root / "cache"))
        yield Worlds(w, root)


@dataclass
class Cell:
    """One cell's inputs: the form, its ledgers, the world and a private scratch directory."""

    form: Form
    led: Path
    tested: Path
    worlds: Worlds
    tmp: Path

    @property
    def w(self) -> World:
        return self.worlds.world

    @property
    def pid(self) -> str:
        return load_ledger(self.led / "patches.toml").patches[0].id

    def run(self, *args: str | Path, ledger: Path | None = None) -> Result:
        return invoke(*args, cwd=ledger or self.led)

    def refused_unfetched(self, r: Result) -> None:
        assert r.code == 2, r
        assert all(s in r.stderr for s in NOT_FETCHED), r.stderr
        assert "Traceback" not in r.stderr + r.stdout


# ---- the cells ----------------------------------------------------------------------------------
def _list(c: Cell) -> None:
    r = c.run("list", "--json")
    assert r.code == 0, r
    (row,) = json.loads(r.stdout)
    assert (row["id"], row["kind"]) == (c.pid, c.form.kind.value)
    assert row["body"] == ("present" if c.form.has_body else "not imported"), row
    r = c.run("list")
    assert r.code == 0 and c.pid in r.stdout, r


def _show(c: Cell) -> None:
    r = c.run("show", c.pid, "--json")
    assert r.code == 0, r
    d = json.loads(r.stdout)
    assert (d["id"], d["kind"]) == (c.pid, c.form.kind.value)
    assert d["body_state"] == ("present" if c.form.has_body else "not imported")
    assert [s["path"] for s in d["diffstat"]] == ([PATH] if c.form.has_body else [])
    r = c.run("show", c.pid)
    assert r.code == 0, r
    assert f"{c.pid}  (demo, {c.form.kind.value}, " in r.stdout, r.stdout
    if c.form is Form.GENERATED:
        assert d["generate"]["script"] == "patchset/scripts/gen/patch_core.py", d["generate"]
        assert "generated by: python3 '{ledger}/patchset/scripts/gen/patch_core.py'" in r.stdout, r.stdout
    elif c.form is Form.OVERLAY:
        assert d["overlay"]["files"] == [PATH] and f"overlay of: {PATH}" in r.stdout, r.stdout
    else:
        assert d["generate"] is None and d["overlay"] is None
    if c.form.kind is PatchKind.PR:
        assert f"source: pr {REPO}#7" in r.stdout, r.stdout


def _validate(c: Cell) -> None:
    r = c.run("validate")
    assert r.code == 0, r
    if c.form.has_body:
        assert "ok: 1 checked" in r.stdout, r.stdout
    else:
        assert "1 not imported, not checked" in r.stdout, r.stdout


def _apply_tree(c: Cell) -> None:
    tree = c.w.checkout(c.tmp / "tree")
    before = tree_digest(tree)
    r = c.run("apply", "--tree", tree)
    if not c.form.has_body:
        c.refused_unfetched(r)
        assert tree_digest(tree) == before
        return
    assert r.code == 0, r
    assert (tree / PATH).read_text() == FIXED


def _apply_repo(c: Cell) -> None:
    clone = c.tmp / "clone"
    git(c.tmp, "clone", "-q", str(c.w.upstream), str(clone))
    git(clone, "checkout", "-q", "-b", "work", c.w.base)
    r = c.run("apply", "--repo", clone)
    if not c.form.has_body:
        c.refused_unfetched(r)
        assert "patchset/demo" not in git(clone, "branch", "--list")
        return
    assert r.code == 0, r
    assert git(clone, "show", f"patchset/demo:{PATH}") == FIXED
    assert git(clone, "rev-list", "--count", "work..patchset/demo").strip() == "1"


def _apply_index(c: Cell) -> None:
    into = c.tmp / "into"
    r = c.run("apply", "--from-index", "demo-pkg==1.0", "--into", into)
    if not c.form.has_body:
        c.refused_unfetched(r)
        assert not into.exists()
        return
    assert r.code == 0, r
    assert (into / PATH).read_text() == FIXED


def _rebase(case: str, verdict: str, code: int = 0) -> Callable[[Cell], None]:
    def cell(c: Cell) -> None:
        r = c.run("rebase", "--onto", c.w.commits[case], "--dry-run", "--json")
        if not c.form.has_body:
            assert r.code == 2, r
            assert "the body of pr-7 is not imported" in r.stdout + r.stderr, r
            return
        assert r.code == code, r
        (p,) = json.loads(r.stdout)["patches"]
        assert (p["id"], p["verdict"]) == (c.pid, verdict), p
        if c.form is Form.GENERATED:
            assert p["how"] in ("regenerated", "refreshed") or verdict != "carried", p
            if verdict == "conflict":
                assert "anchor 'VALUE_5 = 5' not found" in r.stdout, r.stdout

    return cell


def _gate(tests: bool) -> Callable[[Cell], None]:
    def cell(c: Cell) -> None:
        led = c.tested if tests else c.led
        extra = ["--tags", "all"] if tests else []
        args = ["gate", "--onto", c.w.commits["clean"], *extra, "--json"]
        r = c.run(*args, "--state-file", c.tmp / "state.json", "--artifacts", c.tmp / "art", ledger=led)
        rep = json.loads(r.stdout)
        if not c.form.has_body:
            assert (r.code, rep["status"]) == (2, "error"), r
            (error,) = rep["errors"]
            assert f"{led / 'patches.toml'}:" in error and "the body of pr-7 is not imported" in error, error
            return
        assert (r.code, rep["status"]) == (0, "green"), r
        assert [p["verdict"] for p in rep["rebase"]["patches"]] == ["carried"], rep["rebase"]
        if tests:
            assert [(t["patch"], t["status"], t["class"]) for t in rep["tests"]] == [(c.pid, "passed", "proven")]
        else:
            assert rep["tests"] == []
        # onto the commit that changes the patched line the gate is red and blames that commit
        r = c.run(
            "gate", "--onto", c.w.commits["conflict"], "--json", "--state-file", c.tmp / "s2.json",
            "--artifacts", c.tmp / "art2", ledger=led,
        )  # fmt: skip
        rep = json.loads(r.stdout)
        assert (r.code, rep["status"]) == (1, "red"), r
        bad = rep["first_bad"][c.pid]["commit"]
        assert (bad["sha"], bad["pr"]) == (c.w.commits["conflict"], 5), rep["first_bad"]

    return cell


def _export(c: Cell) -> None:
    dest = c.tmp / "export"
    r = c.run("export", dest, "--format", "quilt")
    if not c.form.has_body:
        assert r.code == 2 and "nothing to export for quilt: no imported bodies" in r.stderr, r
        return
    assert r.code == 0, r
    body = load_ledger(c.led / "patches.toml").patches[0].body_path
    (series,) = dest.rglob("series")
    (name,) = [ln.split()[0] for ln in series.read_text().splitlines() if ln and not ln.startswith("#")]
    assert (series.parent / name).read_bytes() == (c.led / body).read_bytes()
    # the mbox is what `git am` takes: one commit making the patched file
    r = c.run("export", c.tmp / "mbox", "--format", "mbox")
    assert r.code == 0, r
    (mbox,) = (c.tmp / "mbox").rglob("*.mbox")
    clone = c.tmp / "am"
    git(c.tmp, "clone", "-q", str(c.w.upstream), str(clone))
    git(clone, "checkout", "-q", c.w.base)
    git(clone, "am", "-q", str(mbox))
    assert (clone / PATH).read_text() == FIXED
    assert git(clone, "rev-list", "--count", f"{c.w.base}..HEAD").strip() == "1"


def _audit(c: Cell) -> None:
    """The real bodies are this ledger's own export, or (no body here) the export of the fetched
    PR: audit holds the ledger's records (declared files, the lock's hashes) against them."""
    dest = c.tmp / "export"
    src = c.led if c.form.has_body else c.worlds.ledger(Form.PR_FETCHED)
    assert invoke("export", dest, "--format", "quilt", cwd=src).code == 0
    r = c.run("audit", dest, "--json")
    assert r.code == 0, r
    rep = json.loads(r.stdout)
    assert (list(rep["matched"]), rep["findings"]) == ([c.pid], []), rep
    bad = c.tmp / "bad"
    shutil.copytree(dest, bad)
    (body,) = (f for f in bad.rglob("*") if f.suffix in (".patch", ".diff"))
    body.write_text(body.read_text().replace("+VALUE_5 = 500", "+VALUE_5 = 501"))
    r = c.run("audit", bad)
    if c.form.has_body:  # the lock holds the body's hash
        assert r.code == 1 and "differs from the lock's" in r.stdout, r
    else:
        assert r.code == 0, r


def _fetch(c: Cell) -> None:
    led = c.tmp / "ledger"
    shutil.copytree(c.led, led)
    r = invoke("fetch", "--all", "--json", cwd=led)
    assert r.code == 0, r
    (row,) = json.loads(r.stdout)["rows"]
    if c.form.kind is not PatchKind.PR:
        assert (row["status"], row["message"]) == ("local", "local body: nothing to fetch"), row
    elif c.form is Form.PR_FETCHED:
        assert (row["status"], row["message"]) == ("present", "stored body matches the lock"), row
    else:
        assert (row["status"], row["source"]) == ("stored", f"{REPO}#7"), row
        tree = c.w.checkout(c.tmp / "tree")
        assert invoke("apply", "--tree", tree, cwd=led).code == 0
        assert (tree / PATH).read_text() == FIXED


def _status(c: Cell) -> None:
    r = c.run("status", "--offline", "--json")
    assert r.code == 0, r
    (row,) = json.loads(r.stdout)["rows"]
    assert row["id"] == c.pid, row
    refs = [row["pr"]["ref"]] if row["pr"] else []
    refs += [f"{r['role']} {r['ref']}" for r in row["refs"]]
    assert refs == {PatchKind.PR: [f"{REPO}#7"], PatchKind.REVERT: ["reverts acme/demo#2"]}.get(c.form.kind, []), row


def _build_wheel(c: Cell) -> None:
    (wheel,) = c.w.wheels.glob("*.whl")
    out = c.tmp / "dist"
    r = c.run("build", "wheel", "--wheel", wheel, "--out", out)
    if not c.form.has_body:
        c.refused_unfetched(r)
        assert not list(out.glob("*.whl"))
        return
    assert r.code == 0, r
    (built,) = out.glob("*.whl")
    with zipfile.ZipFile(built) as zf:
        assert zf.read(PATH).decode() == FIXED


def _build_overlay(c: Cell) -> None:
    tree = c.w.checkout(c.tmp / "tree")
    out = c.tmp / "image"
    if c.form.has_body:
        assert c.run("apply", "--tree", tree).code == 0
    r = c.run("build", "overlay", "--tree", tree, "--out", out)
    if not c.form.has_body:
        c.refused_unfetched(r)
        return
    assert r.code == 0, r
    assert (out / "overlay/usr/lib/python3/dist-packages" / PATH).read_text() == FIXED
    assert "FROM example.invalid/demo-base:1.0" in (out / "Dockerfile").read_text()


def _verify_plan(c: Cell) -> None:
    tree = c.w.checkout(c.tmp / "tree")
    r = c.run("verify", "--plan", "--tree", tree, "--json", ledger=c.tested)
    if not c.form.has_body:  # planned from the ledger alone: the missing body blocks the run, not the plan
        assert r.code == 0, r
        rep = json.loads(r.stdout)
        assert rep["planned_only"] and list(rep["plan"]["blockers"]) == [c.pid], rep
        assert "patchset fetch" in rep["plan"]["blockers"][c.pid]
        return
    assert r.code == 0, r
    rep = json.loads(r.stdout)
    assert (rep["planned_only"], rep["exit_code"], rep["plan"]["engine_starts"]) == (True, 0, 0), rep
    assert "the tested tree matches the lock (every patched file)" in rep["notes"], rep["notes"]
    # the ledger without a test: the plan says there is nothing to verify
    r = c.run("verify", "--plan", "--tree", tree)
    assert r.code == 2 and "declares a test" in r.stderr, r


CELLS: dict[Command, Callable[[Cell], None]] = {
    Command.LIST: _list,
    Command.SHOW: _show,
    Command.VALIDATE: _validate,
    Command.APPLY_TREE: _apply_tree,
    Command.APPLY_REPO: _apply_repo,
    Command.APPLY_INDEX: _apply_index,
    Command.REBASE_CLEAN: _rebase("clean", "carried"),
    Command.REBASE_OFFSET: _rebase("offset", "carried"),
    Command.REBASE_CONFLICT: _rebase("conflict", "conflict", 1),
    Command.REBASE_UPSTREAM: _rebase("upstream", "already-upstream"),
    Command.GATE: _gate(tests=False),
    Command.GATE_TESTS: _gate(tests=True),
    Command.EXPORT: _export,
    Command.FETCH: _fetch,
    Command.STATUS: _status,
    Command.AUDIT: _audit,
    Command.BUILD_WHEEL: _build_wheel,
    Command.BUILD_OVERLAY: _build_overlay,
    Command.VERIFY_PLAN: _verify_plan,
}


def test_every_kind_has_a_form(worlds: Worlds) -> None:
    """Each PatchKind has a form here, and the ledger each form wrote reads back as its kind."""
    assert {f.kind for f in Form} == set(PatchKind)
    for form in Form:
        (p,) = load_ledger(worlds.ledger(form) / "patches.toml").patches
        assert p.kind is form.kind, (form, p)


# patchset's commands that take no patch of a kind, and why
NOT_PER_KIND = {
    "import": "it makes every ledger here (make_ledger): each form is one import",
    "init": "it makes an empty ledger",
    "allow": "it records consent for a ledger's commands, no patch (tests/test_consent.py)",
    "target": "it edits [targets.NAME], no patch",
    "base": "detect reads a tree's version, no patch; find applies every body with apply's series_files "
    "(a PR not fetched has none), tests/test_base_find.py",
    "check": "it checks a running server, no patch",
    "recover": "it finishes an interrupted apply or ledger edit (tests/test_durability.py)",
}


def test_every_command_has_a_cell() -> None:
    """Every patchset command that takes patches is a Command here (a new one fails this test until
    it has its cells or is named in NOT_PER_KIND), and every Command has a cell."""
    import click

    from patchset import cli

    assert set(CELLS) == set(Command)
    covered = {c.value.split("-")[0] for c in Command}
    assert set(cli.main.list_commands(click.Context(cli.main))) == covered | set(NOT_PER_KIND)


@pytest.mark.parametrize("command", list(Command), ids=lambda c: c.value)
@pytest.mark.parametrize("form", list(Form), ids=lambda f: f.value)
def test_kind_x_command(worlds: Worlds, form: Form, command: Command, tmp_path: Path) -> None:
    led, tested = worlds.ledger(form), worlds.ledger(form, tests=True)
    before = tree_digest(led), tree_digest(tested)
    CELLS[command](Cell(form, led, tested, worlds, tmp_path))
    assert (tree_digest(led), tree_digest(tested)) == before, "a command changed the ledger it read"


# ---- what the matrix found (issue #31) ------------------------------------------------------------
def test_the_gate_runs_a_generated_patch_whose_script_lives_in_the_ledger(worlds: Worlds, tmp_path: Path) -> None:
    """The gate's copy of the ledger carries the scripts its generate commands name: the gate
    judges the user's own generated patch as ``rebase --dry-run`` does (it was a false RED, a
    "conflict" blamed on the unrelated first commit, the script missing from the copy)."""
    led, onto = worlds.ledger(Form.GENERATED), worlds.world.commits["clean"]
    r = invoke("rebase", "--onto", onto, "--dry-run", "--json", cwd=led)
    assert r.code == 0, r
    (dry,) = json.loads(r.stdout)["patches"]
    r = invoke(
        "gate", "--onto", onto, "--json", "--state-file", tmp_path / "s.json", "--artifacts", tmp_path / "a", cwd=led
    )
    rep = json.loads(r.stdout)
    assert (r.code, rep["status"], rep["conflicts"], rep["first_bad"]) == (0, "green", [], {}), r
    (gated,) = rep["rebase"]["patches"]
    assert (gated["verdict"], gated["how"]) == (dry["verdict"], dry["how"]) == ("carried", "regenerated")


@pytest.mark.parametrize("bare", [True, False], ids=["bare", "ordinary"])
def test_a_generated_patch_works_on_a_bare_and_an_ordinary_clone(worlds: Worlds, tmp_path: Path, bare: bool) -> None:
    """``import --script`` and ``rebase`` read the base from the target's local clone, bare or not
    (an ordinary clone was "not a git repository": its work tree was given to git as --git-dir)."""
    w = worlds.world
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", *(["--bare"] if bare else []), str(w.upstream), str(clone))
    led = make_ledger(w, Form.GENERATED, tmp_path / "led", invoke, upstream=clone)
    assert "+VALUE_5 = 500" in (led / "patchset/series/demo/gen.patch").read_text()
    r = invoke("rebase", "--onto", w.commits["offset"], "--dry-run", "--json", cwd=led)
    assert r.code == 0, r
    (p,) = json.loads(r.stdout)["patches"]
    assert (p["verdict"], p["how"]) == ("carried", "refreshed"), p


@pytest.mark.parametrize("form", [Form.OVERLAY, Form.GENERATED], ids=lambda f: f.value)
def test_show_renders_overlay_and_generated_patches(worlds: Worlds, form: Form) -> None:
    """``show`` of an overlay or a generated patch (an internal error, ``AttributeError: _asdict``,
    for both) prints where the body comes from, in text and in --json."""
    led = worlds.ledger(form)
    pid = load_ledger(led / "patches.toml").patches[0].id
    r = invoke("show", pid, cwd=led)
    assert r.code == 0 and "internal error" not in r.stderr, r
    said = (
        "generated by: python3 '{ledger}/patchset/scripts/gen/patch_core.py'"
        if form is Form.GENERATED
        else "overlay of"
    )
    assert said in r.stdout, r.stdout
    d = json.loads(invoke("show", pid, "--json", cwd=led).stdout)
    table = d["generate"] if form is Form.GENERATED else d["overlay"]
    assert isinstance(table, dict) and table, d

"""Fuzz tier: hostile lock keys, ``EXPECTED.sha256`` lines and patch headers (security issue #23).

Hypothesis draws paths out of pieces that have broken path handling before (``..``, absolute
names, ``.git`` and patchset's state directories in any case, backslashes, control characters, a
link in the tree that points out of it) and feeds them through the product's own readers and
writers: ``load_lock`` then ``build overlay``; ``parse_expected`` then ``import``; patch headers
(plain ``---``/``+++``, git ``diff --git``, rename, copy, delete and symlink headers) through
``apply_series`` and ``detect_state``. Every case must end within ``CASE_DEADLINE_S``, raise
nothing but patchset's domain exceptions, and leave the :class:`Sentinel` beside the tree, the
ledger and the output exactly as it was; what the product accepts must be confined (lock keys
that load again, links in the tree that stay inside it).
"""

from __future__ import annotations

import hashlib
import itertools
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from patchset import cli
from patchset.confine import check_relative, is_within
from patchset.engine.detect import detect_state
from patchset.engine.results import SeriesItem
from patchset.engine.tree import apply_series
from patchset.errors import PatchsetError, UnsafePathError
from patchset.ledger.lock import load_lock, parse_expected, render_lock
from patchset.ledger.model import Lock
from tests.support.fuzz import CASE_DEADLINE_S, Sentinel, examples
from tests.support.wheel_demo import make_demo

PIECES = [
    "a.txt",
    "sub",
    "f.txt",
    "..",
    ".",
    "",
    "link_in",
    "link_out",
    "up",
    ".git",
    ".GIT",
    ".patchset-txn",
    ".Patchset",
    "sentinel",
    "victim.txt",
    "etc",
    "passwd",
    "demo",
    "core.py",
    "x y",
    "é",
    "a\\b",
    "C:",
    "~",
    "\t",
]
_joined = st.lists(st.sampled_from(PIECES), min_size=1, max_size=6).map("/".join)
PATHS = st.one_of(_joined, _joined.map(lambda p: "/" + p), st.text(max_size=24))
SHA = st.one_of(st.just("0" * 64), st.text("0123456789abcdef", min_size=64, max_size=64), st.text(max_size=70))
SETTINGS = settings(
    max_examples=examples(),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
_case = itertools.count()


def _toml_key(key: str) -> str:
    """A TOML basic string (control characters escaped as \\uXXXX, which TOML reads)."""
    out = "".join(c if c >= " " and c not in '"\\\x7f' else f"\\u{ord(c):04x}" for c in key)
    return f'"{out}"'


@dataclass
class _Ran:
    code: int
    stdout: str
    stderr: str


def _run(*args: str | Path, cwd: Path | None = None) -> _Ran:
    """The CLI in-process (what ``make_demo`` needs to apply and lock its series)."""
    argv = [str(a) for a in args]
    if cwd is not None:
        argv = ["-C", str(cwd), *argv]
    here = os.getcwd()
    try:
        r = CliRunner().invoke(cli.main, argv, catch_exceptions=False)
    finally:
        os.chdir(here)
    return _Ran(r.exit_code, r.stdout, r.stderr)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The build demo (a locked ledger and its patched tree), and a world for the lock cases: a
    copy of both with a link out of the tree and a sentinel beside them."""
    made: dict[str, Any] = make_demo(tmp_path_factory.mktemp("fuzz-lock"), _run)
    world = tmp_path_factory.mktemp("fuzz-lock-world")
    shutil.copytree(made["ledger"], world / "ledger")
    shutil.copytree(made["tree"], world / "tree", symlinks=True)
    (world / "tree" / "link_out").symlink_to("../sentinel")
    made["world"] = world
    made["lock"] = render_lock(load_lock(made["ledger"] / "patches.lock"))
    return made


def _confined(key: str, allow_state: bool = False) -> bool:
    try:
        check_relative(key, what="fuzz", allow_state=allow_state)
    except UnsafePathError:
        return False
    return True


def _deadline(start: float) -> None:
    assert time.monotonic() - start < CASE_DEADLINE_S, "a case ran past its deadline"


# --------------------------------------------------------------------------- lock keys -> build overlay


@SETTINGS
@given(
    keys=st.lists(st.tuples(st.sampled_from(["files", "base_files"]), PATHS, SHA), max_size=4),
    keep=st.booleans(),
    junk=st.one_of(st.just(b""), st.binary(max_size=16)),
)
def test_fuzz_lock_keys_through_load_and_overlay(demo, keys, keep: bool, junk: bytes) -> None:
    from patchset.build.overlay import build_overlay
    from patchset.ledger.store import load_ledger

    world = demo["world"]  # ledger/ and tree/ (read only here), sentinel/ beside them
    bait = Sentinel(world)
    led, tree, out = world / "ledger", world / "tree", world / "out"
    text = demo["lock"] if keep else demo["lock"].split("[targets.demo", 1)[0]
    text += "".join(f"\n[targets.demo.{section}]\n{_toml_key(k)} = {_toml_key(sha)}\n" for section, k, sha in keys)
    (led / "patches.lock").write_bytes(text.encode() + junk)
    start = time.monotonic()
    loaded: Lock | None = None
    try:
        loaded = load_lock(led / "patches.lock")
        ledger = load_ledger(led / "patches.toml")
        build_overlay(ledger, ledger.targets["demo"], tree, out)
    except PatchsetError:
        pass
    _deadline(start)
    if loaded is not None:  # what load_lock accepts is confined
        assert all(_confined(k) for tl in loaded.targets.values() for k in [*tl.files, *tl.base_files]), loaded
    bait.assert_untouched()
    assert sorted(p.name for p in world.iterdir() if p.name != "out") == ["ledger", "sentinel", "tree"], (
        "a scratch or output landed beside the output"
    )
    shutil.rmtree(out, ignore_errors=True)


# --------------------------------------------------------------------------- EXPECTED.sha256 -> import


@SETTINGS
@given(
    lines=st.lists(
        st.one_of(
            st.tuples(SHA, PATHS).map(lambda t: f"{t[0]}  {t[1]}"),
            st.tuples(SHA, PATHS).map(lambda t: f"{t[0]} *{t[1]}"),
            st.text(max_size=80),
            st.binary(max_size=80),  # not UTF-8, NUL bytes
        ),
        max_size=5,
    ),
    relative=st.booleans(),
)
def test_fuzz_expected_lines_through_parse_and_import(demo, tmp_path: Path, lines, relative: bool) -> None:
    from patchset.commands.importer import import_sources

    base = tmp_path / f"case{next(_case)}"
    base.mkdir()
    bait = Sentinel(base)
    led = base / "ledger"
    shutil.copytree(demo["ledger"], led)
    sums = base / "EXPECTED.sha256"
    sums.write_bytes(b"\n".join(ln if isinstance(ln, bytes) else ln.encode() for ln in lines) + b"\n")
    start = time.monotonic()
    parsed: dict[str, str] = {}
    try:
        parsed = parse_expected(sums, relative=relative)
    except PatchsetError:
        pass
    try:
        import_sources(led / "patches.toml", [sums], target="demo")
    except PatchsetError:
        pass
    _deadline(start)
    for k in parsed:  # absolute only where allowed, never '..' or a control character
        assert not (relative and k.startswith("/")) and _confined(k.lstrip("/"), allow_state=True), k
    lock = load_lock(led / "patches.lock")  # what import wrote loads back, every key confined
    assert all(_confined(k) for tl in lock.targets.values() for k in tl.files)
    bait.assert_untouched()
    shutil.rmtree(base)


# --------------------------------------------------------------------------- patch headers -> apply


def _hunk(old: str | None, new: str | None) -> str:
    if old is None:
        return f"@@ -0,0 +1 @@\n+{new}\n"
    if new is None:
        return f"@@ -1 +0,0 @@\n-{old}\n"
    return f"@@ -1 +1 @@\n-{old}\n+{new}\n"


LINK_NAMES = st.sampled_from(["e", "sub/l2", "sub/e", "link_in/e"])
LINK_TARGETS = st.sampled_from(["sub/up/..", "..", "sub/l2/..", "e/..", "link_in/up/..", "../sentinel", "/etc", "e/x"])
TEXTS = st.sampled_from([("a", "b"), ("do not touch", "owned"), ("root:x:0:0", "owned")])


KINDS = ["plain", "git", "rename", "copy", "create", "delete", "symlink", "retarget"]


@st.composite
def file_patch(draw: st.DrawFn, kinds: list[str] = KINDS) -> str:
    p, q = draw(PATHS), draw(PATHS)
    old, new = draw(TEXTS)
    kind = draw(st.sampled_from(kinds))
    if kind == "plain":
        pa = draw(st.sampled_from([f"a/{p}", p, "/dev/null"]))
        return f"--- {pa}\n+++ b/{q}\n" + _hunk(None if pa == "/dev/null" else old, new)
    if kind == "git":
        return f"diff --git a/{p} b/{q}\n--- a/{p}\n+++ b/{q}\n" + _hunk(old, new)
    if kind in ("rename", "copy"):
        body = draw(st.booleans())
        head = f"diff --git a/{p} b/{q}\nsimilarity index 90%\n{kind} from {p}\n{kind} to {q}\n"
        return head + (f"--- a/{p}\n+++ b/{q}\n" + _hunk(old, new) if body else "")
    if kind == "create":
        return f"diff --git a/{p} b/{p}\nnew file mode 100644\n--- /dev/null\n+++ b/{p}\n" + _hunk(None, new)
    if kind == "delete":
        return f"diff --git a/{p} b/{p}\ndeleted file mode 100644\n--- a/{p}\n+++ /dev/null\n" + _hunk(old, None)
    # links: names and targets that make chains (``e -> sub/up/..`` passes a textual check and
    # leaves the tree through the link ``sub/up -> ..`` on disk), then anything
    p = draw(st.one_of(LINK_NAMES, LINK_NAMES, LINK_NAMES, PATHS))
    target = draw(st.one_of(LINK_TARGETS, LINK_TARGETS, LINK_TARGETS, PATHS))
    if kind == "symlink":
        return (
            f"diff --git a/{p} b/{p}\nnew file mode 120000\n--- /dev/null\n+++ b/{p}\n"
            f"@@ -0,0 +1 @@\n+{target}\n\\ No newline at end of file\n"
        )
    return (
        f"diff --git a/{p} b/{p}\nindex 1111111..2222222 120000\n--- a/{p}\n+++ b/{p}\n"
        f"@@ -1 +1 @@\n-sub\n\\ No newline at end of file\n+{target}\n\\ No newline at end of file\n"
    )


SERIES = st.lists(st.lists(file_patch(), min_size=1, max_size=4).map("".join), min_size=1, max_size=3)
# links only (and files written through them): most such series apply, so chains get built
LINK_SERIES = st.lists(
    st.lists(file_patch(["symlink", "symlink", "retarget", "create"]), min_size=1, max_size=2).map("".join),
    min_size=1,
    max_size=4,
)


@SETTINGS
@given(series=st.one_of(SERIES, LINK_SERIES), strip=st.sampled_from([1, 0]))
def test_fuzz_patch_headers_through_apply(tmp_path: Path, series: list[str], strip: int) -> None:
    base = tmp_path / f"case{next(_case)}"
    tree = base / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.txt").write_text("a\n")
    (tree / "sub" / "f.txt").write_text("a\n")
    (tree / "link_in").symlink_to("sub")
    (tree / "link_out").symlink_to("../sentinel")
    (tree / "sub" / "up").symlink_to("..")  # inside (the tree itself); "sub/up/.." is not
    bait = Sentinel(base)
    items = [SeriesItem(f"p{i}", body.encode("utf-8", "surrogatepass"), strip) for i, body in enumerate(series)]
    start = time.monotonic()
    try:
        detect_state(tree, items)
    except PatchsetError:
        pass
    try:
        apply_series(tree, items)
    except PatchsetError:
        pass
    _deadline(start)
    bait.assert_untouched()
    for dirpath, dirnames, filenames in os.walk(tree):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            if p.is_symlink() and p != tree / "link_out":
                assert is_within(p, tree), f"{p} -> {os.readlink(p)} leaves the tree"
    assert sorted(os.listdir(base)) == ["sentinel", "tree"]
    assert not (tree / ".patchset-txn").exists() and not (tree / ".git").exists()
    shutil.rmtree(base)


def test_fuzz_sentinel_sees_a_write(tmp_path: Path) -> None:
    """The check above can fail: a write into the sentinel is noticed."""
    bait = Sentinel(tmp_path)
    (bait.root / "victim.txt").write_text(hashlib.sha256(b"x").hexdigest())
    with pytest.raises(AssertionError):
        bait.assert_untouched()

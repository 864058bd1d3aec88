"""Fuzz tier: recovery over hostile transaction directories (security issue #23).

Each case lays a transaction directory in a fresh tree (``.patchset-txn``) or ledger directory
(``.patchset/ledger-txn``): a journal drawn as JSON (random entries, ``created_dirs``,
``removed_dirs``, paths of every kind — ``../``, absolute paths into the sentinel, a path through
a link out of the tree, patchset's own state, wrong types) or as raw bytes (truncated JSON,
garbage, deep nesting), staged files (or a link in place of ``new/``), and either no seal, a
forged one or this installation's real seal (so confinement of our *own* journals is exercised
too). Then recovery runs, in a random direction. Every case must: leave the sentinel beside the
tree untouched and create nothing beside it, leave an unsealed journal byte for byte as it was,
finish within ``CASE_DEADLINE_S``, and raise nothing but patchset's domain exceptions.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from patchset.engine import txn
from patchset.errors import PatchsetError
from patchset.journal.commit import Journal
from patchset.ledger import store
from tests.support.fuzz import CASE_DEADLINE_S, Sentinel, examples

pytestmark = pytest.mark.fuzz

SENTINEL = "\x00SENTINEL\x00"  # replaced by the sentinel's absolute path in each case

NAMED = st.sampled_from(
    [
        "../sentinel/victim.txt",
        "sub/../../sentinel/etc/passwd",
        "../sentinel",
        "..",
        "../made",
        SENTINEL + "/victim.txt",
        SENTINEL + "/etc",
        SENTINEL + "/made",
        "out/victim.txt",  # ``out`` is a link to the sentinel
        "out/etc/passwd",
        "out/made",
        ".patchset-txn/journal.json",
        ".patchset/ledger-txn/new/0",
        ".git/config",
        "",
        ".",
        "a\x00b",
        "a\\..\\..\\x",
        "C:/x",
        "f.txt",
        "sub",
        "sub/g.txt",
        "new/dir",
        "new/dir/h.txt",
    ]
)
PATHS = st.one_of(NAMED, st.text(alphabet="ab./\\-_\x00\n", max_size=12))
SAFE = st.sampled_from(["f.txt", "sub", "sub/g.txt", "sub/deep", "sub/deep/y", "new", "new/x", "h.txt"])
OWN_PATHS = st.one_of(SAFE, SAFE, SAFE, SAFE, SAFE, NAMED, st.text(alphabet="ab./-_", max_size=8))
JUNK = st.one_of(st.none(), st.booleans(), st.integers(-5, 0o200000), st.text(max_size=5), st.just([]), st.just({}))
WELL = st.sampled_from([None, "0", "1", "2"])  # what patchset writes (most cases: the checks past the shape run)
STAGED_NAME = st.one_of(WELL, WELL, WELL, st.sampled_from(["7", "00", "-1", "x", "../x", "0/0"]), JUNK)
MODE = st.one_of(st.sampled_from([None, 0o644, 0o755, 0o120000]), st.sampled_from([None, 0o644]), JUNK)


def _maybe(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly ``good`` (3 in 4), else ``bad``."""
    return st.one_of(good, good, good, bad)


ENTRY = _maybe(
    st.fixed_dictionaries(
        {"path": PATHS, "new": STAGED_NAME, "old": STAGED_NAME},
        optional={
            "old_mode": MODE,
            "new_mode": MODE,
            "sha256": st.one_of(st.none(), st.text("0123456789abcdef", min_size=64, max_size=64), JUNK),
        },
    ),
    st.one_of(JUNK, PATHS),
)
BODY = st.fixed_dictionaries(
    {
        "version": _maybe(st.just(1), JUNK),
        "entries": _maybe(st.lists(ENTRY, max_size=6), JUNK),
        "created_dirs": _maybe(st.lists(PATHS, max_size=4), JUNK),
        "removed_dirs": _maybe(st.lists(PATHS, max_size=4), JUNK),
    }
)
RAW = st.one_of(
    st.binary(max_size=64),
    st.integers(1, 20000).map(lambda n: b"[" * n),
    st.integers(1, 20000).map(lambda n: b'{"entries":' * n),
    st.just(b'{"version": 1, "entries": [{"path": "../sentinel/victim.txt", "new": null'),
)
SEAL = st.sampled_from(["none", "forged", "ours", "ours"])
LAYOUT = st.fixed_dictionaries(
    {
        "staged": _maybe(st.lists(st.sampled_from(["0", "1", "2"]), max_size=3, unique=True), st.just(["x", "00"])),
        "old": st.lists(st.sampled_from(["0", "1"]), max_size=2, unique=True),
        "new_is_link": st.sampled_from([False, False, False, False, True]),
        "extra": st.sampled_from([None, None, None, None, "stray", "journal.json.tmp"]),
        "journal_is": st.sampled_from(["file"] * 6 + ["absent", "link", "dir"]),
    }
)


def _fill(value: Any, sentinel: str) -> Any:
    if isinstance(value, str):
        return value.replace(SENTINEL, sentinel)
    if isinstance(value, list):
        return [_fill(v, sentinel) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, sentinel) for k, v in value.items()}
    return value


def _lay_out(
    root: Path, journal: Journal, content: Any, seal: str, layout: dict[str, Any], sentinel: Sentinel
) -> bytes | None:
    """The transaction directory of ``journal``; returns the journal's bytes (None: no file)."""
    d = journal.txn
    d.mkdir(parents=True)
    if layout["new_is_link"]:
        os.symlink(sentinel.root / "etc", d / "new")
    else:
        (d / "new").mkdir()
        for name in layout["staged"]:
            (d / "new" / name).write_bytes(b"staged %s\n" % name.encode())
    (d / "old").mkdir()
    for name in layout["old"]:
        (d / "old" / name).write_bytes(b"old %s\n" % name.encode())
    if layout["extra"]:
        (d / layout["extra"]).write_bytes(b"x")
    if isinstance(content, bytes):
        data = content
    else:
        body = _fill(content, str(sentinel.root))
        if seal == "ours":
            body = journal.seal(body)
        elif seal == "forged":
            body = dict(body, owner="0" * 64)
        data = json.dumps(body).encode()
    kind = layout["journal_is"]
    if kind == "absent":
        return None
    if kind == "link":
        os.symlink(sentinel.root / "victim.txt", d / "journal.json")
        return None
    if kind == "dir":
        (d / "journal.json").mkdir()
        return None
    (d / "journal.json").write_bytes(data)
    return data


@settings(
    max_examples=examples(),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    content=_maybe(BODY, RAW),
    seal=SEAL,
    layout=LAYOUT,
    kind=st.sampled_from(["tree", "ledger"]),
    direction=st.sampled_from(["auto", "forward", "back"]),
)
def test_recovery_of_any_transaction_directory_stays_inside_its_root(
    tmp_path: Path, content: Any, seal: str, layout: dict[str, Any], kind: str, direction: Any
) -> None:
    with tempfile.TemporaryDirectory(dir=tmp_path) as case:
        base = Path(case)
        sentinel = Sentinel(base)
        root = base / "root"
        (root / "sub").mkdir(parents=True)
        (root / "f.txt").write_bytes(b"f\n")
        (root / "sub" / "g.txt").write_bytes(b"g\n")
        os.symlink(sentinel.root, root / "out")
        journal = txn.journal(root) if kind == "tree" else store.edit_journal(root)
        written = _lay_out(root, journal, content, seal, layout, sentinel)
        beside = sorted(os.listdir(base))
        started = time.monotonic()
        try:
            if kind == "tree":
                txn.recover(root, direction)
            else:
                store.recover_edit(root, direction)
        except PatchsetError as exc:
            assert exc.render(), "a domain error without a message"
        elapsed = time.monotonic() - started
        sentinel.assert_untouched()
        assert sorted(os.listdir(base)) == beside, "recovery created something beside the root"
        assert (root / "out").is_symlink() and os.readlink(root / "out") == str(sentinel.root)
        if written is not None and seal != "ours":  # never ours: left byte for byte as it was
            assert (journal.txn / "journal.json").read_bytes() == written
        assert elapsed < CASE_DEADLINE_S, f"recovery took {elapsed:.1f} s"


OWN_ENTRY = st.fixed_dictionaries(
    {
        "path": PATHS,
        "new": WELL,
        "old": WELL,
        "old_mode": st.sampled_from([None, 0o644]),
        "new_mode": MODE.filter(lambda m: m in (None, 0o644, 0o755, 0o120000)),
    }
)


@settings(
    max_examples=examples(),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    entries=st.lists(OWN_ENTRY, max_size=4),
    created=st.lists(OWN_PATHS, max_size=3),
    removed=st.lists(OWN_PATHS, max_size=2),
    staged=st.lists(st.sampled_from(["0", "1", "2"]), max_size=3, unique=True),
    kind=st.sampled_from(["tree", "ledger"]),
    direction=st.sampled_from(["auto", "forward", "back"]),
)
def test_a_journal_this_installation_sealed_is_still_confined(
    tmp_path: Path,
    entries: list[Any],
    created: list[str],
    removed: list[str],
    staged: list[str],
    kind: str,
    direction: Any,
) -> None:
    """Our own journals (well shaped, sealed with the real key) naming any path: recovery never
    leaves the root, whatever the paths (``../``, absolute, through a link, into state)."""
    with tempfile.TemporaryDirectory(dir=tmp_path) as case:
        base = Path(case)
        sentinel = Sentinel(base)
        root = base / "root"
        (root / "sub").mkdir(parents=True)
        (root / "f.txt").write_bytes(b"f\n")
        (root / "sub" / "g.txt").write_bytes(b"g\n")
        os.symlink(sentinel.root, root / "out")
        journal = txn.journal(root) if kind == "tree" else store.edit_journal(root)
        layout = {"staged": staged, "old": ["0", "1"], "new_is_link": False, "extra": None, "journal_is": "file"}
        body = {"version": 1, "entries": entries, "created_dirs": created, "removed_dirs": removed}
        _lay_out(root, journal, body, "ours", layout, sentinel)
        beside = sorted(os.listdir(base))
        started = time.monotonic()
        try:
            if kind == "tree":
                txn.recover(root, direction)
            else:
                store.recover_edit(root, direction)
        except PatchsetError as exc:
            assert exc.render(), "a domain error without a message"
        elapsed = time.monotonic() - started
        sentinel.assert_untouched()
        assert sorted(os.listdir(base)) == beside, "recovery created something beside the root"
        assert (root / "out").is_symlink() and os.readlink(root / "out") == str(sentinel.root)
        assert elapsed < CASE_DEADLINE_S, f"recovery took {elapsed:.1f} s"

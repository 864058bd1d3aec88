"""Fuzz tier: recorded state in a cloned ledger (security issue #23).

Each case lays out a fresh copy of a small ledger with one piece of recorded state under
``.patchset/`` as a clone could carry it: the rebase journal ``rebase/commit.json`` (with or
without the backup directory it names), a stopped session ``rebase/state.json`` (with its
``backup/``: a manifest and a tar whose members may be hostile), or the gate's
``gate-state.json``. The JSON is drawn (paths of every kind — ``../``, absolute paths into the
sentinel, ``.git``, patchset's own state —, digests that are paths, wrong types, deep nesting) or
is raw bytes; it carries no seal, a forged one, another kind's seal or this installation's real
seal (so the checks of our *own* state run too); sometimes ``.patchset``, ``.patchset/rebase`` or
the file itself is a link into the sentinel. Then one command's entry point runs on it:
``rebase --continue``, ``--skip`` or ``--abort``, the start of a rebase (``in_progress``), the
interruption report ``validate`` and ``status`` print, or the gate's ``load_state``.

Every case must leave the sentinel beside the ledger untouched and create nothing beside the
ledger, leave state that is not sealed by this installation byte for byte as it was, finish
within ``CASE_DEADLINE_S``, and raise nothing but patchset's domain exceptions.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from patchset.ci.state import KIND as GATE_KIND
from patchset.ci.state import load_state
from patchset.commands.interrupted import interruptions
from patchset.errors import PatchsetError
from patchset.rebase import state as rstate
from patchset.rebase.session import RebaseRun, abort, continue_rebase, rebase, skip
from patchset.sealed import write_sealed
from tests.support.fuzz import CASE_DEADLINE_S, Sentinel, examples, snapshot
from tests.support.rebase_demo import build

pytestmark = pytest.mark.fuzz

SENTINEL = "\x00SENTINEL\x00"  # replaced by the sentinel's absolute path in each case
HEX = "0123456789abcdef"

PATHS = st.one_of(
    st.sampled_from(
        [
            "../sentinel/victim.txt",
            "../sentinel",
            "sub/../../sentinel/etc/passwd",
            SENTINEL + "/victim.txt",
            SENTINEL,
            ".patchset/rebase/state.json",
            ".patchset-txn/journal.json",
            ".git/config",
            "",
            ".",
            "a\x00b",
            "a\\..\\x",
            "patches.toml",
            "patchset/series/demo/p-clean.patch",
            "new.txt",
            ".patchset/rebase-backups/bk",
            ".patchset/rebase-backups/../../../sentinel",
            ".patchset/rebase-backups/bk/deeper",
        ]
    ),
    st.text(alphabet="ab./\\-_\x00\n", max_size=10),
)
DIGESTS = st.one_of(
    st.none(), st.text(alphabet=HEX, min_size=64, max_size=64), PATHS, st.sampled_from(["/dev/zero", "../" * 6])
)
JUNK = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=True), st.text(max_size=4), st.just([])
)
B64 = st.one_of(st.none(), st.binary(max_size=40).map(lambda b: base64.b64encode(b).decode()), st.text(max_size=8))


def _maybe(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(good, good, good, bad)


LEDGER_FILES = st.sampled_from(["patches.toml", "patches.lock", "new.txt", "patchset/series/demo/p-clean.patch"])
COMMIT = st.fixed_dictionaries(
    {
        "version": _maybe(st.just(1), JUNK),
        "backup": _maybe(st.sampled_from([".patchset/rebase-backups/bk"]), st.one_of(PATHS, JUNK)),
        "files": _maybe(st.dictionaries(_maybe(LEDGER_FILES, PATHS), B64, max_size=4), JUNK),
    }
)
GATE = st.fixed_dictionaries(
    {
        "version": _maybe(st.just(1), JUNK),
        "targets": _maybe(
            st.dictionaries(
                st.one_of(st.just("demo"), st.text(max_size=5)),
                _maybe(
                    st.fixed_dictionaries(
                        {
                            "upstream": _maybe(st.text(max_size=8), JUNK),
                            "judged": _maybe(st.text(alphabet=HEX, min_size=7, max_size=40), st.one_of(PATHS, JUNK)),
                            "judged_label": st.one_of(st.text(max_size=8), JUNK),
                            "verdict": st.sampled_from(["green", "red", "x"]),
                            "ledger_digest": st.text(alphabet=HEX, max_size=64),
                            "tags": _maybe(st.lists(st.text(max_size=4), max_size=3), JUNK),
                        },
                        optional={"last_clean": st.one_of(PATHS, st.text(alphabet=HEX, min_size=7, max_size=7))},
                    ),
                    JUNK,
                ),
                max_size=3,
            ),
            JUNK,
        ),
    }
)
REPLAY = st.fixed_dictionaries(
    {
        "path": _maybe(PATHS, JUNK),
        "new_path": _maybe(st.one_of(st.none(), PATHS), JUNK),
        "how": st.sampled_from(["conflict", "broken", "clean", 3]),
        "result": DIGESTS,
        "mode": JUNK,
        "ours": DIGESTS,
        "moved_from": st.one_of(st.none(), PATHS),
        "delete_path": st.one_of(st.none(), PATHS),
        "message": st.text(max_size=4),
    }
)
SESSION_CHANGE = st.fixed_dictionaries(
    {},
    optional={
        "version": JUNK,
        "target": st.one_of(st.just("demo"), PATHS, JUNK),
        "index": st.one_of(st.integers(-2, 2), JUNK),
        "work": st.one_of(st.lists(PATHS, max_size=3), JUNK),
        "replay": st.one_of(st.lists(REPLAY, max_size=2), JUNK),
        "new_bodies": st.one_of(st.dictionaries(PATHS, DIGESTS, max_size=2), JUNK),
        "old_tree": st.one_of(st.dictionaries(PATHS, st.lists(st.one_of(DIGESTS, JUNK), max_size=3)), JUNK),
        "location": st.one_of(
            st.fixed_dictionaries({"kind": st.sampled_from(["repo", "dirs", "releases", "x"])}),
            JUNK,
        ),
        "results": st.one_of(
            st.just([{"id": "p-clean", "verdict": "conflict", "files": []}]),
            st.just(
                [{"id": "p-conflict", "verdict": "carried", "files": [{"path": "../x", "new_path": None, "how": "x"}]}]
            ),
            st.lists(st.dictionaries(st.sampled_from(["id", "verdict", "files", "x"]), JUNK, max_size=3), max_size=2),
            JUNK,
        ),
        "pr_merges": st.one_of(st.dictionaries(st.text(max_size=3), JUNK, max_size=2), JUNK),
    },
)
# most cases change one or two fields of the real session (deeper paths), some change many
SESSION_CHANGES = st.one_of(
    st.just({}),
    SESSION_CHANGE.filter(lambda d: len(d) <= 2),
    SESSION_CHANGE.filter(lambda d: len(d) <= 2),
    SESSION_CHANGE,
)
MEMBERS = st.lists(st.tuples(PATHS, st.binary(max_size=20)), max_size=3)
CONTENT = st.one_of(
    st.just("json"),
    st.just("json"),
    st.just("json"),
    st.sampled_from([b"", b"{", b"[]", b"null", b"\xff\xfe", b"[" * 5000, b'{"owner": "\xc3\xa9"}']),
)


def _tar(members: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name or "x")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _fill(value: Any, sentinel: Path) -> Any:
    if isinstance(value, str):
        return value.replace(SENTINEL, str(sentinel))
    if isinstance(value, list):
        return [_fill(v, sentinel) for v in value]
    if isinstance(value, dict):
        return {_fill(k, sentinel): _fill(v, sentinel) for k, v in value.items()}
    return value


def _lay(path: Path, kind: str, doc: dict[str, Any], content: Any, seal: str, layout: str, sentinel: Path) -> None:
    """The state file as drawn: a link into the sentinel, raw bytes, or JSON with the drawn seal."""
    if layout == "file-link":
        os.symlink(sentinel / "victim.txt", path)
    elif content != "json":
        path.write_bytes(content)
    elif seal in ("ours", "other-kind"):
        write_sealed(path, kind if seal == "ours" else "some other state", doc, durable=False)
    else:
        body = {**doc, "owner": "ab" * 32} if seal == "forged" else doc
        path.write_text(json.dumps(body))


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> tuple[Path, dict[str, Any]]:
    """A two-patch ledger (and its upstream) with a real interactive rebase stopped at the
    conflicting patch (state.json, blobs, work files, backup), which each case copies; and the
    session that rebase recorded."""
    demo = build(tmp_path_factory.mktemp("fuzz-state-template"), ["p-clean", "p-conflict"])
    report = rebase(RebaseRun(demo.ledger, "v2", interactive=True))
    assert report.status == "stopped"
    return demo.root, rstate.State(demo.root).load()


@settings(
    max_examples=examples(),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    which=st.sampled_from(["commit", "stopped", "gate"]),
    commit=COMMIT,
    session=SESSION_CHANGES,
    gate=GATE,
    content=CONTENT,
    seal=st.sampled_from(["none", "forged", "other-kind", "ours", "ours"]),
    layout=st.sampled_from(["plain", "plain", "plain", "dot-link", "state-link", "file-link"]),
    with_backup=st.booleans(),
    members=MEMBERS,
    manifest=st.dictionaries(_maybe(LEDGER_FILES, PATHS), DIGESTS, max_size=3),
    op=st.sampled_from(["continue", "skip", "abort", "start", "interruptions", "gate"]),
)
def test_recorded_state_in_a_cloned_ledger(
    template: tuple[Path, dict[str, Any]],
    tmp_path_factory,
    which: str,
    commit: dict[str, Any],
    session: dict[str, Any],
    gate: dict[str, Any],
    content: Any,
    seal: str,
    layout: str,
    with_backup: bool,
    members: list[tuple[str, bytes]],
    manifest: dict[str, Any],
    op: str,
) -> None:
    case = Path(tempfile.mkdtemp(dir=tmp_path_factory.getbasetemp()))
    sentinel = Sentinel(case)
    root = case / "ledger"
    shutil.copytree(template[0], root, symlinks=True)
    dot = root / ".patchset"
    if which != "stopped" or layout in ("dot-link", "state-link"):
        shutil.rmtree(dot / "rebase")
    if layout == "dot-link":
        shutil.rmtree(dot)
        os.symlink(sentinel.root, dot)
    elif layout == "state-link":
        os.symlink(sentinel.root, dot / "rebase")

    name, kind, doc = {
        "commit": ("rebase/commit.json", rstate.KIND_COMMIT, commit),
        "stopped": ("rebase/state.json", rstate.KIND_STATE, {**template[1], **session}),
        "gate": ("gate-state.json", GATE_KIND, gate),
    }[which]
    doc = _fill(doc, sentinel.root)
    path = dot / name
    if not path.parent.is_symlink() and not dot.is_symlink():  # nothing is laid through a link
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        _lay(path, kind, doc, content, seal, layout, sentinel.root)
        if with_backup and which != "gate":
            bk = dot / "rebase" / "backup" if which == "stopped" else dot / "rebase-backups" / "bk"
            bk.mkdir(parents=True, exist_ok=True)
            (bk / "previous.tar").write_bytes(_tar(members))
            body = {"version": 1, "files": _fill(manifest, sentinel.root)}
            if seal == "ours":
                write_sealed(bk / "manifest.json", rstate.KIND_MANIFEST, body, durable=False)
            else:
                (bk / "manifest.json").write_text(json.dumps(body))
    sentinel.before = snapshot(sentinel.root)
    before = snapshot(dot) if dot.is_dir() and not dot.is_symlink() else {}

    start = time.monotonic()
    try:
        if op == "continue":
            continue_rebase(root / "patches.toml")
        elif op == "skip":
            skip(root / "patches.toml")
        elif op == "abort":
            abort(root / "patches.toml")
        elif op == "start":
            st_ = rstate.State(root)
            if st_.in_progress():
                st_.refuse_if_in_progress()
        elif op == "interruptions":
            assert all(isinstance(found.message, str) for found in interruptions(root))
        else:
            states = load_state(dot / "gate-state.json")
            for j in states.values():
                j.same_question("x", "y", "z", [])
    except PatchsetError:
        pass
    took = time.monotonic() - start
    assert took < CASE_DEADLINE_S, f"{op} took {took:.1f} s"
    sentinel.assert_untouched()
    assert sorted(os.listdir(case)) == ["ledger", "sentinel"], os.listdir(case)
    if seal != "ours" and before:
        assert snapshot(dot) == before, "foreign state was changed"
    shutil.rmtree(case, ignore_errors=True)

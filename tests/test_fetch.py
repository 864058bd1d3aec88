"""``patchset fetch``: pinned bodies from the real local GitHub-shaped server (tests.support.fakehub),
through the real client (PyGithub), filtered, stored atomically, checked for upstream drift."""

from __future__ import annotations

import functools
import http.server
import io
import re
import subprocess
import threading
from pathlib import Path

import pytest

from patchset.commands.fetch import (
    CHANGED,
    FAILED,
    GONE,
    LOCAL,
    MISSING,
    MOVED_SAME,
    PRESENT,
    REFUSED,
    STORED,
    UNCHANGED,
    check,
    fetch,
    update,
)
from patchset.commands.table import Term
from patchset.engine.results import SeriesItem
from patchset.engine.tree import apply_series
from patchset.errors import LedgerError
from patchset.ledger.lock import sha256_bytes
from patchset.ledger.store import load_ledger
from patchset.patchfmt.filters import filter_diff, interdiff, match_glob, patch_id, split_sections
from patchset.tracker.github import GitHubClient
from patchset.tracker.views import render_check, render_fetch
from tests.support.fakehub.server import FakeHub
from tests.support.fetch_world import OTHER, REPO, TOKEN, World, base_tree, build_world, hub_data, write_ledger
from tests.support.repo import tree_digest

ALL = ["u101-core3", "u102-util6", "c-extra", "04-core-17"]


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    return build_world(tmp_path_factory.mktemp("world"))


@pytest.fixture()
def hub(world, serve_hub):
    return serve_hub(hub_data(world))


@pytest.fixture()
def ledger(tmp_path, world) -> Path:
    return write_ledger(tmp_path / "build", world)


def client(hub: FakeHub, tmp_path: Path, **kw) -> GitHubClient:
    kw.setdefault("token", TOKEN)
    kw.setdefault("retries", 0)
    return GitHubClient(base_url=hub.base_url, cache_dir=tmp_path / "cache", **kw)


def shown(render, report) -> str:
    buf = io.StringIO()
    render(Term(buf, tty=True, width=200, color=False), report)
    return buf.getvalue()


def rows(report) -> dict:
    return {r.id: r for r in report.rows}


# ---- the "done when": a fresh ledger, fetch --all, apply ---------------------------------------
def test_fetch_all_brings_every_body_and_the_series_applies(hub, ledger, world, tmp_path):
    rep = fetch(ledger, all_=True, client=client(hub, tmp_path))
    assert rep.written and rep.ok and rep.exit_code == 0, rep.to_json()
    by = rows(rep)
    assert {r.status for r in rep.rows} == {STORED}
    led = load_ledger(ledger)
    for pid in ALL:
        body = led.body_file(led.get(pid)).read_bytes()
        assert led.lock.bodies[pid] == sha256_bytes(body) == by[pid].sha256
    # heads: the PR heads as the server reports them, the commit's sha; none for a file at a branch
    assert led.lock.heads["u101-core3"] == hub.state.pull(REPO, 101).head_sha
    assert led.lock.heads["u102-util6"] == hub.state.pull(REPO, 102).head_sha
    assert led.lock.heads["c-extra"] == world.commit_sha
    assert "04-core-17" not in led.lock.heads
    assert by["u102-util6"].via == "files"  # 406 on the diff media type: rebuilt from the file list
    assert hub.count("GET /repos/{owner}/{repo}/pulls/{number}", status=406) == 1
    # the include filter dropped the PR's test hunk
    assert by["u101-core3"].dropped == ["tests/test_core.py"] and by["u101-core3"].kept == ["demo/core.py"]
    assert b"tests/test_core.py" not in led.body_file(led.get("u101-core3")).read_bytes()

    tree = base_tree(world, tmp_path / "tree")
    items = [SeriesItem(p.id, led.body_file(p).read_bytes(), 1) for p in led.series("demo")]
    res = apply_series(tree, items)
    assert res.ok and res.committed, res.to_json()
    for path, text in world.final.items():
        assert (tree / path).read_text() == text, path
    # and git agrees on a fresh copy of the base
    tree2 = base_tree(world, tmp_path / "tree2")
    for p in led.series("demo"):
        subprocess.run(["git", "apply", "--check", str(led.body_file(p))], cwd=tree2, check=True)
        subprocess.run(["git", "apply", str(led.body_file(p))], cwd=tree2, check=True)


def test_cli_fetch_all_then_apply(hub, ledger, world, tmp_path, run, monkeypatch):
    """The same "done when" through the command line: `patchset fetch --all` then `patchset apply`."""
    monkeypatch.setenv("PATCHSET_GITHUB_API", hub.base_url)
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    r = run("fetch", "--all", "--json", cwd=ledger.parent)
    assert r.code == 0, r
    assert TOKEN not in r.stdout + r.stderr
    tree = base_tree(world, tmp_path / "tree")
    r = run("apply", "--json", "--tree", tree, "--update-lock", cwd=ledger.parent)
    assert r.code == 0, r
    for path, text in world.final.items():
        assert (tree / path).read_text() == text, path
    r = run("fetch", "--check", "--json", cwd=ledger.parent)
    assert r.code == 0, r


def test_second_fetch_downloads_nothing(hub, ledger, tmp_path):
    c = client(hub, tmp_path)
    assert fetch(ledger, all_=True, client=c).written
    before, files = hub.count(), tree_digest(ledger.parent)
    rep = fetch(ledger, all_=True, client=c)
    assert {r.status for r in rep.rows} == {PRESENT} and not rep.written
    assert hub.count() == before
    assert tree_digest(ledger.parent) == files
    # offline: what is stored is enough
    rep = fetch(ledger, all_=True, client=c, offline=True)
    assert {r.status for r in rep.rows} == {PRESENT} and hub.count() == before


def test_offline_with_nothing_stored_touches_nothing(hub, ledger, tmp_path):
    before = tree_digest(ledger.parent)
    rep = fetch(ledger, all_=True, client=client(hub, tmp_path, offline=True), offline=True)
    assert {r.status for r in rep.rows} == {MISSING} and rep.exit_code == 1
    assert hub.count() == 0 and tree_digest(ledger.parent) == before


# ---- failure modes: nothing stored, the lock untouched, the failing source named ----------------
FAULTS = {  # fault -> (injection, the patches it must fail, the row error kind)
    "404": (dict(path="/repos/acme/demo/pulls/101", status=404), ["u101-core3"], "not_found"),
    "401": (dict(path="/api/graphql", status=401), ["u101-core3", "u102-util6"], "auth"),
    "rate-limit": (dict(path="/repos/acme/patches/contents/*", secondary=True), ["04-core-17"], "rate_limit"),
    "5xx": (dict(path="/repos/acme/demo/commits/*", status=502), ["c-extra"], "server"),
    "malformed": (dict(path="/repos/acme/demo/pulls/102/files", malformed=True), ["u102-util6"], "malformed"),
    "timeout": (dict(path="/repos/acme/patches/contents/*", delay=2.5), ["04-core-17"], "timeout"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_failure_writes_nothing(hub, ledger, tmp_path, fault):
    injection, ids, kind = FAULTS[fault]
    hub.inject(**injection)
    before = tree_digest(ledger.parent)
    rep = fetch(ledger, all_=True, client=client(hub, tmp_path, timeout=1))
    assert not rep.written and rep.exit_code == 2
    failed = [r for r in rep.rows if r.status == FAILED]
    assert [r.id for r in failed] == ids
    assert rep.unreachable() == [f"{r.id}: {r.source}" for r in failed]
    assert {r.error["error"] for r in failed} == {kind}
    text = shown(render_fetch, rep)
    assert "nothing was written" in text and f"could not reach {failed[0].id}" in text
    # the sources that did download say so, and that they were not written
    assert all("not written" in r.message for r in rep.rows if r.status == STORED)
    assert tree_digest(ledger.parent) == before  # no body, no lock


def test_a_failure_keeps_stored_bodies_and_lock(hub, ledger, tmp_path):
    c = client(hub, tmp_path)
    assert fetch(ledger, all_=True, client=c).written
    before = tree_digest(ledger.parent)
    hub.force_push(REPO, 101, hub.state.pull(REPO, 101).diff.replace("30  # fixed", "31  # fixed"))
    hub.inject("/repos/acme/demo/pulls/101", status=500)
    rep = update(ledger, "u101-core3", client=c)
    assert rows(rep)["u101-core3"].status == FAILED and not rep.written
    assert tree_digest(ledger.parent) == before


def test_pinned_hash_refuses_a_different_body(hub, ledger, world, tmp_path):
    text = ledger.read_text().replace('kind = "commit"', 'kind = "commit"\nsha256 = "' + "0" * 64 + '"')
    ledger.write_text(text)
    before = tree_digest(ledger.parent)
    rep = fetch(ledger, ["c-extra"], client=client(hub, tmp_path))
    r = rows(rep)["c-extra"]
    assert r.status == REFUSED and "source.sha256" in r.message and not rep.written and rep.exit_code == 1
    assert tree_digest(ledger.parent) == before
    # with the right hash it is taken
    good = sha256_bytes(world.diffs["commit"].encode())
    ledger.write_text(text.replace("0" * 64, good))
    assert fetch(ledger, ["c-extra"], client=client(hub, tmp_path)).written


def test_a_local_edit_is_not_overwritten(hub, ledger, tmp_path):
    c = client(hub, tmp_path)
    fetch(ledger, all_=True, client=c)
    body = ledger.parent / "patchset/series/demo/u101-core3.patch"
    body.write_bytes(body.read_bytes() + b"\n")
    before = tree_digest(ledger.parent)
    lock_before = (ledger.parent / "patches.lock").read_bytes()
    rep = fetch(ledger, ["u101-core3"], client=c)
    assert rows(rep)["u101-core3"].status == REFUSED and "changed locally" in rows(rep)["u101-core3"].message
    assert tree_digest(ledger.parent) == before and (ledger.parent / "patches.lock").read_bytes() == lock_before


# ---- force-push, --check, --update ------------------------------------------------------------
def _shift_context(diff: str) -> str:
    """The same change with its hunk numbers moved, as after a rebase onto a moved base."""
    return re.sub(
        r"^@@ -(\d+),(\d+) \+(\d+),(\d+) @@",
        lambda m: f"@@ -{int(m[1]) + 4},{m[2]} +{int(m[3]) + 4},{m[4]} @@",
        diff,
        flags=re.M,
    )


def test_check_classifies_every_drift(hub, ledger, world, tmp_path):
    c = client(hub, tmp_path)
    assert fetch(ledger, all_=True, client=c).written
    before = tree_digest(ledger.parent)
    rep = check(ledger, client=c)
    assert {r.status for r in rep.rows} == {UNCHANGED} and rep.exit_code == 0

    d101 = world.diffs["p101"]
    moved = _shift_context(d101)
    assert moved != d101
    hub.force_push(REPO, 101, moved)  # rebased: new head, same change
    hub.force_push(REPO, 102, world.diffs["p102"].replace("util_6b = 61", "util_6b = 62"))  # content changed
    del hub.state.repo(REPO).commits[world.commit_sha]  # the pinned commit is gone upstream
    hub.state.set_file(OTHER, "main", "series/04-core-17.patch", world.diffs["file"])  # same bytes
    rep = check(ledger, client=c)
    by = rows(rep)
    assert by["u101-core3"].status == MOVED_SAME, by["u101-core3"]
    assert by["u101-core3"].current == hub.state.pull(REPO, 101).head_sha != by["u101-core3"].pinned
    assert by["u102-util6"].status == CHANGED
    assert "-+util_6b = 61" in by["u102-util6"].interdiff and "++util_6b = 62" in by["u102-util6"].interdiff
    assert by["c-extra"].status == GONE
    assert by["04-core-17"].status == UNCHANGED
    assert rep.exit_code == 1
    assert tree_digest(ledger.parent) == before  # check never writes
    text = shown(render_check, rep)
    assert "interdiff of u102-util6" in text and "++util_6b = 62" in text and "gone" in text

    # the repository file changed: its content changed
    hub.state.set_file(OTHER, "main", "series/04-core-17.patch", world.diffs["file"].replace("170", "171"))
    assert rows(check(ledger, ["04-core-17"], client=c))["04-core-17"].status == CHANGED

    # --update takes the new revision deliberately
    rep = update(ledger, "u102-util6", client=c)
    assert rep.written
    led = load_ledger(ledger)
    assert led.lock.heads["u102-util6"] == hub.state.pull(REPO, 102).head_sha
    assert b"util_6b = 62" in led.body_file(led.get("u102-util6")).read_bytes()
    assert rows(check(ledger, ["u102-util6"], client=c))["u102-util6"].status == UNCHANGED


def test_a_pin_is_honoured_until_update(hub, ledger, world, tmp_path):
    c = client(hub, tmp_path)
    head = hub.state.pull(REPO, 101).head_sha
    ledger.write_text(ledger.read_text().replace('ref = "acme/demo#101"', f'ref = "acme/demo#101"\npin = "{head}"'))
    assert fetch(ledger, ["u101-core3"], client=c).written
    new_head = hub.force_push(REPO, 101, world.diffs["p101"].replace("30  # fixed", "33  # fixed"))
    # the stored body still matches lock and pin: nothing to do
    assert rows(fetch(ledger, ["u101-core3"], client=c))["u101-core3"].status == PRESENT
    # a fresh clone (no body) is refused: the pinned revision is no longer what the PR serves
    (ledger.parent / "patchset/series/demo/u101-core3.patch").unlink()
    before = tree_digest(ledger.parent)
    r = rows(fetch(ledger, ["u101-core3"], client=c))["u101-core3"]
    assert r.status == REFUSED and "moved from the pinned" in r.message
    assert tree_digest(ledger.parent) == before
    # update takes it and moves the pin in the ledger (comments kept)
    assert update(ledger, "u101-core3", client=c).written
    led = load_ledger(ledger)
    assert led.get("u101-core3").source.pin == new_head == led.lock.heads["u101-core3"]
    assert "# an example ledger for the fetch tests" in ledger.read_text()
    assert led.get("u101-core3").status.note == "a human note that must survive"


def test_gone_pull_request(hub, ledger, tmp_path):
    c = client(hub, tmp_path)
    fetch(ledger, all_=True, client=c)
    del hub.state.repo(REPO).pulls[101]
    r = rows(check(ledger, ["u101-core3"], client=c))["u101-core3"]
    assert r.status == GONE and "not_found" in r.message


# ---- other source kinds and the ledger's own errors ---------------------------------------------
def test_url_source_from_a_local_server(ledger, world, tmp_path):
    served = tmp_path / "www"
    served.mkdir()
    (served / "extra.diff").write_text(world.diffs["commit"])
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *a: None  # type: ignore[method-assign]
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}/extra.diff"
        ledger.write_text(
            ledger.read_text().replace(
                'kind = "commit"\nref = "acme/demo@' + world.commit_sha + '"', f'kind = "url"\nref = "{url}"'
            )
        )
        rep = fetch(ledger, ["c-extra"])
        assert rows(rep)["c-extra"].status == STORED and rep.written
        assert load_ledger(ledger).body_file(load_ledger(ledger).get("c-extra")).read_text() == world.diffs["commit"]
        (served / "extra.diff").unlink()
        r = rows(check(ledger, ["c-extra"]))["c-extra"]
        assert r.status == GONE
    finally:
        srv.shutdown()
        srv.server_close()


def test_local_and_malformed_sources(ledger, world):
    text = ledger.read_text()
    ledger.write_text(text + '\n[[patch]]\nid = "mine"\ntarget = "demo"\ntitle = "t"\norigin = "ours"\n')
    assert rows(fetch(ledger, ["mine"]))["mine"].status == LOCAL
    ledger.write_text(text.replace('ref = "acme/patches@main:series/04-core-17.patch"', 'ref = "acme/patches"'))
    with pytest.raises(LedgerError) as e:
        fetch(ledger, ["04-core-17"])
    assert "OWNER/REPO@REF:PATH" in str(e.value) and "patches.toml:" in str(e.value)


def test_a_download_that_is_not_a_patch_is_refused(hub, ledger, tmp_path):
    hub.state.set_file(OTHER, "main", "series/04-core-17.patch", "this is not a patch\n")
    before = tree_digest(ledger.parent)
    r = rows(fetch(ledger, ["04-core-17"], client=client(hub, tmp_path)))["04-core-17"]
    assert r.status == REFUSED and "no diff" in r.message
    hub.state.set_file(
        OTHER, "main", "series/04-core-17.patch", "--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n-b\n"
    )  # truncated hunk
    r = rows(fetch(ledger, ["04-core-17"], client=client(hub, tmp_path)))["04-core-17"]
    assert r.status == REFUSED and "not a patch" in r.message
    assert tree_digest(ledger.parent) == before


# ---- filters, patch ids, interdiff (pure) ---------------------------------------------------------
TRICKY = (
    b"From 1111111111111111111111111111111111111111 Mon Sep 17 00:00:00 2001\nSubject: x\n\nmsg\n---\n"
    b"diff --git a/vllm/a.py b/vllm/a.py\nindex 1..2 100644\n--- a/vllm/a.py\n+++ b/vllm/a.py\n"
    b"@@ -1,3 +1,2 @@\n ctx\n--- not a header\n ctx2\n"
    b"diff --git a/tests/t.py b/tests/t.py\nnew file mode 100644\n--- /dev/null\n+++ b/tests/t.py\n"
    b"@@ -0,0 +1 @@\n+x\r\n"
    b"diff --git a/vllm/b.py b/vllm/c.py\nsimilarity index 100%\nrename from vllm/b.py\nrename to vllm/c.py\n"
    b"-- \n2.39.5\n\n"
)


def test_split_is_byte_exact_and_counts_hunks():
    secs = split_sections(TRICKY)
    assert b"".join(s.data for s in secs) == TRICKY
    files = [s for s in secs if s.kind == "file"]
    assert [s.paths for s in files] == [["vllm/a.py"], ["tests/t.py"], ["vllm/b.py", "vllm/c.py"]]
    assert b"--- not a header\n" in files[0].data  # a removed line, not a new file header


def test_filter_keeps_text_and_selected_files_exactly():
    res = filter_diff(TRICKY, ["vllm/**"])
    assert res.kept == ["vllm/a.py", "vllm/b.py", "vllm/c.py"] and res.dropped == ["tests/t.py"]
    assert res.data == TRICKY.replace(
        b"diff --git a/tests/t.py b/tests/t.py\nnew file mode 100644\n--- /dev/null\n+++ b/tests/t.py\n"
        b"@@ -0,0 +1 @@\n+x\r\n",
        b"",
    )
    assert filter_diff(TRICKY, [], ["**/t.py", "c.py"]).kept == ["vllm/a.py"]
    assert filter_diff(TRICKY).data == TRICKY


@pytest.mark.parametrize(
    "path,glob,hit",
    [
        ("vllm/a/b.py", "vllm/**", True),
        ("tests/x.py", "vllm/**", False),
        ("vllm/tests/test_x.py", "**/test_*.py", True),
        ("a/b/test_x.py", "test_*.py", True),
        ("tests/a.py", "tests/*", True),
        ("tests/a/b.py", "tests/*", False),
        ("include/x.cuh", "include/", True),
        ("src/x.cc", "*.[ch]", False),
        ("src/x.h", "*.[ch]", True),
    ],
)
def test_globs(path, glob, hit):
    assert match_glob(path, glob) is hit


def test_patch_id_ignores_position_and_whitespace_but_not_content(world):
    d = world.diffs["p101"].encode()
    assert patch_id(d) == patch_id(_shift_context(world.diffs["p101"]).encode())
    assert patch_id(d) == patch_id(d.replace(b"+core_3 = 30  # fixed", b"+core_3  =  30 # fixed"))
    assert patch_id(d) != patch_id(d.replace(b"+core_3 = 30", b"+core_3 = 31"))
    assert patch_id(b"no diff here\n") is None
    assert interdiff(d, _shift_context(world.diffs["p101"]).encode()) == ""
    changed = interdiff(d, d.replace(b"+core_3 = 30", b"+core_3 = 31"))
    assert "-+core_3 = 30" in changed and "++core_3 = 31" in changed

"""``patchset status``: upstream state, drift classes and actions, against the real local
GitHub-shaped server (tests.support.fakehub) through the real client; offline-first behaviour; every
failure mode is a marked row, never a crash; the real ledger renders with no network."""

from __future__ import annotations

import datetime as dt
import io
import json
import re
import shutil
from pathlib import Path

import pytest

from patchset.commands.fetch import fetch
from patchset.commands.table import Term
from patchset.errors import InputError
from patchset.ledger.store import load_ledger
from patchset.tracker.github import GitHubClient
from patchset.tracker.html import to_html
from patchset.tracker.status import make_client, status
from patchset.tracker.views import render_status, to_markdown
from patchset.upstream.refs import PRRef
from patchset.upstream.repo import GitRepo
from tests.support.fakehub.server import FakeHub
from tests.support.fakehub.world import small_diff
from tests.support.repo import REPO_ROOT, commit_files, git, tree_digest

TOKEN = "ghp_statusWorldToken00000000000000000000"
REPO = "acme/demo"

# number -> (patch id, file)
PRS = {
    201: ("u201-open", "demo/a.py"),
    202: ("u202-revised", "demo/b.py"),
    203: ("u203-rebased", "demo/c.py"),
    204: ("u204-merged", "demo/d.py"),
    205: ("u205-merged-changed", "demo/e.py"),
    206: ("u206-closed", "demo/f.py"),
    207: ("u207-in-base", "demo/g.py"),
}


def shifted(diff: str, by: int = 7) -> str:
    return re.sub(
        r"^@@ -(\d+),(\d+) \+(\d+),(\d+) @@",
        lambda m: f"@@ -{int(m[1]) + by},{m[2]} +{int(m[3]) + by},{m[4]} @@",
        diff,
        flags=re.M,
    )


def _history(tmp: Path) -> tuple[GitRepo, dict[str, str]]:
    """c0 <- m207 <- base (v1.0.0) <- m204 <- c4 (v1.1.0, main)."""
    root = tmp / "history"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    shas = {}
    for name in ("c0", "m207", "base", "m204", "c4"):
        shas[name] = commit_files(root, name, {"f.txt": name + "\n"})
        if name == "base":
            git(root, "tag", "v1.0.0")
    git(root, "tag", "v1.1.0")
    return GitRepo(root), shas


def _ledger_text(base: str) -> str:
    out = [
        f"""# status test ledger
schema = 1
title = "status demo"

[targets.demo]
upstream = "https://example.invalid/acme/demo.git"
github = "acme/demo"
base = "{base}"
branch = "main"
"""
    ]
    for n, (pid, _) in PRS.items():
        out.append(f"""
[[patch]]
id = "{pid}"
target = "demo"
title = "PR {n}"
origin = "upstream"
authors = ["alice"]
[patch.upstream]
prs = ["acme/demo#{n}"]
{'issues = ["acme/demo#300"]' if n == 201 else ""}
[patch.source]
kind = "pr"
ref = "acme/demo#{n}"
include = ["demo/**"]
""")
        if n == 201:
            out.append('[patch.status]\npr_state = "open"\nrecorded = 2026-09-26\nnote = "keep me"\n')
    out.append("""
[[patch]]
id = "ours-1"
target = "demo"
title = "ours"
origin = "ours"

[[patch]]
id = "held-1"
target = "demo"
title = "held"
origin = "ours"
state = "held"
reason = "fails the drift check (0.237 against a bar of 0.178)"
[patch.upstream]
based_on = ["acme/demo#201"]

[[patch]]
id = "dropped-1"
target = "demo"
title = "dropped"
origin = "upstream"
state = "dropped"
reason = "already in the base"
[patch.upstream]
prs = ["acme/demo#208"]
""")
    return "".join(out)


def _hub_data() -> dict:
    pulls = {
        str(n): {
            "title": f"Change {f}",
            "author": "alice",
            "diff": small_diff(f, str(n), 2),
            "review_decision": "APPROVED" if n == 201 else None,
            "ci": "SUCCESS" if n == 201 else None,
        }
        for n, (_, f) in PRS.items()
    }
    pulls["208"] = {
        "title": "old fix",
        "author": "bob",
        "diff": small_diff("demo/z.py", "208"),
        "merged_at": "2026-09-20T07:00:00Z",
    }
    return {"tokens": [TOKEN], "repos": {REPO: {"pulls": pulls, "issues": {"300": {"title": "a bug"}}}}}


@pytest.fixture()
def world(tmp_path):
    """A vendored ledger (bodies fetched from the hub), then upstream moves on in every way."""
    hist, shas = _history(tmp_path)
    led = tmp_path / "build" / "patches.toml"
    led.parent.mkdir()
    led.write_text(_ledger_text(shas["base"]))
    with FakeHub(_hub_data()) as hub:
        c = client(hub, tmp_path)
        assert fetch(led, all_=True, client=c).written
        s = hub.state
        s.force_push(REPO, 202, small_diff("demo/b.py", "202-v2", 2))
        s.force_push(REPO, 203, shifted(small_diff("demo/c.py", "203", 2)))
        s.merge(REPO, 204, merge_commit_sha=shas["m204"], merged_at="2026-10-01T10:00:00Z")
        s.force_push(REPO, 205, small_diff("demo/e.py", "205-v2", 2))
        s.merge(REPO, 205, merged_at="2026-10-02T10:00:00Z")
        s.close(REPO, 206)
        s.force_push(REPO, 207, shifted(small_diff("demo/g.py", "207", 2)))
        s.merge(REPO, 207, merge_commit_sha=shas["m207"], merged_at="2026-09-01T10:00:00Z")
        hub.reset_counts()
        yield {"hub": hub, "ledger": led, "history": hist, "shas": shas, "tmp": tmp_path}


def client(hub: FakeHub, tmp: Path, cache: str = "cache", **kw) -> GitHubClient:
    kw.setdefault("token", TOKEN)
    kw.setdefault("retries", 0)
    return GitHubClient(base_url=hub.base_url, cache_dir=tmp / cache, **kw)


def by_id(report) -> dict:
    return {r.id: r for r in report.rows}


def rendered(report) -> str:
    buf = io.StringIO()
    render_status(Term(buf, tty=True, width=220, color=False), report)
    return buf.getvalue()


# ---- the drift classes, the actions, the merge placement, recording -------------------------------
def test_refresh_detects_every_drift_class_and_records_it(world):
    hub, led = world["hub"], world["ledger"]
    rep = status(led, refresh=True, client=client(hub, world["tmp"]), histories={"demo": world["history"]})
    r = by_id(rep)
    assert hub.count("POST /graphql") == 1  # one batched state request for the repository
    expect = {
        "u201-open": ("open", "unchanged", "nothing"),
        "u202-revised": ("open", "revised", "refresh"),
        "u203-rebased": ("open", "unchanged", "nothing"),
        "u204-merged": ("merged", "merged-as-vendored", "drop-at-rebase"),
        "u205-merged-changed": ("merged", "merged-with-changes", "drop-at-rebase"),
        "u206-closed": ("closed", "closed-unmerged", "upstream"),
        "u207-in-base": ("merged", "merged-as-vendored", "drop-at-rebase"),
        "ours-1": ("none", "n/a", "upstream"),
        "held-1": ("none", "n/a", "held"),
        "dropped-1": ("merged", "n/a", "dropped"),
    }
    assert {k: (v.upstream_state, v.drift, v.action) for k, v in r.items()} == expect
    assert r["u201-open"].head_moved is False and r["u202-revised"].head_moved is True
    assert r["u203-rebased"].head_moved is True and any("same change" in n for n in r["u203-rebased"].notes)
    # where the merges are
    assert (r["u204-merged"].in_base, r["u204-merged"].in_main, r["u204-merged"].first_release) == (
        False,
        True,
        "1.1.0",
    )
    assert (r["u207-in-base"].in_base, r["u207-in-base"].first_release) == (True, "1.0.0")
    assert "already in the base" in r["u207-in-base"].action_text
    assert any("not in the local history" in n for n in r["u205-merged-changed"].notes)
    assert "fails the drift check" in r["held-1"].action_text
    # details from GitHub: author, review, CI, the issue next to the PR
    assert (r["u201-open"].pr.author, r["u201-open"].pr.review, r["u201-open"].pr.ci) == (
        "alice",
        "APPROVED",
        "SUCCESS",
    )
    assert [(x.ref, x.kind, x.state) for x in r["u201-open"].refs] == [("acme/demo#300", "issue", "open")]
    assert all(x.pr is None or x.pr.source == "network" for x in rep.rows)

    # recorded into the ledger: state, dates, merge commit; the human note and comments kept
    ledger = load_ledger(led)
    today = dt.date.today()
    st = {p.id: p.status for p in ledger.patches}
    assert (st["u204-merged"].pr_state, st["u204-merged"].merged_at, st["u204-merged"].merge_commit) == (
        "merged",
        dt.date(2026, 10, 1),
        world["shas"]["m204"],
    )
    assert st["u206-closed"].pr_state == "closed" and st["u202-revised"].pr_state == "open"
    assert st["u201-open"].recorded == today and st["u201-open"].note == "keep me"
    assert all(s.head == "" for s in st.values())  # the vendored head is the lock's, never overwritten
    assert "# status test ledger" in led.read_text()
    assert set(rep.recorded) >= {"u204-merged", "u205-merged-changed", "u206-closed", "u207-in-base", "dropped-1"}
    assert "u201-open" not in rep.recorded  # still open, as recorded before

    # every view shows it
    text = rendered(rep)
    assert "merged-with-changes" in text and "refresh from the PR" in text and "u206-closed" in text
    md = to_markdown(rep)
    assert "| `u202-revised` |" in md and md.count("\n## ") == 1
    data = json.loads(json.dumps(rep.to_json()))
    assert data["counts"]["drift"]["revised"] == 1 and len(data["rows"]) == 10


def test_default_mode_uses_the_cache_and_never_the_network(world):
    hub, led, tmp = world["hub"], world["ledger"], world["tmp"]
    live = status(led, refresh=True, client=client(hub, tmp), histories={"demo": world["history"]})
    before = hub.count()
    rep = status(led, client=client(hub, tmp, offline=True), histories={"demo": world["history"]})
    assert hub.count() == before
    assert rep.mode == "default"
    assert {(r.id, r.drift, r.action) for r in rep.rows} == {(r.id, r.drift, r.action) for r in live.rows}
    assert all(r.pr is None or r.pr.source == "cache" for r in rep.rows)
    assert "cache" in rep.oldest()
    # --offline says how old its data is
    rep = status(led, offline=True, client=client(hub, tmp, offline=True))
    assert rep.mode == "offline" and re.match(r"cache, \d+ s old", rep.oldest())
    assert hub.count() == before


def test_a_fresh_clone_shows_the_recorded_states(world):
    hub, led, tmp = world["hub"], world["ledger"], world["tmp"]
    status(led, refresh=True, client=client(hub, tmp))
    before = hub.count()
    rep = status(led, client=client(hub, tmp, cache="empty-cache", offline=True))
    assert hub.count() == before
    r = by_id(rep)
    assert r["u204-merged"].pr.source == "recorded" and r["u204-merged"].upstream_state == "merged"
    assert r["u204-merged"].pr.recorded == dt.date.today().isoformat()
    assert r["u204-merged"].action == "drop-at-rebase" and r["u206-closed"].action == "upstream"
    assert any("recorded states" in w for w in rep.warnings)
    assert not rep.errors()


def test_status_refuses_contradictions(world):
    with pytest.raises(InputError, match="contradict"):
        status(world["ledger"], refresh=True, offline=True)
    with pytest.raises(InputError, match="must not use the network"):
        status(world["ledger"], client=client(world["hub"], world["tmp"]))


# ---- failure is a row, not a crash -----------------------------------------------------------------
GQL = "/api/graphql"


def _fault(hub: FakeHub, name: str) -> dict:
    if name == "401":
        return {"token": "ghp_wrong"}
    if name == "rate-limit":
        hub.set_rate_limit("graphql", remaining=0, reset_in=900)
    elif name == "5xx":
        hub.inject(GQL, status=502)
    elif name == "timeout":
        hub.inject(GQL, delay=2.5)
        return {"timeout": 1}
    elif name == "malformed":
        hub.inject(GQL, malformed=True)
    elif name == "404":
        del hub.state.repo(REPO).pulls[206]
    return {}


KINDS = {
    "401": "auth",
    "rate-limit": "rate_limit",
    "5xx": "server",
    "timeout": "timeout",
    "malformed": "malformed",
    "404": "not_found",
}


@pytest.mark.parametrize("name", sorted(KINDS))
def test_each_failure_marks_rows_and_still_renders(world, name):
    hub, led, tmp = world["hub"], world["ledger"], world["tmp"]
    kw = _fault(hub, name)
    before = tree_digest(led.parent)
    rep = status(led, refresh=True, client=client(hub, tmp, **kw))
    r = by_id(rep)
    failed = {k for k, v in r.items() if v.error}
    if name == "404":
        assert failed == {"u206-closed"}
        assert r["u206-closed"].action == "unknown" and "not found upstream" in r["u206-closed"].action_text
        assert r["u204-merged"].drift == "merged-as-vendored"  # the other rows are still live
        assert "u206-closed" not in rep.recorded
        assert load_ledger(led).get("u206-closed").status.pr_state == "unknown"
    else:
        assert failed == {k for k, v in r.items() if v.pr is not None}
        assert tree_digest(led.parent) == before  # nothing fresh: nothing recorded
        # a row with a recorded state falls back to it, marked
        assert r["u201-open"].upstream_state == "open" and r["u201-open"].pr.source == "recorded"
        assert r["u201-open"].action == "nothing"
        assert r["u202-revised"].action == "unknown"
    kinds = {v.pr.error["error"] for v in r.values() if v.pr is not None and v.pr.error}
    assert kinds == {KINDS[name]}
    if name == "rate-limit":
        assert all(v.pr.error["reset_at"] for v in r.values() if v.pr is not None and v.pr.error)
        assert "resets at" in rendered(rep)
    # every view renders the run, with the errors on it
    assert KINDS[name] in rendered(rep) and KINDS[name] in to_markdown(rep) and KINDS[name] in to_html(rep)
    # + the issue next to u201 and the PR held-1 is based on
    assert len(rep.errors()) == len(failed) + (2 if name != "404" else 0)


def test_a_diff_that_cannot_be_read_leaves_the_drift_open(world):
    hub, led, tmp = world["hub"], world["ledger"], world["tmp"]
    hub.inject("/repos/acme/demo/pulls/202", status=500)
    rep = status(led, refresh=True, client=client(hub, tmp))
    r = by_id(rep)["u202-revised"]
    assert r.drift == "head-moved" and r.action == "refresh"
    assert any("server" in n for n in r.notes)


def test_without_a_token_it_warns_and_reads_over_rest(world, monkeypatch):
    hub, led, tmp = world["hub"], world["ledger"], world["tmp"]
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    c = make_client(base_url=hub.base_url, cache_dir=tmp / "anon", gh="", retries=0)
    assert not c.authenticated
    rep = status(led, refresh=True, client=c)
    assert any("unauthenticated" in w for w in rep.warnings)
    assert hub.count("POST /graphql") == 0 and hub.count("GET /repos/{owner}/{repo}/pulls/{number}") >= 7
    r = by_id(rep)
    assert r["u204-merged"].upstream_state == "merged" and r["u202-revised"].drift == "revised"
    assert r["u201-open"].pr.review is None  # REST has no review decision


# ---- the real ledger, no network ----------------------------------------------------------------------
def test_real_ledger_offline_shows_every_entry_with_recorded_states(tmp_path):
    d = tmp_path / "real"
    d.mkdir()
    shutil.copy(REPO_ROOT / "patches.toml", d / "patches.toml")
    c = make_client(offline=True, base_url="http://127.0.0.1:9/api/v3", cache_dir=tmp_path / "cache")
    rep = status(d / "patches.toml", client=c, histories={})
    assert c.round_trips == 0
    assert len(rep.rows) == 23
    states = {r.state for r in rep.rows}
    assert [r.id for r in rep.rows if r.state != "active"] == ["p1-short-turn-caching", "u57477-long-context-fix"]
    assert states == {"active", "held", "dropped"}
    assert sum(1 for r in rep.rows if r.state == "active") == 21
    r = by_id(rep)
    assert (
        r["u58250-revert-55960-dflash2-grouped-conv"].upstream_state,
        r["u58834-glm5next-non-mhc-sp-decoder-layout"].upstream_state,
        r["pr2393-v2.30.7"].upstream_state,
    ) == ("draft", "open", "open")
    for pid in (
        "u57632-dflash-context-kv-in-draft-cudagraph",
        "u58704-sm90-sparse-mla-index-kpool",
        "u58454-kpool-tail-ring-spec-decode",
        "u58021-single-group-prefix-match-unit",
    ):
        assert r[pid].upstream_state == "merged" and r[pid].action == "drop-at-rebase"
        assert r[pid].pr.source == "recorded" and r[pid].pr.recorded == "2026-09-26"
    assert r["p1-short-turn-caching"].action == "held" and r["u57477-long-context-fix"].action == "dropped"
    assert r["09-glm5next-kda-honor-mamba-ssm-cache-dtype"].action == "upstream"
    assert [t for t in rep.by_target()] == ["vllm", "flashinfer", "nccl"]
    assert "recorded 2026-09-26" in rep.oldest()
    text = rendered(rep)
    for pid in r:
        assert pid in text.replace("\n", "") or pid[:20] in text
    assert "flashinfer" in to_markdown(rep) and to_html(rep).count("<tr ") + to_html(rep).count("<tr>") >= 23


def test_real_ledger_refresh_against_a_ledger_shaped_upstream(tmp_path):
    """The production ledger against the local server's ledger-shaped world: one GraphQL request
    per repository the ledger names, the new states recorded, the ledger's comments kept."""
    from tests.support.fakehub.world import ledger_world

    d = tmp_path / "real"
    d.mkdir()
    shutil.copy(REPO_ROOT / "patches.toml", d / "patches.toml")
    data = ledger_world()
    data["tokens"] = [TOKEN]
    with FakeHub(data) as hub:
        rep = status(d / "patches.toml", refresh=True, client=client(hub, tmp_path), histories={})
        assert hub.count("POST /graphql") == 2 and hub.count() == 2  # vllm and nccl; no diff: no body imported
    assert not rep.errors() and rep.exit_code == 0
    r = by_id(rep)
    assert r["u58021-single-group-prefix-match-unit"].pr.merged_at.startswith("2026-10-01")
    assert r["u58250-revert-55960-dflash2-grouped-conv"].upstream_state == "draft"
    assert [(x.ref, x.state) for x in r["u58250-revert-55960-dflash2-grouped-conv"].refs] == [
        ("vllm-project/vllm#55960", "merged")
    ]
    assert [(x.ref, x.kind, x.state) for x in r["pr2393-v2.30.7"].refs] == [("NVIDIA/nccl#2334", "issue", "open")]
    led = load_ledger(d / "patches.toml")
    st = led.get("u58021-single-group-prefix-match-unit").status
    assert (st.pr_state, st.merged_at, st.recorded) == ("merged", dt.date(2026, 10, 1), dt.date.today())
    assert st.note.startswith("open when vendored")
    assert led.get("u58834-glm5next-non-mhc-sp-decoder-layout").status.pr_state == "open"
    assert "# --- vLLM 18/18 ---" in (d / "patches.toml").read_text()


def test_a_newer_recorded_state_beats_an_older_cache(world):
    """Someone else refreshed later and committed the ledger: their state wins over our old cache."""
    hub, led, tmp = world["hub"], world["ledger"], world["tmp"]
    c = client(hub, tmp)
    c.pull_states([PRRef(REPO, 201)])  # cache: 201 open, today
    tomorrow = dt.date.today() + dt.timedelta(days=1)
    led.write_text(
        led.read_text().replace(
            'pr_state = "open"\nrecorded = 2026-09-26', f'pr_state = "merged"\nrecorded = {tomorrow.isoformat()}'
        )
    )
    r = by_id(status(led, client=client(hub, tmp, offline=True), histories={}))["u201-open"]
    assert (r.upstream_state, r.pr.source, r.action) == ("merged", "recorded", "drop-at-rebase")
    led.write_text(led.read_text().replace(f"recorded = {tomorrow.isoformat()}", "recorded = 2026-09-26"))
    r = by_id(status(led, client=client(hub, tmp, offline=True), histories={}))["u201-open"]
    assert (r.upstream_state, r.pr.source) == ("open", "cache")

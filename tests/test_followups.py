"""Follow-ups and reverts (issue #27, item 1): later upstream work naming a patch's pull request,
from GitHub's timeline (cross-references, in the same batched GraphQL document) and from a local
clone's commit messages; classed reverted / follow-up merged / follow-up open / mentioned; the
dashboard's action says what to do; offline from the cache and from what the ledger recorded.

GitHub is the fake hub (tests/support/fakehub): it derives cross-references from what its other
pull requests and issues say (server._gql_timeline documents where that differs from GitHub).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from patchset.ledger.store import load_ledger
from patchset.tracker import followups as fu
from patchset.tracker.github import GitHubClient
from patchset.tracker.github.graphql import build_query, parse_states
from patchset.tracker.status import status
from patchset.upstream.refs import PRRef
from patchset.upstream.repo import GitRepo
from tests.support.fakehub.server import FakeHub
from tests.support.fakehub.world import small_diff
from tests.support.repo import commit_files, git

TOKEN = "ghp_followupsToken000000000000000000000"
REPO = "acme/demo"


def _hub() -> dict:
    def pr(title: str, *, merged: str | None = None, state: str = "open", body: str = "", created: str) -> dict:
        return {
            "title": title,
            "author": "alice",
            "body": body,
            "diff": small_diff("demo/x.py", title[:8]),
            "merged_at": merged,
            "state": "closed" if merged else state,
            "created_at": created,
            "updated_at": merged or created,
        }

    pulls = {
        "201": pr("Cache the drafter (#201)", merged="2026-09-20T10:00:00Z", created="2026-09-01T10:00:00Z"),
        "202": pr("Tile the kernel (#202)", merged="2026-09-21T10:00:00Z", created="2026-09-02T10:00:00Z"),
        "203": pr("Guard SM12x", created="2026-09-03T10:00:00Z"),
        "204": pr("Group the conv (#204)", merged="2026-08-01T10:00:00Z", created="2026-07-03T10:00:00Z"),
        # later work
        "301": pr(
            'Revert "Cache the drafter (#201)" (#301)',
            merged="2026-09-28T10:00:00Z",
            body="Reverts acme/demo#201",
            created="2026-09-27T10:00:00Z",
        ),
        "302": pr(
            "[Bugfix] Fix the tile size after #202 (#302)",
            merged="2026-09-29T10:00:00Z",
            created="2026-09-28T10:00:00Z",
        ),
        "303": pr("Follow-up to #203: cover SM121", created="2026-09-29T11:00:00Z"),
        "304": pr("Try #203 another way", state="closed", created="2026-09-29T12:00:00Z"),
        "305": pr('Revert "Group the conv (#204)"', merged="2026-09-30T10:00:00Z", created="2026-09-30T09:00:00Z"),
        "306": pr(
            "Docs", body="see https://github.example/acme/demo/pull/202 for context", created="2026-09-30T11:00:00Z"
        ),
    }
    return {
        "tokens": [TOKEN],
        "repos": {
            REPO: {
                "pulls": pulls,
                "issues": {"401": {"title": "Crash since #203", "created_at": "2026-09-30T12:00:00Z"}},
            },
            "other/fork": {"pulls": {"5": pr("Carry acme/demo#202 in our fork", created="2026-09-30T13:00:00Z")}},
        },
    }


LEDGER = """schema = 1

[targets.demo]
upstream = "https://example.invalid/acme/demo.git"
github = "acme/demo"
base = "v1.0"

[[patch]]
id = "u201"
target = "demo"
title = "the drafter cache"
origin = "upstream"
[patch.upstream]
prs = ["acme/demo#201"]

[[patch]]
id = "u202"
target = "demo"
title = "the tile"
origin = "upstream"
[patch.upstream]
prs = ["acme/demo#202"]

[[patch]]
id = "p203"
target = "demo"
title = "the guard"
origin = "port"
[patch.upstream]
ports = ["acme/demo#203"]

[[patch]]
id = "r204"
target = "demo"
title = "revert the grouped conv"
origin = "revert"
[patch.upstream]
reverts = ["acme/demo#204"]
"""


@pytest.fixture
def world(tmp_path: Path):
    led = tmp_path / "led" / "patches.toml"
    led.parent.mkdir()
    led.write_text(LEDGER)
    with FakeHub(_hub()) as hub:
        yield hub, led, tmp_path


def client(hub: FakeHub, tmp: Path, cache: str = "cache", **kw) -> GitHubClient:
    kw.setdefault("token", TOKEN)
    return GitHubClient(base_url=hub.base_url, cache_dir=tmp / cache, retries=0, **kw)


def classes(row) -> dict[str, str]:
    return {f["ref"].split("/")[-1]: f["class"] for f in row.followups}


def test_refresh_classes_every_follow_up_and_the_action_says_it(world) -> None:
    hub, led, tmp = world
    rep = status(led, refresh=True, client=client(hub, tmp), histories={})
    assert hub.count("POST /graphql") == 1  # the timelines came inside the one batched document
    assert all("timelineItems" in d for d in hub.graphql_documents)
    r = {row.id: row for row in rep.rows}
    assert classes(r["u201"]) == {"demo#301": "reverted"}
    assert (r["u201"].action, r["u201"].action_text.split(";")[0]) == (
        "reverted",
        "upstream reverted it: acme/demo#301 on 2026-09-28",
    )
    assert classes(r["u202"]) == {"demo#302": "follow-up-merged", "demo#306": "mentioned", "fork#5": "mentioned"}
    assert r["u202"].action == "follow-up" and r["u202"].action_text.startswith(
        "upstream fixed it again: take acme/demo#302"
    )
    assert classes(r["p203"]) == {"demo#303": "follow-up-open", "demo#401": "mentioned", "demo#304": "mentioned"}
    assert "follow-up open upstream: acme/demo#303" in r["p203"].action_text
    assert classes(r["r204"]) == {"demo#305": "reverted"}
    assert r["r204"].action == "drop-at-rebase" and "upstream reverted acme/demo#204 too" in r["r204"].action_text
    why = {f["ref"]: f["why"] for f in r["u202"].followups}
    assert why["acme/demo#302"] == "its title names #202" and "another repository" in why["other/fork#5"]
    # --json carries them; the ledger records the reverts and follow-ups (not the mentions)
    data = json.loads(json.dumps(rep.to_json()))
    row = next(x for x in data["rows"] if x["id"] == "u202")
    assert row["followups"][0]["class"] == "follow-up-merged" and row["followups"][0]["url"].endswith("/pull/302")
    recorded = {p.id: p.status.followups for p in load_ledger(led).patches}
    assert recorded == {
        "u201": ["reverted acme/demo#301 of acme/demo#201"],
        "u202": ["follow-up-merged acme/demo#302 of acme/demo#202"],
        "p203": ["follow-up-open acme/demo#303 of acme/demo#203"],
        "r204": ["reverted acme/demo#305 of acme/demo#204"],
    }


def test_offline_from_the_cache_and_from_the_recorded_state(world) -> None:
    hub, led, tmp = world
    live = status(led, refresh=True, client=client(hub, tmp), histories={})
    before = hub.count()
    cached = status(led, client=client(hub, tmp, offline=True), histories={})
    assert hub.count() == before
    assert [(r.id, r.action, classes(r)) for r in cached.rows] == [(r.id, r.action, classes(r)) for r in live.rows]
    # a fresh clone of the ledger: no cache, only what the ledger recorded (no mentions, same actions)
    fresh = status(led, client=client(hub, tmp, cache="empty", offline=True), histories={})
    assert hub.count() == before
    got = {r.id: (r.action, classes(r), r.followups_from) for r in fresh.rows}
    assert got["u201"] == ("reverted", {"demo#301": "reverted"}, ["recorded"])
    assert got["u202"][:2] == ("follow-up", {"demo#302": "follow-up-merged"})
    assert got["r204"][0] == "drop-at-rebase"


def test_a_clones_commits_name_reverts_and_fixes(world) -> None:
    """Without any GitHub data: the branch's commit messages (a revert of the merge commit, a
    "Fixes #202") class the same way; a commit already in the base does not ask for action."""
    hub, led, tmp = world
    up = tmp / "upstream"
    up.mkdir()
    git(up, "init", "-q", "-b", "main")
    commit_files(up, "Initial (#1)", {"f": "0\n"})
    m201 = commit_files(up, "Cache the drafter (#201)", {"f": "1\n"})
    git(up, "tag", "v1.0")
    commit_files(up, "Tile the kernel (#202)", {"f": "2\n"})
    commit_files(up, f'Revert "Cache the drafter (#201)" (#301)\n\nThis reverts commit {m201}.', {"f": "3\n"})
    commit_files(up, "[Bugfix] Tile size (#302)\n\nFixes #202", {"f": "4\n"})
    text = led.read_text().replace('base = "v1.0"', 'base = "v1.0"\nbranch = "main"')
    led.write_text(text)
    rep = status(
        led, offline=True, client=client(hub, tmp, cache="none", offline=True), histories={"demo": GitRepo(up)}
    )
    r = {row.id: row for row in rep.rows}
    assert classes(r["u201"]) == {"demo#301": "reverted"} and r["u201"].followups[0]["via"] == "commit"
    assert r["u201"].action == "reverted"
    assert classes(r["u202"]) == {"demo#302": "follow-up-merged"} and r["u202"].action == "follow-up"
    assert r["u202"].followups[0]["in_base"] is False


def test_hostile_or_malformed_timeline_items_are_left_out_with_a_note() -> None:
    ref = PRRef("acme/demo", 201)
    good = {"source": {"__typename": "PullRequest", "number": 301, "title": 'Revert "x"', "state": "MERGED",
                       "url": "https://github.com/acme/demo/pull/301", "mergedAt": "2026-09-28T10:00:00Z",
                       "createdAt": "2026-09-27T10:00:00Z", "mergeCommit": None, "author": {"login": "bob"},
                       "repository": {"nameWithOwner": "acme/demo"}}}  # fmt: skip
    bad_date = json.loads(json.dumps(good))
    bad_date["source"]["mergedAt"] = "yesterday\x1b[2J"
    bad_url = json.loads(json.dumps(good))
    bad_url["source"].update(number=302, url="javascript:alert(1)")
    bad_repo = json.loads(json.dumps(good))
    bad_repo["source"]["repository"]["nameWithOwner"] = "../../etc"
    node = {
        "__typename": "PullRequest", "number": 201, "title": "t", "url": "https://github.com/acme/demo/pull/201",
        "state": "MERGED", "isDraft": False, "merged": True, "mergedAt": "2026-09-20T10:00:00Z", "closedAt": None,
        "createdAt": "2026-09-01T10:00:00Z", "updatedAt": None, "author": None, "mergeCommit": None,
        "headRefOid": "a" * 40, "reviewDecision": None, "commits": {"nodes": []},
        "timelineItems": {"totalCount": 40, "nodes": [good, bad_date, bad_url, bad_repo, {}]},
    }  # fmt: skip
    doc = {"data": {"repository": {ref.alias: node}}}
    (state,) = parse_states("acme/demo", [ref], doc).values()
    assert [f["ref"] for f in state.followups] == ["acme/demo#301", "acme/demo#302"]
    assert state.followups[1]["url"] is None  # a link that is not http(s) is dropped, the item kept
    notes = " ".join(state.followup_notes)
    assert "mergedAt" in notes and "nameWithOwner" in notes and "newest 5 of 40" in notes
    assert "\x1b" not in notes
    assert "timelineItems(itemTypes: [CROSS_REFERENCED_EVENT]" in build_query([ref])


@pytest.mark.parametrize(
    "title, kind, state, want",
    [
        ('Revert "Cache the drafter (#201)"', "pr", "merged", "reverted"),
        ("[Bugfix] Revert #201", "pr", "merged", "reverted"),
        ("Revert #201", "pr", "open", "follow-up-open"),
        ("Fix the cache after #201", "pr", "merged", "follow-up-merged"),
        ("[Misc] follow-up: tests", "pr", "open", "follow-up-open"),
        ("Reland the drafter cache", "pr", "merged", "follow-up-merged"),
        ("Add a feature", "pr", "merged", "mentioned"),
        ("#2010 is unrelated", "pr", "merged", "mentioned"),
        ("Crash since #201", "issue", "open", "mentioned"),
        ("Fix #201", "pr", "closed", "mentioned"),
        ("Reviewed the code", "pr", "merged", "mentioned"),
    ],
)
def test_classify(title: str, kind: str, state: str, want: str) -> None:
    assert fu.classify(title, kind, state, 201)[0] == want


def test_recorded_form_round_trips_and_the_schema_checks_it(tmp_path: Path) -> None:
    f = fu.FollowUp(of="acme/demo#201", ref="acme/demo#301", kind="pr", klass="reverted", why="w")
    text = fu.recorded_text(f)
    assert text == "reverted acme/demo#301 of acme/demo#201"
    back = fu.from_recorded(text)
    assert back is not None and (back.ref, back.klass, back.state) == ("acme/demo#301", "reverted", "merged")
    led = tmp_path / "patches.toml"
    led.write_text(LEDGER + '[patch.status]\nfollowups = ["reverted acme/demo#305 of acme/demo#204; rm -rf /"]\n')
    from patchset.errors import LedgerError

    with pytest.raises(LedgerError, match="follow-up"):
        load_ledger(led)

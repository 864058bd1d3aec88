"""The tracker's GitHub client: real PyGithub against the real local server (tests.support.fakehub)."""

from __future__ import annotations

import json
import logging
import os
import stat
import time
from pathlib import Path

import pytest

from patchset.errors import EnvironmentFailure, InputError
from patchset.tracker.github import GitHubClient
from patchset.tracker.github.auth import resolve_token
from patchset.tracker.github.graphql import build_query
from patchset.tracker.github.prdiff import PRDiff
from patchset.upstream.refs import FetchError, PRRef, PRState, RowError
from tests.support.fakehub.server import FakeHub
from tests.support.fakehub.world import ledger_refs, ledger_world, small_diff

TOKEN = "ghp_Sekr1tT0kenForTests0000000000000000"
VLLM = "vllm-project/vllm"
GQL = "POST /graphql"
PULL = "GET /repos/{owner}/{repo}/pulls/{number}"
FILES = "GET /repos/{owner}/{repo}/pulls/{number}/files"


def _world() -> dict:
    data = ledger_world()
    data["tokens"] = [TOKEN]
    vllm = data["repos"][VLLM]
    vllm["contents"] = {"main": {"vllm/platforms/cuda.py": "# cuda\nA = 1\n"}}
    # 250 files, diff refused as too large: the files fallback needs three pages of 100.
    many = "".join(
        f"diff --git a/f/{i:03d}.py b/f/{i:03d}.py\n--- a/f/{i:03d}.py\n+++ b/f/{i:03d}.py\n@@ -1 +1 @@\n-a{i}\n+b{i}\n"
        for i in range(250)
    )
    vllm["pulls"]["59100"] = {"title": "Huge refactor", "author": "someone", "diff": many, "diff_too_large": True}
    # too large and one file is binary (no patch in the file list): the commits fallback.
    binary = (
        small_diff("vllm/a.py", "bin")
        + "diff --git a/img.png b/img.png\nindex 1111111..2222222 100644\nBinary files a/img.png and b/img.png differ\n"
    )
    vllm["pulls"]["59101"] = {"title": "With a binary", "author": "someone", "diff": binary, "diff_too_large": True}
    return data


@pytest.fixture()
def hub(serve_hub):
    return serve_hub(_world())


def _client(hub: FakeHub, tmp_path: Path, **kw) -> GitHubClient:
    kw.setdefault("token", TOKEN)
    kw.setdefault("retries", 0)
    return GitHubClient(base_url=hub.base_url, cache_dir=tmp_path / "cache", **kw)


# ---- refs ----------------------------------------------------------------------------------
def test_prref_parse_forms():
    assert PRRef.parse("vllm-project/vllm#57632") == PRRef(VLLM, 57632, "pr")
    assert PRRef.parse("vllm#57632") == PRRef(VLLM, 57632)
    assert PRRef.parse("nccl#2334", kind="issue") == PRRef("NVIDIA/nccl", 2334, "issue")
    assert PRRef.parse("https://github.com/NVIDIA/nccl/issues/2334").kind == "issue"
    assert PRRef.parse("https://github.com/vllm-project/vllm/pull/58704/files") == PRRef(VLLM, 58704)
    assert PRRef.parse("fi#7", aliases={"fi": "flashinfer-ai/flashinfer"}).repo == "flashinfer-ai/flashinfer"
    assert str(PRRef(VLLM, 1)) == "vllm-project/vllm#1"
    assert PRRef.from_json(PRRef(VLLM, 5, "issue").to_json()) == PRRef(VLLM, 5, "issue")
    with pytest.raises(InputError, match="unknown repository alias 'vlm'"):
        PRRef.parse("vlm#1")
    with pytest.raises(InputError, match="cannot read"):
        PRRef.parse("vllm 57632")
    with pytest.raises(InputError, match="positive"):
        PRRef(VLLM, 0)
    with pytest.raises(InputError, match="kind"):
        PRRef(VLLM, 1, "commit")


def test_query_has_one_alias_per_ref():
    q = build_query([PRRef(VLLM, 1), PRRef(VLLM, 2, "issue")])
    assert "pr1: pullRequest(number: 1)" in q and "issue2: issueOrPullRequest(number: 2)" in q
    assert q.count("repository(owner: $owner, name: $name)") == 1


# ---- batching, cache, offline ---------------------------------------------------------------
def test_21_prs_in_3_repos_cold_is_3_round_trips_then_warm_is_none(hub, tmp_path):
    refs = ledger_refs()
    assert len(refs) == 21 and len({r.repo for r in refs}) == 3
    c = _client(hub, tmp_path)
    states = c.pull_states(refs)
    assert hub.count() == 3 and hub.count(GQL) == 3 and c.round_trips == 3
    assert list(states) == refs
    assert all(isinstance(s, PRState) and s.source == "network" for s in states.values())
    s = states[PRRef(VLLM, 57632)]
    assert (s.state, s.merged, s.author, s.ci, s.review_decision) == (
        "merged",
        True,
        "Juntian777",
        "SUCCESS",
        "APPROVED",
    )
    assert s.merged_at == "2026-09-24T10:00:00Z" and len(s.merge_commit) == 40 and len(s.head_sha) == 40
    draft = states[PRRef(VLLM, 58250)]
    assert (draft.state, draft.draft, draft.ci, draft.review_decision) == ("open", True, "PENDING", "REVIEW_REQUIRED")
    assert states[PRRef(VLLM, 58903)].state == "closed" and not states[PRRef(VLLM, 58903)].merged
    issue = states[PRRef("NVIDIA/nccl", 2334, "issue")]
    assert issue.is_pull is False and issue.state == "open" and issue.title.startswith("RoCE")
    assert c.rate["graphql"].remaining == 5000 - 3

    warm = _client(hub, tmp_path)  # a new process would see the same cache
    t = time.perf_counter()
    again = warm.pull_states(refs)
    elapsed = time.perf_counter() - t
    assert hub.count() == 3 and warm.round_trips == 0
    assert all(x.source == "cache" and x.age_s is not None for x in again.values())
    assert [x.head_sha for x in again.values()] == [x.head_sha for x in states.values()]
    assert elapsed < 0.3

    refreshed = warm.pull_states(refs, max_age=0)  # stale: ask again, still one request per repo
    assert hub.count(GQL) == 6 and all(x.source == "network" for x in refreshed.values())


def test_offline_serves_cache_with_age_and_never_touches_network(hub, tmp_path):
    online = _client(hub, tmp_path)
    known = [PRRef(VLLM, 57632), PRRef(VLLM, 58834)]
    online.pull_states(known)
    diff = online.pr_diff(known[0])
    before = hub.count()
    time.sleep(0.05)
    off = GitHubClient(base_url=hub.base_url, cache_dir=tmp_path / "cache", offline=True)
    rows = off.pull_states([*known, PRRef(VLLM, 58021)])
    assert hub.count() == before and off.round_trips == 0
    assert rows[known[0]].source == "cache" and rows[known[0]].age_s >= 0.05
    assert rows[PRRef(VLLM, 58021)] == RowError("offline", "offline, no cached data")
    detail = off.pr_diff_detail(known[0])
    assert detail.data == diff and detail.cached and detail.age_s >= 0.05
    with pytest.raises(FetchError, match="offline, no cached data") as exc:
        off.pr_diff(PRRef(VLLM, 58021))
    assert exc.value.row.kind == "offline" and isinstance(exc.value, EnvironmentFailure)
    assert hub.count() == before


def test_etag_second_read_is_a_free_304_from_cache(hub, tmp_path):
    c = _client(hub, tmp_path)
    first = c.pr_diff_detail(PRRef(VLLM, 58704))
    rate_after_first = hub.rate("core").remaining
    second = c.pr_diff_detail(PRRef(VLLM, 58704))
    assert first.data == second.data and first.data.startswith(b"diff --git")
    assert not first.cached and second.cached
    assert hub.count(PULL, status=200) == 1 and hub.count(PULL, status=304) == 1
    assert hub.rate("core").remaining == rate_after_first  # the 304 cost nothing
    assert c.file_at(VLLM, "main", "vllm/platforms/cuda.py") == b"# cuda\nA = 1\n"
    assert c.file_at(VLLM, "main", "vllm/platforms/cuda.py") == b"# cuda\nA = 1\n"
    assert hub.count("GET /repos/{owner}/{repo}/contents/{path}", status=304) == 1


def test_commit_diff_by_full_sha_is_immutable(hub, tmp_path):
    c = _client(hub, tmp_path)
    head = c.pull_states([PRRef(VLLM, 58454)])[PRRef(VLLM, 58454)].head_sha
    d1 = c.commit_diff(VLLM, head)
    d2 = c.commit_diff(VLLM, head)
    assert d1 == d2 and b"kpool" not in d1 and b"attention.py" in d1
    assert hub.count("GET /repos/{owner}/{repo}/commits/{ref}") == 1  # second read: no request at all
    assert c.commit_diff(VLLM, head, revalidate=True) == d1  # asked again: a 304, the cached body
    assert hub.count("GET /repos/{owner}/{repo}/commits/{ref}", status=304) == 1
    del hub.state.repo(VLLM).commits[head]  # gone upstream: only a revalidating read notices
    assert c.commit_diff(VLLM, head) == d1
    with pytest.raises(FetchError) as err:
        c.commit_diff(VLLM, head, revalidate=True)
    assert err.value.row.status == 422


def test_force_pushed_pr_moves_head_and_diff(hub, tmp_path):
    c = _client(hub, tmp_path, max_age=0)
    ref = PRRef(VLLM, 58834)
    old = c.pull_states([ref])[ref]
    old_diff = c.pr_diff(ref)
    new_diff = small_diff("vllm/models/glm5next/common/model.py", "rev2", lines=2)
    new_sha = hub.force_push(VLLM, 58834, new_diff)
    now = c.pull_states([ref])[ref]
    assert now.head_sha == new_sha != old.head_sha
    got = c.pr_diff_detail(ref)
    assert got.data == new_diff.encode() != old_diff and got.source == "diff" and not got.cached
    assert hub.count(PULL, status=304) == 0  # the conditional request saw a changed ETag


def test_merge_seen_after_cache_expires(hub, tmp_path):
    c = _client(hub, tmp_path, max_age=0)
    ref = PRRef(VLLM, 58250)
    assert c.pull_states([ref])[ref].state == "open"
    sha = hub.merge(VLLM, 58250)
    s = c.pull_states([ref])[ref]
    assert s.state == "merged" and s.merge_commit == sha and s.merged_at


# ---- diff fallbacks --------------------------------------------------------------------------
def test_406_falls_back_to_paginated_file_patches(hub, tmp_path):
    c = _client(hub, tmp_path)
    got = c.pr_diff_detail(PRRef(VLLM, 59100))
    assert got.source == "files" and "250 per-file patches" in got.note
    assert hub.count(PULL, status=406) == 1 and hub.count(FILES) == 3  # 100 + 100 + 50
    assert got.data.decode() == hub.state.pull(VLLM, 59100).diff


def test_406_with_patchless_file_falls_back_to_commit_patches(hub, tmp_path):
    c = _client(hub, tmp_path)
    got = c.pr_diff_detail(PRRef(VLLM, 59101))
    assert got.source == "commits" and "img.png" in got.note
    pull = hub.state.pull(VLLM, 59101)
    assert got.data.startswith(f"From {pull.head_sha} ".encode())
    assert pull.diff.encode() in got.data and b"Subject: [PATCH] With a binary" in got.data


# ---- failures are rows ---------------------------------------------------------------------
def _ok_except(rows, bad_repo):
    return all(isinstance(v, PRState) for r, v in rows.items() if r.repo != bad_repo)


def test_rate_limit_403_with_reset_time(hub, tmp_path):
    c = _client(hub, tmp_path)
    bucket = hub.set_rate_limit("core", remaining=0, reset_in=900)
    with pytest.raises(FetchError) as exc:
        c.pr_diff(PRRef(VLLM, 57632))
    row = exc.value.row
    assert row.kind == "rate_limit" and row.status == 403 and row.reset_at == bucket.reset
    assert "API rate limit exceeded" in row.message and "resets at" in str(exc.value)
    gbucket = hub.set_rate_limit("graphql", remaining=0, reset_in=120)
    rows = c.pull_states(ledger_refs()[:3])
    assert all(
        isinstance(v, RowError) and v.kind == "rate_limit" and v.reset_at == gbucket.reset for v in rows.values()
    )
    assert rows[ledger_refs()[0]].to_json()["reset_at_iso"].endswith("Z")


def test_bad_token_401(hub, tmp_path):
    c = _client(hub, tmp_path, token="ghp_wrong")
    rows = c.pull_states(ledger_refs())
    assert all(isinstance(v, RowError) and v.kind == "auth" and v.status == 401 for v in rows.values())
    with pytest.raises(FetchError, match="Bad credentials") as exc:
        c.file_at(VLLM, "main", "vllm/platforms/cuda.py")
    assert "GITHUB_TOKEN" in exc.value.render()


def test_404_rows_and_missing_repo(hub, tmp_path):
    c = _client(hub, tmp_path)
    refs = [PRRef(VLLM, 57632), PRRef(VLLM, 999999), PRRef("someone/missing", 1), PRRef("NVIDIA/nccl", 2393)]
    rows = c.pull_states(refs)
    assert isinstance(rows[refs[0]], PRState) and isinstance(rows[refs[3]], PRState)
    assert rows[refs[1]].kind == "not_found" and "999999" in rows[refs[1]].message
    assert rows[refs[2]].kind == "not_found" and "someone/missing" in rows[refs[2]].message
    with pytest.raises(FetchError) as exc:
        c.pr_diff(PRRef(VLLM, 999999))
    assert exc.value.row.kind == "not_found" and exc.value.row.status == 404


def test_5xx_is_a_row_and_other_repos_still_return(hub, tmp_path):
    c = _client(hub, tmp_path)
    hub.inject("/api/graphql", status=502, times=1)  # the first repository's request only
    rows = c.pull_states(ledger_refs())
    assert all(v.kind == "server" and v.status == 502 for r, v in rows.items() if r.repo == VLLM)
    assert _ok_except(rows, VLLM)


def test_5xx_is_retried(hub, tmp_path):
    c = _client(hub, tmp_path, retries=2, backoff=0.01)
    hub.inject("/api/graphql", status=503, times=2)
    rows = c.pull_states([PRRef(VLLM, 57632)])
    got = rows[PRRef(VLLM, 57632)]
    assert isinstance(got, PRState)  # the world: merged by Juntian777 on 2026-09-24
    assert (got.state, got.merged, got.author) == ("merged", True, "Juntian777")
    assert got.merged_at is not None and got.merged_at.startswith("2026-09-24")
    assert hub.count(GQL, status=503) == 2 and hub.count(GQL, status=200) == 1


def test_timeout_is_a_row(hub, tmp_path):
    c = _client(hub, tmp_path, timeout=1)
    hub.inject("/api/graphql", delay=3.0, times=1)
    t = time.monotonic()
    rows = c.pull_states(ledger_refs())
    assert time.monotonic() - t < 2.8
    assert all(v.kind == "timeout" for r, v in rows.items() if r.repo == VLLM)
    assert _ok_except(rows, VLLM)


def test_malformed_json_is_a_row_and_never_cached(hub, tmp_path):
    c = _client(hub, tmp_path)
    hub.inject("/api/graphql", malformed=True, times=1)
    rows = c.pull_states(ledger_refs())
    assert all(v.kind == "malformed" for r, v in rows.items() if r.repo == VLLM)
    assert _ok_except(rows, VLLM)
    hub.inject("/repos/*/contents/*", malformed=True, times=1)
    with pytest.raises(FetchError) as exc:
        c.file_at(VLLM, "main", "vllm/platforms/cuda.py")
    assert exc.value.row.kind == "malformed"
    assert c.file_at(VLLM, "main", "vllm/platforms/cuda.py") == b"# cuda\nA = 1\n"
    assert hub.count("GET /repos/{owner}/{repo}/contents/{path}", status=304) == 0


def test_connection_refused_is_a_network_row(tmp_path):
    with FakeHub({}) as h:
        url = h.base_url
    c = GitHubClient(base_url=url, token=TOKEN, cache_dir=tmp_path, retries=0)
    rows = c.pull_states([PRRef(VLLM, 1)])
    row = rows[PRRef(VLLM, 1)]
    assert row.kind == "no_network" and row.message.endswith(": connection refused")  # the host, in a few words
    trips = c.round_trips
    with pytest.raises(FetchError):
        c.pr_diff(PRRef(VLLM, 1))
    assert c.round_trips == trips  # not asked again: the host is down for this client


# ---- tokens --------------------------------------------------------------------------------
def test_token_never_leaks(hub, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    for name in ("github", "urllib3", "tracker", "requests"):
        logging.getLogger(name).setLevel(logging.DEBUG)
    c = _client(hub, tmp_path)
    texts = [repr(c), str(c)]
    rows = c.pull_states(ledger_refs())
    # the server did get and accept the token: every ref has its state, not an auth error
    assert all(isinstance(v, PRState) and v.ref == r and v.title for r, v in rows.items())
    assert rows[PRRef(VLLM, 58250)].state == "open" and rows[PRRef(VLLM, 58250)].draft
    c.pr_diff(PRRef(VLLM, 59100))
    hub.inject("/repos/*", status=401, times=1)
    hub.inject("/api/graphql", status=500, times=1)
    for call in (lambda: c.pr_diff(PRRef(VLLM, 57632)), lambda: c.pull_states([PRRef(VLLM, 1)], max_age=0)):
        try:
            out = call()
            texts.append(json.dumps({str(k): v.to_json() for k, v in out.items()}))
            texts += [str(v) for v in out.values()]
        except FetchError as exc:
            texts += [str(exc), repr(exc), exc.render(), json.dumps(exc.row.to_json())]
    texts.append(caplog.text)
    assert "token (oauth token removed)" in caplog.text  # request headers were logged, masked
    for path in (tmp_path / "cache").rglob("*"):
        if path.is_file():
            texts.append(path.read_bytes().decode("utf-8", "replace"))
    blob = "\n".join(texts)
    assert TOKEN not in blob and TOKEN[4:20] not in blob
    with pytest.raises(TypeError):
        import pickle

        pickle.dumps(c._token)


def test_token_resolution_order(tmp_path, monkeypatch):
    gh = tmp_path / "bin" / "gh"
    gh.parent.mkdir()
    gh.write_text('#!/bin/sh\n[ "$1 $2" = "auth token" ] && echo gho_from_gh_cli\n')
    gh.chmod(gh.stat().st_mode | stat.S_IXUSR)
    env = {"PATH": str(gh.parent)}
    assert resolve_token("explicit", env=env) == ("explicit", "argument")
    assert resolve_token(None, env={**env, "GITHUB_TOKEN": "from_env"}) == ("from_env", "GITHUB_TOKEN")
    assert resolve_token(None, env=env) == ("gho_from_gh_cli", "gh")
    assert resolve_token(None, env={"PATH": str(tmp_path)}) == (None, "none")


def test_gh_token_is_used_and_no_token_warns_and_reads_rest(hub, tmp_path, monkeypatch, caplog):
    gh = tmp_path / "bin" / "gh"
    gh.parent.mkdir()
    gh.write_text(f"#!/bin/sh\necho {TOKEN}\n")
    gh.chmod(0o755)
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    monkeypatch.setenv("PATH", f"{gh.parent}{os.pathsep}{os.environ['PATH']}")
    c = _client(hub, tmp_path, token=None)
    assert c.auth_source == "gh" and c.authenticated
    assert isinstance(c.pull_states([PRRef(VLLM, 57632)])[PRRef(VLLM, 57632)], PRState)
    assert hub.count(GQL, status=200) == 1

    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    with caplog.at_level(logging.INFO, logger="patchset.tracker.github"):  # the command says it (auth_notice)
        anon = GitHubClient(base_url=hub.base_url, cache_dir=tmp_path / "anon", retries=0)
    assert not anon.authenticated and "no GitHub token" in caplog.text
    assert anon.auth_notice and "no GitHub token" in anon.auth_notice  # printed once, by the command
    refs = [PRRef(VLLM, 57632), PRRef("NVIDIA/nccl", 2334, "issue"), PRRef(VLLM, 424242)]
    rows = anon.pull_states(refs)
    merged = rows[refs[0]]
    assert merged.state == "merged" and merged.head_sha and merged.ci is None  # REST has no CI rollup
    assert rows[refs[1]].is_pull is False and rows[refs[2]].kind == "not_found"
    assert hub.count(GQL) == 1 and hub.count(PULL) == 2
    anon.pull_states(refs, max_age=0)
    assert hub.count(PULL, status=304) == 1  # REST reads revalidate for free


def test_records_round_trip_json():
    s = PRState(ref=PRRef(VLLM, 1), title="t", author="a", state="open", ci="SUCCESS")
    assert PRState.from_json(json.loads(json.dumps(s.to_json()))) == s
    e = RowError("rate_limit", "403 API rate limit exceeded", reset_at=1_800_000_000.0, status=403)
    assert e.to_json()["reset_at_iso"] == "2027-01-15T08:00:00Z"
    d = PRDiff(PRRef(VLLM, 1), b"x", "diff")
    assert d.to_json()["bytes"] == 1 and d.to_json()["source"] == "diff"


def test_offline_too_large_diff_rebuilt_from_cached_pages(hub, tmp_path):
    online = _client(hub, tmp_path)
    ref = PRRef(VLLM, 59100)
    want = online.pr_diff(ref)
    before = hub.count()
    off = GitHubClient(base_url=hub.base_url, cache_dir=tmp_path / "cache", offline=True)
    got = off.pr_diff_detail(ref)
    assert got.data == want and got.source == "files" and got.cached and hub.count() == before


def test_unwritable_cache_does_not_fail_reads(hub, tmp_path, caplog):
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache directory should be")
    c = GitHubClient(base_url=hub.base_url, token=TOKEN, cache_dir=blocker / "sub", retries=0)
    with caplog.at_level(logging.WARNING, logger="patchset.tracker.github.httpcache"):
        rows = c.pull_states(ledger_refs()[:2])
        assert c.file_at(VLLM, "main", "vllm/platforms/cuda.py") == b"# cuda\nA = 1\n"
    assert all(isinstance(v, PRState) for v in rows.values())
    assert "cannot write the GitHub cache" in caplog.text


# ---- GitHub's strictness and odd answers (issue #12) -------------------------------------------
CONTENTS = "GET /repos/{owner}/{repo}/contents/{path}"
NOT_UTF8 = (
    b"diff --git a/vllm/latin1.py b/vllm/latin1.py\nindex 1111111..2222222 100644\n--- a/vllm/latin1.py\n"
    b"+++ b/vllm/latin1.py\n@@ -1,2 +1,2 @@\n # caf\xe9\n-x = '\xff\xfe'\n+x = '\xe9t\xe9'\n"
)


def test_every_request_names_the_api_version(hub, tmp_path):
    c = _client(hub, tmp_path)
    c.pull_states([PRRef(VLLM, 57632)])
    c.pr_diff(PRRef(VLLM, 57632))
    assert {r.api_version for r in hub.requests} == {"2022-11-28"}


def test_pr_only_repository_sends_no_unused_fragment(hub, tmp_path):
    """#1: the fake refuses a document with an unused fragment, as GitHub does: every PR row of a
    PR-only repository would be an error. Now each PR-only repository gets its states."""
    rows = _client(hub, tmp_path).pull_states([PRRef(VLLM, 57632), PRRef(VLLM, 58250)])
    assert all(isinstance(v, PRState) for v in rows.values())
    (doc,) = hub.graphql_documents
    assert "IssueFields" not in doc and hub.validator.errors(doc) == []


def test_issue_state_is_aliased_and_read(hub, tmp_path):
    """#2: ``state`` of an Issue and of a PullRequest under one key breaks OverlappingFieldsCanBeMerged."""
    hub.close("NVIDIA/nccl", 2334)
    refs = [PRRef("NVIDIA/nccl", 2334, "issue"), PRRef("NVIDIA/nccl", 2393, "issue")]
    rows = _client(hub, tmp_path).pull_states(refs)
    assert rows[refs[0]].state == "closed" and rows[refs[0]].is_pull is False
    assert rows[refs[0]].state_reason == "COMPLETED"
    assert rows[refs[1]].is_pull is True and rows[refs[1]].state == "open"  # a PR number asked as an issue
    (doc,) = hub.graphql_documents
    assert "issueState: state" in doc and hub.validator.errors(doc) == []


def test_file_over_1mb_is_read_with_the_raw_media_type(hub, tmp_path):
    """#3: GitHub answers the JSON media type with 403 too_large over 1 MB; the raw one works."""
    big = bytes(range(256)) * 4100 + b"\xff\xfe not utf-8"
    hub.state.set_file(VLLM, "main", "vllm/big.bin", big)
    c = _client(hub, tmp_path)
    assert c.file_at(VLLM, "main", "vllm/big.bin") == big
    assert hub.count(CONTENTS, status=403) == 1 and hub.count(CONTENTS, media="raw") == 1
    raw = [r for r in hub.requests if r.media == "raw"]
    assert raw[0].accept == "application/vnd.github.raw+json"


def test_renamed_repository_301_keeps_the_ref(hub, tmp_path):
    """#4: PyGithub followed a 301 with the path only: ``?ref=`` was lost, so the default branch's
    file came back (and was cached as permanent for a full-sha ref)."""
    sha = "a" * 40
    hub.state.add_repo("old-owner/tool")
    hub.state.set_file("old-owner/tool", "main", "src/x.py", "default branch\n")
    hub.state.set_file("old-owner/tool", sha, "src/x.py", "at the pinned commit\n")
    hub.state.rename("old-owner/tool", "new-owner/tool")
    c = _client(hub, tmp_path)
    assert c.file_at("old-owner/tool", sha, "src/x.py") == b"at the pinned commit\n"
    assert hub.count(CONTENTS, status=301) == 1
    asked, followed = c.redirects[0]
    assert "old-owner/tool" in asked
    assert "/repositories/" in followed and f"ref={sha}" in followed
    assert c.file_at("old-owner/tool", sha, "src/x.py") == b"at the pinned commit\n"  # the cached copy is right
    assert c.file_at("old-owner/tool", "main", "src/x.py") == b"default branch\n"
    # GraphQL resolves the old name too
    hub.state.add_pull("new-owner/tool", 7, title="Moved PR", diff=small_diff("a.py", "m"))
    assert c.pull_states([PRRef("old-owner/tool", 7)])[PRRef("old-owner/tool", 7)].title == "Moved PR"


def test_redirect_to_another_host_is_a_clear_error_not_a_traceback(hub, tmp_path):
    """#4: PyGithub raised RuntimeError for a redirect to another host. The client does not follow
    it (the token would go along) and says where the API moved."""
    hub.state.add_repo("old-owner/gone")
    hub.state.set_file("old-owner/gone", "main", "f", "x")
    hub.state.rename("old-owner/gone", "new-owner/gone", other_root=f"http://localhost:{hub.port}")
    c = _client(hub, tmp_path)
    with pytest.raises(FetchError, match="moved to another host") as exc:
        c.file_at("old-owner/gone", "main", "f")
    assert exc.value.row.status == 301 and f"localhost:{hub.port}" in str(exc.value)
    assert "GITHUB_API_URL" in str(exc.value)
    assert not [r for r in hub.requests if r.path.startswith("/api/v3/repositories/")]  # not followed


def test_bodies_are_bytes_end_to_end(hub, tmp_path):
    """#5: a byte that is not UTF-8 in a diff reaches the caller unchanged (was U+FFFD)."""
    hub.state.add_pull(VLLM, 59200, title="Latin-1 bytes", author="someone", diff=NOT_UTF8)
    c = _client(hub, tmp_path)
    got = c.pr_diff_detail(PRRef(VLLM, 59200))
    assert got.data == NOT_UTF8 and got.source == "diff"
    assert c.pr_diff(PRRef(VLLM, 59200)) == NOT_UTF8  # and from the cache (a 304)
    head = hub.state.pull(VLLM, 59200).head_sha
    assert c.commit_diff(VLLM, head) == NOT_UTF8
    hub.state.pull(VLLM, 59200).diff_too_large = True
    hub.state.pull(VLLM, 59200).diff = (
        NOT_UTF8 + b"diff --git a/b.png b/b.png\nBinary files a/b.png and b/b.png differ\n"
    )
    hub.state.repo(VLLM).commits[head].diff = hub.state.pull(VLLM, 59200).diff
    c2 = _client(hub, tmp_path / "second")
    via_commits = c2.pr_diff_detail(PRRef(VLLM, 59200))
    assert via_commits.source == "commits" and NOT_UTF8 in via_commits.data


def test_422_not_available_falls_back_like_406(hub, tmp_path):
    """#6: "Sorry, this diff is taking too long to generate" gets the file-list fallback."""
    hub.state.add_pull(VLLM, 59201, title="Slow diff", author="someone", diff=small_diff("a.py", "s"))
    hub.state.pull(VLLM, 59201).diff_unavailable = True
    c = _client(hub, tmp_path)
    got = c.pr_diff_detail(PRRef(VLLM, 59201))
    assert got.source == "files" and "taking too long" in got.note
    assert got.data.decode() == small_diff("a.py", "s").replace("index 1111111..2222222 100644\n", "")
    assert hub.count(PULL, status=422) == 1
    # a 422 that is not about the diff (no such commit) is still a failure
    with pytest.raises(FetchError) as exc:
        c.commit_diff(VLLM, "0" * 40)
    assert exc.value.row.status == 422


def _binary_tail(tag: str) -> str:
    return f"diff --git a/{tag}.png b/{tag}.png\nindex 1111111..2222222 100644\nBinary files a/{tag}.png and b/{tag}.png differ\n"


def test_commit_fallback_refuses_past_githubs_250_commit_cap(hub, tmp_path):
    """#7: GitHub lists only 250 commits of a PR: a body from them would silently miss the rest."""
    shas = []
    for i in range(260):
        shas.append(hub.state.add_commit(VLLM, message=f"step {i}", diff=small_diff(f"s/{i}.py", str(i))).sha)
    hub.state.add_pull(
        VLLM, 59202, title="Long", author="someone", diff=small_diff("a.py", "l") + _binary_tail("l"), commits=shas
    )
    hub.state.pull(VLLM, 59202).diff_too_large = True
    with pytest.raises(FetchError, match="260 commits while GitHub lists only the first 250") as exc:
        _client(hub, tmp_path).pr_diff(PRRef(VLLM, 59202))
    assert "pull/59202/head" in str(exc.value)
    assert hub.count("GET /repos/{owner}/{repo}/commits/{ref}") == 0  # refused before fetching patches


def test_commit_fallback_skips_merge_commits(hub, tmp_path):
    """#7: a merge of main into the PR branch carries upstream's changes, not the PR's."""
    base = hub.state.pull(VLLM, 57632).base_sha
    one = hub.state.add_commit(VLLM, message="first", diff=small_diff("a.py", "1"), parents=[base])
    merge = hub.state.add_commit(
        VLLM, message="Merge main", diff=small_diff("unrelated/upstream.py", "u"), parents=[one.sha, "b" * 40]
    )
    two = hub.state.add_commit(VLLM, message="second", diff=small_diff("b.py", "2") + _binary_tail("x"))
    two.parents = [merge.sha]
    hub.state.add_pull(
        VLLM,
        59203,
        title="Merged main",
        author="someone",
        diff=small_diff("a.py", "1") + small_diff("b.py", "2") + _binary_tail("x"),
        commits=[one.sha, merge.sha, two.sha],
    )
    hub.state.pull(VLLM, 59203).diff_too_large = True
    got = _client(hub, tmp_path).pr_diff_detail(PRRef(VLLM, 59203))
    assert got.source == "commits" and b"unrelated/upstream.py" not in got.data
    assert b"Subject: [PATCH] first" in got.data and b"Subject: [PATCH] second" in got.data
    assert "skipped 1 merge commit" in got.note and merge.sha[:12] in got.note


@pytest.mark.parametrize(
    ("status", "retry_after", "secondary"),
    [(429, 30, False), (429, None, False), (403, None, True), (403, 120, True)],
)
def test_secondary_rate_limits_403_or_429_with_or_without_retry_after(hub, tmp_path, status, retry_after, secondary):
    c = _client(hub, tmp_path)
    hub.inject(
        "/repos/*/pulls/*", status=status if status == 429 else None, secondary=secondary, retry_after=retry_after
    )
    t = time.time()
    with pytest.raises(FetchError) as exc:
        c.pr_diff(PRRef(VLLM, 57632))
    row = exc.value.row
    assert row.kind == "rate_limit" and row.status == status and "secondary rate limit" in row.message
    wait = retry_after if retry_after is not None else 60  # GitHub: without Retry-After, wait a minute
    assert abs(row.reset_at - (t + wait)) < 3
    hub.inject("/api/graphql", status=429, retry_after=None, times=1)
    rows = c.pull_states([PRRef(VLLM, 57632)])
    assert rows[PRRef(VLLM, 57632)].kind == "rate_limit"


def test_deleted_fork_head_repo_null_is_read(hub, tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    hub.state.pull(VLLM, 58834).head_repo_deleted = True
    anon = GitHubClient(base_url=hub.base_url, cache_dir=tmp_path / "anon", retries=0, gh="")
    row = anon.pull_states([PRRef(VLLM, 58834)])[PRRef(VLLM, 58834)]
    assert row.state == "open" and row.head_sha == hub.state.pull(VLLM, 58834).head_sha


def test_304_costs_rate_limit_only_when_authenticated(hub, tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    anon = GitHubClient(base_url=hub.base_url, cache_dir=tmp_path / "anon", retries=0, gh="")
    anon.pr_diff(PRRef(VLLM, 57632))
    used = hub.rate("core:anon").used
    assert anon.pr_diff_detail(PRRef(VLLM, 57632)).cached  # a 304 …
    assert hub.rate("core:anon").used == used + 1  # … that cost one of the 60 anonymous requests
    c = _client(hub, tmp_path)
    c.pr_diff(PRRef(VLLM, 57632))
    used = hub.rate("core").used
    assert c.pr_diff_detail(PRRef(VLLM, 57632)).cached
    assert hub.rate("core").used == used  # with a token it is free


# ---- real payloads: exchanges recorded against api.github.com (PyGithub's ReplayData) --------------
@pytest.fixture(scope="module")
def replayed():
    from tests.support.fakehub import specs
    from tests.support.fakehub.replay import all_exchanges

    try:
        return all_exchanges(specs.replay_dir(fetch=True))
    except specs.Missing as exc:
        pytest.skip(f"PyGithub's recorded GitHub responses are not available: {exc}")


def _recorded(replayed, pattern: str):
    import re

    seen, out = set(), []
    for e in replayed:
        wanted = e.host == "api.github.com" and e.verb == "GET" and e.status == 200 and re.match(pattern, e.url)
        if wanted and e.url not in seen:
            seen.add(e.url)
            out.append(e)
    return out


def test_real_pull_and_issue_payloads_parse(replayed, tmp_path, monkeypatch):
    from tests.support.fakehub.replay import ReplayServer

    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    pulls = _recorded(replayed, r"^/repos/[^/]+/[^/]+/pulls/\d+$")
    issues = _recorded(replayed, r"^/repos/[^/]+/[^/]+/issues/\d+$")
    assert len(pulls) >= 10 and len(issues) >= 10
    want: dict[PRRef, dict] = {}
    for e, kind in [(e, "pr") for e in pulls] + [(e, "issue") for e in issues]:
        _, _, owner, name, _, number = e.path.split("/")
        want[PRRef(f"{owner}/{name}", int(number), kind)] = json.loads(e.body)
    assert any(d.get("head", {}).get("repo", "") is None for d in want.values())  # deleted forks: real
    with ReplayServer(replayed) as server:
        anon = GitHubClient(base_url=server.base_url, cache_dir=tmp_path, retries=0, gh="")
        rows = anon.pull_states(list(want))
    for ref, doc in want.items():
        row = rows[ref]
        assert isinstance(row, PRState), f"{ref}: {row}"
        assert row.title == doc["title"] and row.author == doc["user"]["login"]
        if ref.kind == "pr":
            assert row.head_sha == doc["head"]["sha"] and row.merged == bool(doc["merged_at"])
            assert row.state == ("merged" if doc["merged_at"] else doc["state"])
        else:
            assert row.is_pull == ("pull_request" in doc)


def test_real_file_lists_rebuild_each_files_patch(replayed):
    from patchset.tracker.github.prdiff import diff_from_files

    lists = _recorded(replayed, r"^/repos/[^/]+/[^/]+/pulls/\d+/files$")
    assert lists
    for e in lists:
        files = json.loads(e.body)
        data, missing = diff_from_files(files)
        text = data.decode("utf-8")
        for f in files:
            if f.get("patch"):
                assert f"diff --git a/{f.get('previous_filename') or f['filename']} b/{f['filename']}" in text
                assert f["patch"] in text
            else:
                assert f["filename"] in missing or not f.get("changes")


def test_real_commit_lists_carry_what_the_fallback_reads(replayed):
    """The merge-commit check reads ``parents``; the 250-cap check reads the pull's ``commits``."""
    lists = _recorded(replayed, r"^/repos/[^/]+/[^/]+/pulls/\d+/commits")
    assert lists
    for e in lists:
        for c in json.loads(e.body):
            assert len(c["sha"]) == 40 and all(len(p["sha"]) == 40 for p in c["parents"])
    for e in _recorded(replayed, r"^/repos/[^/]+/[^/]+/pulls/\d+$"):
        assert isinstance(json.loads(e.body)["commits"], int)


def test_real_contents_payloads_give_the_exact_blob(replayed, tmp_path, monkeypatch):
    import base64
    from urllib.parse import parse_qs, unquote

    from tests.support.fakehub.replay import ReplayServer
    from tests.support.fakehub.state import blob_sha

    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    files = [e for e in _recorded(replayed, r"^/repos/[^/]+/[^/]+/contents/.+") if e.body.startswith("{")]
    files = [e for e in files if json.loads(e.body).get("type") == "file"]
    assert files
    exact = 0
    with ReplayServer(replayed) as server:
        anon = GitHubClient(base_url=server.base_url, cache_dir=tmp_path, retries=0, gh="")
        for e in files:
            _, _, owner, name, _, path = e.path.split("/", 5)
            ref = parse_qs(e.query).get("ref", ["main"])[0]
            doc = json.loads(e.body)
            data = anon.file_at(f"{owner}/{name}", ref, unquote(path))
            assert data == base64.b64decode(doc["content"])
            if len(data) == doc["size"]:  # some recordings were edited by hand after recording
                assert blob_sha(data) == doc["sha"]  # git's own blob id: the exact bytes
                exact += 1
    assert exact >= 1


def test_real_redirect_of_a_moved_repository_is_followed(replayed, tmp_path, monkeypatch):
    """GitHub answered /repos/twbs/bootstrap/contents/js/ with a redirect to /repositories/{id}/…
    (recorded in Issue174.testGetDirContentsWithHttpRedirect): the client follows it itself."""
    from tests.support.fakehub.replay import ReplayServer

    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    with ReplayServer(replayed) as server:
        anon = GitHubClient(base_url=server.base_url, cache_dir=tmp_path, retries=0, gh="")
        with pytest.raises(FetchError, match="is not a file"):  # a directory listing, read after the redirect
            anon.file_at("twbs/bootstrap", "main", "js/")
        assert [s for _, _, s in server.served] == [302, 200]
    assert anon.redirects[0][1].endswith("/repositories/2126244/contents/js")

"""Security issue #23: no deadline on the network. A server on 127.0.0.1 sends its headers and then
one byte every half second: every read succeeds within any per-read timeout, so before
``patchset.upstream.net`` these commands hung (each test here then ran into its pytest timeout).
Now each request has a total deadline, each command a network budget shared by its requests, and
an answer kept in memory a size cap; each limit ends the command with exit 2 and a message that
names what was fetched, the host, the limit and the ``PATCHSET_NET_*`` variable that raises it.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest

from patchset.errors import EnvironmentFailure
from patchset.upstream import net, releases
from tests.support.slowhttp import Reply, SlowServer

TOKEN = "ghp_deadline_test_token"
JSON_TYPE = "application/vnd.pypi.simple.v1+json"
SLOW = 0.5  # seconds between two trickled bytes: far below every per-read timeout
BOUND = 12.0  # a command with a 2 s deadline must be over well within this on a loaded machine


def _status_ledger(root: Path, repos: list[str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    parts = ['schema = 1\ntitle = "deadlines"\n']
    for i, repo in enumerate(repos):
        parts.append(f'\n[targets.t{i}]\nupstream = "https://example.invalid/{repo}.git"\ngithub = "{repo}"\n')
    for i, repo in enumerate(repos):
        parts.append(
            f'\n[[patch]]\nid = "p{i}"\ntarget = "t{i}"\ntitle = "PR"\norigin = "upstream"\n'
            f'[patch.upstream]\nprs = ["{repo}#{i + 1}"]\n'
        )
    (root / "patches.toml").write_text("".join(parts))
    return root


@pytest.fixture
def github_env(tmp_path, monkeypatch):
    """The GitHub client pointed at a server of the test (set ``hub.routes`` / ``hub.default``)."""
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.delenv("GITHUB_API_URL", raising=False)
    with SlowServer() as srv:
        monkeypatch.setenv("PATCHSET_GITHUB_API", srv.url)
        yield srv


def _listing(files: dict[str, bytes], pad: int = 0) -> bytes:
    doc = {
        "meta": {"api-version": "1.1"},
        "name": "demo-pkg",
        "versions": ["1.0"],
        "files": [
            {
                "filename": name,
                "url": f"../../files/{name}",
                "hashes": {"sha256": hashlib.sha256(data).hexdigest()},
                "size": len(data),
            }
            for name, data in files.items()
        ],
    }
    return json.dumps(doc).encode() + b" " * pad


SDIST = "demo_pkg-1.0.tar.gz"
SDIST_BYTES = bytes(range(256)) * 16


@pytest.fixture
def index_env(tmp_path, monkeypatch):
    """A package index of the test (its routes set per test) and a ledger with one patch for it."""
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    with SlowServer() as srv:
        monkeypatch.setenv("PATCHSET_INDEX_URL", srv.url + "/simple")
        yield srv


@pytest.fixture
def index_ledger(tmp_path, run) -> Path:
    led = tmp_path / "led"
    led.mkdir()
    (led / "patches.toml").write_text(
        'schema = 1\ntitle = "t"\n\n[targets.demo]\nupstream = "https://example.invalid/demo.git"\npackage = "demo-pkg"\n'
    )
    patch = tmp_path / "p1.patch"
    patch.write_text("From: a <a@b.c>\nSubject: Change a\n\n--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-a\n+A\n")
    assert run("import", patch, cwd=led).code == 0
    return led


def _timed(run, *args, cwd):
    t0 = time.monotonic()
    r = run(*args, cwd=cwd)
    return r, time.monotonic() - t0


# ---- status --refresh ---------------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_status_refresh_ends_at_the_request_deadline(github_env, tmp_path, run, monkeypatch):
    hub = github_env
    body = b'{"data": {"repository": null}}' + b" " * 2000
    hub.routes["/graphql"] = Reply(body=body, interval=SLOW, fast=5)
    monkeypatch.setenv("PATCHSET_NET_REQUEST_DEADLINE", "2")
    monkeypatch.setenv("PATCHSET_NET_READ_TIMEOUT", "5")  # each byte comes well within it
    led = _status_ledger(tmp_path / "led", ["acme/demo"])
    before = (led / "patches.toml").read_bytes()
    r, took = _timed(run, "status", "--refresh", cwd=led)
    assert r.code == 2, r
    assert took < BOUND, took
    text = r.stdout + r.stderr
    host = hub.url.removeprefix("http://")
    assert f"POST /graphql from {host}: no complete answer within 2 s" in text
    assert "raise PATCHSET_NET_REQUEST_DEADLINE" in text
    assert hub.requests["/graphql"] == 1 and 5 < hub.bytes_sent < len(body)  # cut off mid-body
    assert (led / "patches.toml").read_bytes() == before  # nothing recorded


@pytest.mark.timeout(60)
def test_command_budget_is_shared_by_the_requests_of_one_command(github_env, tmp_path, run, monkeypatch):
    """Three repositories, one GraphQL request each, each taking ~1.5 s (well within the 30 s of
    one request): the command's 2.5 s budget lets the first finish, stops the second, and the
    third is not asked at all."""
    hub = github_env
    answer = b'{"data": {"repository": null}, "errors": [{"type": "NOT_FOUND", "message": "gone"}]}'
    hub.routes["/graphql"] = Reply(body=answer, interval=0.3, fast=len(answer) - 5)
    monkeypatch.setenv("PATCHSET_NET_REQUEST_DEADLINE", "30")
    monkeypatch.setenv("PATCHSET_NET_COMMAND_DEADLINE", "2.5")
    led = _status_ledger(tmp_path / "led", ["acme/one", "acme/two", "acme/three"])
    r, took = _timed(run, "status", "--refresh", "--json", cwd=led)
    assert r.code == 2, r
    assert took < BOUND, took
    assert hub.requests["/graphql"] == 2  # the third was never sent
    errors = {row["id"]: row["pr"]["error"] for row in json.loads(r.stdout)["rows"]}
    assert errors["p0"]["error"] == "not_found"  # finished within the budget
    assert errors["p1"]["error"] == "timeout"
    assert "the command's network budget of 2.5 s (PATCHSET_NET_COMMAND_DEADLINE) ran out" in errors["p1"]["message"]
    assert errors["p2"]["error"] == "timeout"
    assert "not asked, the command's network budget of 2.5 s" in errors["p2"]["message"]
    assert "raise PATCHSET_NET_COMMAND_DEADLINE" in errors["p2"]["message"]


@pytest.mark.timeout(60)
def test_oversized_github_json_is_refused(github_env, tmp_path, run, monkeypatch):
    hub = github_env
    hub.routes["/graphql"] = Reply(body=b'{"data": {"repository": null}}' + b" " * 50_000)
    monkeypatch.setenv("PATCHSET_NET_MAX_JSON", "10000")
    led = _status_ledger(tmp_path / "led", ["acme/demo"])
    r = run("status", "--refresh", "--json", cwd=led)
    assert r.code == 2, r
    (row,) = json.loads(r.stdout)["rows"]
    assert row["pr"]["error"]["error"] == "malformed"
    message = row["pr"]["error"]["message"]
    assert "POST /graphql from 127.0.0.1:" in message
    assert (
        "announces 50030 bytes, more than the 10000 bytes patchset keeps in memory (PATCHSET_NET_MAX_JSON)" in message
    )


# ---- apply --from-index -------------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_apply_from_index_ends_when_the_listing_trickles(index_env, index_ledger, tmp_path, run, monkeypatch):
    index_env.routes["/simple/demo-pkg/"] = Reply(
        body=_listing({SDIST: SDIST_BYTES}, pad=1000), content_type=JSON_TYPE, interval=SLOW, fast=3
    )
    monkeypatch.setenv("PATCHSET_NET_REQUEST_DEADLINE", "2")
    into = tmp_path / "into"
    r, took = _timed(run, "apply", "--from-index", "demo-pkg==1.0", "--into", into, cwd=index_ledger)
    assert r.code == 2, r
    assert took < BOUND, took
    host = index_env.url.removeprefix("http://")
    assert f"error: the package index listing of demo-pkg from {host}: no complete answer within 2 s" in r.stderr
    assert "PATCHSET_NET_REQUEST_DEADLINE" in r.stderr
    assert not into.exists()


@pytest.mark.timeout(60)
def test_apply_from_index_ends_when_the_download_trickles_and_keeps_nothing(
    index_env, index_ledger, tmp_path, run, monkeypatch
):
    index_env.routes["/simple/demo-pkg/"] = Reply(body=_listing({SDIST: SDIST_BYTES}), content_type=JSON_TYPE)
    index_env.routes[f"/files/{SDIST}"] = Reply(
        body=SDIST_BYTES, content_type="application/octet-stream", interval=SLOW, fast=100
    )
    monkeypatch.setenv("PATCHSET_NET_DOWNLOAD_DEADLINE", "2")
    into = tmp_path / "into"
    r, took = _timed(run, "apply", "--from-index", "demo-pkg==1.0", "--into", into, cwd=index_ledger)
    assert r.code == 2, r
    assert took < BOUND, took
    host = index_env.url.removeprefix("http://")
    assert f"error: download {SDIST} from {host}: no complete answer within 2 s" in r.stderr
    assert "PATCHSET_NET_DOWNLOAD_DEADLINE" in r.stderr
    assert 100 < index_env.bytes_sent - len(_listing({SDIST: SDIST_BYTES})) < len(SDIST_BYTES)
    dist = tmp_path / "cache" / "dist"
    assert not dist.exists() or list(dist.iterdir()) == []  # no half-written download, no .part
    assert not into.exists()


@pytest.mark.timeout(60)
def test_headers_sent_byte_by_byte_end_at_the_deadline(index_env, monkeypatch):
    """The watchdog stops a request still waiting for its headers (each header byte arrives in time)."""
    index_env.routes["/simple/demo-pkg/"] = Reply(
        body=_listing({SDIST: SDIST_BYTES}), content_type=JSON_TYPE, interval=SLOW, trickle_headers=True
    )
    monkeypatch.setenv("PATCHSET_NET_REQUEST_DEADLINE", "2")
    t0 = time.monotonic()
    with pytest.raises(net.DeadlineExceeded) as err:
        releases.release_files("demo-pkg==1.0")
    assert time.monotonic() - t0 < BOUND
    assert err.value.exit_code == 2
    assert "the package index listing of demo-pkg" in err.value.message
    assert "set PATCHSET_NET_REQUEST_DEADLINE=SECONDS" in err.value.render()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("length", [True, False], ids=["content-length", "until-close"])
def test_oversized_index_listing_is_refused(index_env, monkeypatch, length):
    index_env.routes["/simple/demo-pkg/"] = Reply(
        body=_listing({SDIST: SDIST_BYTES}, pad=300_000), content_type=JSON_TYPE, length=length
    )
    monkeypatch.setenv("PATCHSET_NET_MAX_JSON", "100000")
    with pytest.raises(net.TooLarge) as err:
        releases.release_files("demo-pkg==1.0")
    assert err.value.exit_code == 2
    said = "announces" if length else "runs past the 100000 bytes"
    assert said in err.value.message and "(PATCHSET_NET_MAX_JSON); refused" in err.value.message
    assert not list(Path(releases.cache.index_dir()).rglob("demo-pkg.json"))  # nothing cached


# ---- fetch of a URL source ------------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_fetch_of_a_url_source_ends_at_the_deadline(tmp_path, run, monkeypatch):
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATCHSET_NET_REQUEST_DEADLINE", "2")
    diff = b"--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-a\n+A\n" * 50
    with SlowServer({"/p.diff": Reply(body=diff, content_type="text/plain", interval=SLOW, fast=10)}) as srv:
        led = tmp_path / "led"
        led.mkdir()
        (led / "patches.toml").write_text(
            'schema = 1\n\n[targets.demo]\nupstream = "https://example.invalid/demo.git"\n\n'
            '[[patch]]\nid = "u1"\ntarget = "demo"\ntitle = "t"\norigin = "upstream"\n'
            f'[patch.source]\nkind = "url"\nref = "{srv.url}/p.diff"\n'
        )
        r, took = _timed(run, "fetch", "u1", cwd=led)
    assert r.code == 2, r
    assert took < BOUND, took
    assert "GET /p.diff from 127.0.0.1:" in r.stdout + r.stderr
    assert "raise PATCHSET_NET_REQUEST_DEADLINE" in r.stdout + r.stderr


# ---- the limits themselves --------------------------------------------------------------------------
def test_limits_defaults_fit_real_use_and_bad_values_are_named():
    lim = net.limits({})
    assert lim.download >= 1800 > lim.request >= 60  # a slow sdist download vs a GraphQL call
    assert lim.command >= lim.download and lim.read < lim.request and lim.connect <= lim.read
    assert lim.max_json >= 32 << 20 and lim.max_body >= lim.max_json
    assert net.limits({net.ENV_REQUEST: "0.5"}).request == 0.5
    assert net.limits({net.ENV_DOWNLOAD: "inf"}).download == float("inf")
    for bad in ("abc", "0", "-3", "nan"):
        with pytest.raises(EnvironmentFailure, match=f"PATCHSET_NET_REQUEST_DEADLINE={bad!r}"):
            net.limits({net.ENV_REQUEST: bad})
    with pytest.raises(EnvironmentFailure, match="PATCHSET_NET_MAX_JSON='1e6' is not a positive number of bytes"):
        net.limits({net.ENV_MAX_JSON: "1e6"})


def test_a_bad_limit_in_the_environment_is_exit_2(github_env, tmp_path, run, monkeypatch):
    monkeypatch.setenv("PATCHSET_NET_COMMAND_DEADLINE", "soon")
    led = _status_ledger(tmp_path / "led", ["acme/demo"])
    r = run("status", "--refresh", cwd=led)
    assert r.code == 2 and "PATCHSET_NET_COMMAND_DEADLINE='soon' is not a positive number of seconds" in r.stderr
    assert github_env.requests["/graphql"] == 0


# ---- the completions client of `check longctx` ------------------------------------------------------
@pytest.mark.timeout(60)
def test_a_trickling_completions_server_ends_at_the_timeout():
    """An engine's answer may take ``--timeout`` as a whole (computed before its first byte), and
    no longer however slowly it trickles."""
    from patchset.verify.engines.client import CompletionsClient, ServerUnreachable

    answer = json.dumps({"choices": [{"text": "x", "index": 0}]}).encode() + b" " * 1000
    with SlowServer({"/v1/completions": Reply(body=answer, interval=SLOW, fast=3)}) as srv:
        client = CompletionsClient(srv.url, "m", timeout=2)
        t0 = time.monotonic()
        with pytest.raises(ServerUnreachable) as err:
            client.complete([1, 2, 3])
        assert time.monotonic() - t0 < BOUND
    assert err.value.exit_code == 2
    assert "POST /v1/completions from 127.0.0.1:" in err.value.message
    assert "no complete answer within 2 s" in err.value.message and "raise --timeout" in err.value.message


def test_pages_of_a_list_are_capped_together(tmp_path):
    """Each page of a PR's file list is under the JSON cap; the list as a whole is not."""
    from patchset.tracker.github import GitHubClient
    from patchset.upstream.refs import FetchError, PRRef

    def page(name: str) -> bytes:
        patch = "@@ -1 +1 @@\n-a\n+b\n" + " x" * 900
        return json.dumps([{"filename": name, "status": "modified", "changes": 2, "patch": patch}]).encode()

    refused = b'{"message": "Sorry, the diff exceeded the maximum number of files", "errors": [{"code": "too_large"}]}'
    with SlowServer() as srv:
        srv.routes["/repos/acme/demo/pulls/1"] = Reply(status=406, body=refused)
        srv.routes["/repos/acme/demo/pulls/1/files"] = Reply(
            body=page("a.txt"), headers={"Link": f'<{srv.url}/page2>; rel="next"'}
        )
        srv.routes["/page2"] = Reply(body=page("b.txt"))
        client = GitHubClient(base_url=srv.url, token=TOKEN, cache_dir=tmp_path / "c", retries=0)
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("PATCHSET_NET_MAX_JSON", str(len(page("a.txt")) + 100))
            with pytest.raises(FetchError) as err:
                client.pr_diff_detail(PRRef("acme/demo", 1))
        assert srv.requests["/page2"] == 1
    assert err.value.exit_code == 2
    assert "the pages together run past" in err.value.message and "PATCHSET_NET_MAX_JSON" in err.value.message

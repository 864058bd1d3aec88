"""The local GitHub-shaped server behaves like GitHub's API for the requests the tracker makes.

Checked with plain HTTP (requests) and with PyGithub's own object layer, and, when GitHub's
OpenAPI description (npm ``@octokit/openapi``) can be had, against its response schemas.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from github import Auth, Github

from patchset.errors import InputError
from tests.support.fakehub import specs
from tests.support.fakehub.graphql import Obj, execute
from tests.support.fakehub.server import FakeHub, media_of
from tests.support.fakehub.world import ledger_world, small_diff

TOKEN = "tok-fakehub-test"
REPO = "vllm-project/vllm"


@pytest.fixture()
def hub(serve_hub):
    data = ledger_world()
    data["tokens"] = [TOKEN]
    repo = data["repos"][REPO]
    repo["contents"] = {"main": {"README.md": "hello\n", "dir/data.bin": {"base64": "AAEC/w=="}}}
    many = "".join(small_diff(f"pkg/f{i:03d}.py", str(i)) for i in range(7))
    repo["pulls"]["59000"] = {"title": "Seven files", "author": "someone", "diff": many}
    repo["pulls"]["59001"] = {"title": "Huge", "author": "someone", "diff": many, "diff_too_large": True}
    return serve_hub(data)


def _s(token: str | None = TOKEN) -> requests.Session:
    s = requests.Session()
    if token:
        s.headers["Authorization"] = f"token {token}"
    return s


def test_loopback_only():
    with pytest.raises(InputError, match="loopback"):
        FakeHub({}, host="0.0.0.0")


def test_etag_304_and_rate_headers(hub):
    s = _s()
    url = f"{hub.base_url}/repos/{REPO}/pulls/57632"
    first = s.get(url)
    assert first.status_code == 200
    etag = first.headers["ETag"]
    assert etag.startswith('W/"') and first.headers["X-RateLimit-Resource"] == "core"
    remaining = int(first.headers["X-RateLimit-Remaining"])
    assert int(first.headers["X-RateLimit-Limit"]) == 5000 and remaining == 4999
    assert int(first.headers["X-RateLimit-Used"]) == 1
    assert int(first.headers["X-RateLimit-Reset"]) > time.time()
    again = s.get(url, headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    assert int(again.headers["X-RateLimit-Remaining"]) == remaining  # a 304 is free
    assert hub.count("GET /repos/{owner}/{repo}/pulls/{number}", status=304) == 1
    # the diff media type is a different representation: a different ETag, not a 304
    diff = s.get(url, headers={"Accept": "application/vnd.github.v3.diff", "If-None-Match": etag})
    assert diff.status_code == 200 and diff.text.startswith("diff --git")
    assert diff.headers["ETag"] != etag
    assert int(diff.headers["X-RateLimit-Remaining"]) == remaining - 1


def test_force_push_changes_head_diff_and_etag(hub):
    s = _s()
    url = f"{hub.base_url}/repos/{REPO}/pulls/58834"
    before = s.get(url)
    new = small_diff("vllm/models/glm5next/common/model.py", "v2", lines=3)
    sha = hub.force_push(REPO, 58834, new)
    after = s.get(url, headers={"If-None-Match": before.headers["ETag"]})
    assert after.status_code == 200
    assert after.json()["head"]["sha"] == sha != before.json()["head"]["sha"]
    assert s.get(url, headers={"Accept": "application/vnd.github.diff"}).text == new
    commits = s.get(url + "/commits").json()
    assert [c["sha"] for c in commits] == [sha]


def test_merge_and_close(hub):
    s = _s()
    sha = hub.merge(REPO, 58250)
    pr = s.get(f"{hub.base_url}/repos/{REPO}/pulls/58250").json()
    assert pr["merged"] is True and pr["merge_commit_sha"] == sha and pr["state"] == "closed"
    assert pr["merged_at"] and pr["closed_at"] == pr["merged_at"]
    hub.close("NVIDIA/nccl", 2334)
    issue = s.get(f"{hub.base_url}/repos/NVIDIA/nccl/issues/2334").json()
    assert issue["state"] == "closed" and issue["state_reason"] == "completed"
    # a PR through the issues endpoint carries pull_request
    as_issue = s.get(f"{hub.base_url}/repos/{REPO}/issues/58250").json()
    assert as_issue["pull_request"]["merged_at"] == pr["merged_at"]


def test_write_endpoints_pulls_issues_and_comments(hub):
    s, api = _s(), f"{hub.base_url}/repos/{REPO}"
    owner = REPO.split("/")[0]
    assert _s(None).post(f"{api}/issues", json={"title": "t"}).status_code == 401  # writes need a token
    assert s.post(f"{api}/issues", data=b"{not json").status_code == 400
    bad = s.post(f"{api}/issues", json={"body": "no title"})
    assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "title"
    top = max([*hub.state.repo(REPO).issues, *hub.state.repo(REPO).pulls])
    pr = s.post(f"{api}/pulls", json={"title": "gate", "head": f"{owner}:refresh", "base": "main", "body": "b1"})
    assert pr.status_code == 201 and pr.json()["number"] == top + 1 and pr.json()["head"]["ref"] == "refresh"
    again = s.post(f"{api}/pulls", json={"title": "gate", "head": "refresh", "base": "main"})
    assert again.status_code == 422 and "already exists" in again.json()["errors"][0]["message"]
    issue = s.post(f"{api}/issues", json={"title": "red", "labels": ["gate"]})
    assert issue.status_code == 201 and issue.json()["number"] == top + 2  # one sequence for both
    listed = s.get(f"{api}/pulls", params={"head": f"{owner}:refresh", "base": "main"}).json()
    assert [p["number"] for p in listed] == [top + 1]
    edited = s.patch(f"{api}/pulls/{top + 1}", json={"body": "b2", "state": "closed"}).json()
    assert (edited["title"], edited["body"], edited["state"]) == ("gate", "b2", "closed") and edited["closed_at"]
    assert s.get(f"{api}/pulls", params={"head": f"{owner}:refresh"}).json() == []  # default: open only
    comment = s.post(f"{api}/issues/{top + 2}/comments", json={"body": "still red"})
    assert comment.status_code == 201 and comment.json()["issue_url"].endswith(f"/issues/{top + 2}")
    assert s.post(f"{api}/issues/{top + 2}/comments", json={}).status_code == 422
    assert s.post(f"{api}/issues/{top + 9}/comments", json={"body": "x"}).status_code == 404
    closed = s.patch(f"{api}/issues/{top + 2}", json={"state": "closed"}).json()
    assert (closed["state"], closed["state_reason"], closed["comments"]) == ("closed", "completed", 1)
    with_label = s.get(f"{api}/issues", params={"state": "all", "labels": "gate"}).json()
    assert [i["number"] for i in with_label] == [top + 2]
    assert [c.body for c in hub.state.repo(REPO).issues[top + 2].comments] == ["still red"]
    assert hub.count("POST /repos/{owner}/{repo}/issues", status=201) == 1
    assert hub.count("PATCH /repos/{owner}/{repo}/pulls/{number}") == 1


def test_pagination_links(hub):
    s = _s()
    url = f"{hub.base_url}/repos/{REPO}/pulls/59000/files"
    names = []
    page = s.get(url, params={"per_page": 3})
    links = [page.headers.get("Link", "")]
    names += [f["filename"] for f in page.json()]
    while 'rel="next"' in links[-1]:
        nxt = links[-1].split(";")[0].strip("<>")
        page = s.get(nxt)
        links.append(page.headers.get("Link", ""))
        names += [f["filename"] for f in page.json()]
    assert names == [f"pkg/f{i:03d}.py" for i in range(7)]
    assert len(links) == 3
    assert 'rel="last"' in links[0] and "page=3" in links[0]
    assert 'rel="prev"' in links[2] and 'rel="next"' not in links[2]
    f0 = s.get(url, params={"per_page": 1}).json()[0]
    assert f0["status"] == "modified" and f0["additions"] == 1 and f0["patch"].startswith("@@ -1,2 +1,2 @@")


def test_too_large_diff_is_406_with_github_body(hub):
    r = _s().get(f"{hub.base_url}/repos/{REPO}/pulls/59001", headers={"Accept": "application/vnd.github.diff"})
    assert r.status_code == 406
    body = r.json()
    assert body["errors"][0] == {"resource": "PullRequest", "field": "diff", "code": "too_large"}
    assert "maximum number of lines" in body["message"] and body["status"] == "406"
    # the JSON representation of the same PR still works
    assert _s().get(f"{hub.base_url}/repos/{REPO}/pulls/59001").json()["changed_files"] == 7


def test_commit_media_types_and_contents(hub):
    s = _s()
    pr = s.get(f"{hub.base_url}/repos/{REPO}/pulls/57632").json()
    sha = pr["head"]["sha"]
    base = f"{hub.base_url}/repos/{REPO}/commits/{sha}"
    assert s.get(base).json()["files"][0]["filename"].endswith("cudagraph.py")
    assert s.get(base, headers={"Accept": "application/vnd.github.diff"}).text.startswith("diff --git")
    patch = s.get(base, headers={"Accept": "application/vnd.github.patch"}).text
    assert patch.startswith(f"From {sha} ") and "Subject: [PATCH]" in patch
    assert s.get(base, headers={"Accept": "application/vnd.github.sha"}).text == sha
    missing = s.get(f"{hub.base_url}/repos/{REPO}/commits/{'0' * 40}")
    assert missing.status_code == 422 and "No commit found" in missing.json()["message"]
    c = s.get(f"{hub.base_url}/repos/{REPO}/contents/dir/data.bin").json()
    assert c["encoding"] == "base64" and c["size"] == 4
    import base64

    assert base64.b64decode(c["content"]) == b"\x00\x01\x02\xff"
    raw = s.get(
        f"{hub.base_url}/repos/{REPO}/contents/README.md",
        params={"ref": "main"},
        headers={"Accept": "application/vnd.github.raw"},
    )
    assert raw.content == b"hello\n"
    assert s.get(f"{hub.base_url}/repos/{REPO}/contents/README.md", params={"ref": "nope"}).status_code == 404


def test_rate_limit_exhaustion_403(hub):
    hub.set_rate_limit("core", remaining=0, reset_in=600)
    r = _s().get(f"{hub.base_url}/repos/{REPO}")
    assert r.status_code == 403
    assert r.json()["message"].startswith("API rate limit exceeded")
    assert r.headers["X-RateLimit-Remaining"] == "0"
    assert abs(int(r.headers["X-RateLimit-Reset"]) - (time.time() + 600)) < 5
    # /rate_limit itself is free and reports the bucket
    rl = _s().get(f"{hub.base_url}/rate_limit").json()
    assert rl["resources"]["core"]["remaining"] == 0 and rl["rate"]["remaining"] == 0


def test_auth_unauthenticated_and_bad_token(hub):
    bad = _s("wrong").get(f"{hub.base_url}/repos/{REPO}")
    assert bad.status_code == 401 and bad.json()["message"] == "Bad credentials"
    anon = _s(None).get(f"{hub.base_url}/repos/{REPO}")
    assert anon.status_code == 200 and anon.headers["X-RateLimit-Limit"] == "60"
    gql = _s(None).post(hub.graphql_url, json={"query": "{ rateLimit { remaining } }"})
    assert gql.status_code == 401 and "requires you to be authenticated" in gql.json()["message"]


def test_faults(hub):
    s = _s()
    url = f"{hub.base_url}/repos/{REPO}/pulls/57632"
    hub.inject("/repos/*/pulls/57632", status=502, times=1)
    r = s.get(url)
    assert r.status_code == 502 and r.headers["Content-Type"].startswith("text/html")
    assert s.get(url).status_code == 200  # times=1: only the first
    hub.inject("/repos/*/pulls/57632", status=503, times=1)
    assert s.get(url).json()["message"] == "Service Unavailable"
    hub.inject("/repos/*/pulls/57632", malformed=True, times=1)
    with pytest.raises(ValueError):
        json.loads(s.get(url).text)
    hub.inject(url.replace(hub.root_url, ""), status=404, times=1)  # full path form
    assert s.get(url).status_code == 404
    hub.inject("/repos/*", delay=2.0, times=1)
    t = time.monotonic()
    with pytest.raises(requests.exceptions.ReadTimeout):
        s.get(url, timeout=0.5)
    assert time.monotonic() - t < 1.5
    hub.inject("/api/graphql", secondary=True, times=1)
    r = s.post(hub.graphql_url, json={"query": "{ rateLimit { remaining } }"})
    assert r.status_code == 403 and r.headers["Retry-After"] == "60" and "secondary rate limit" in r.json()["message"]


GQL = """
query($owner: String!, $name: String!) {
  repository(owner: $owner, name: $name) {
    a: pullRequest(number: 57632) { ...F }
    b: pullRequest(number: 1) { ...F }
    c: issueOrPullRequest(number: 58250) { __typename ... on PullRequest { isDraft state } }
  }
}
fragment F on PullRequest { number state merged mergeCommit { oid } author { login }
  commits(last: 1) { totalCount nodes { commit { oid statusCheckRollup { state } } } } headRefOid }
"""


def test_graphql_batch_aliases_and_not_found(hub):
    r = _s().post(hub.graphql_url, json={"query": GQL, "variables": {"owner": "vllm-project", "name": "vllm"}})
    assert r.status_code == 200 and r.headers["X-RateLimit-Resource"] == "graphql"
    body = r.json()
    a = body["data"]["repository"]["a"]
    assert a["state"] == "MERGED" and a["merged"] is True and a["author"]["login"] == "Juntian777"
    assert a["commits"]["nodes"][0]["commit"]["oid"] == a["headRefOid"]
    assert a["commits"]["nodes"][0]["commit"]["statusCheckRollup"] == {"state": "SUCCESS"}
    assert body["data"]["repository"]["b"] is None
    assert body["data"]["repository"]["c"] == {"__typename": "PullRequest", "isDraft": True, "state": "OPEN"}
    (err,) = body["errors"]
    assert err["type"] == "NOT_FOUND" and err["path"] == ["repository", "b"]
    assert err["message"] == "Could not resolve to a PullRequest with the number of 1."
    assert err["locations"][0]["line"] == 5


def test_graphql_missing_repo_unknown_field_and_rate_limit(hub):
    s = _s()
    r = s.post(hub.graphql_url, json={"query": '{ repository(owner: "x", name: "y") { name } }'}).json()
    assert r["data"] == {"repository": None} and r["errors"][0]["type"] == "NOT_FOUND"
    r = s.post(hub.graphql_url, json={"query": '{ repository(owner: "NVIDIA", name: "nccl") { bogus } }'}).json()
    assert "data" not in r and r["errors"][0]["message"] == "Field 'bogus' doesn't exist on type 'Repository'"
    r = s.post(hub.graphql_url, json={"query": "{ repository(owner: "}).json()
    assert "Parse error" in r["errors"][0]["message"]
    hub.set_rate_limit("graphql", remaining=0, reset_in=300)
    resp = s.post(hub.graphql_url, json={"query": "{ rateLimit { remaining } }"})
    assert resp.status_code == 200 and resp.json()["errors"][0]["type"] == "RATE_LIMITED"
    assert resp.headers["X-RateLimit-Remaining"] == "0"


def test_graphql_engine_features():
    root = Obj("Query", {"x": lambda a: Obj("T", {"n": a.get("n"), "s": "v"}, ("I",))})
    q = "query Q($v: Int = 3, $skip: Boolean!) { one: x(n: $v) { n ... on I { s } } two: x(n: 5) @skip(if: $skip) { n } }"
    assert execute(q, {"skip": True}, root) == {"data": {"one": {"n": 3, "s": "v"}}}
    assert execute(q, {"skip": False, "v": 7}, root)["data"]["two"] == {"n": 5}
    assert "errors" in execute(q, {}, root)  # required variable missing
    assert "queries only" in execute("mutation { x }", {}, root)["errors"][0]["message"]


def test_media_type_parsing():
    assert media_of("application/vnd.github.v3.diff") == "diff"
    assert media_of("application/vnd.github.diff") == "diff"
    assert media_of("application/vnd.github.patch, */*") == "patch"
    assert media_of("application/vnd.github.raw+json") == "raw"  # GitHub's documented raw type for contents
    assert media_of("application/vnd.github+json") == "json"
    assert media_of("*/*") == "json"


def test_pygithub_object_layer_reads_the_shapes(hub):
    """PyGithub's own classes (not just raw JSON) parse what the server sends."""
    gh = Github(base_url=hub.base_url, auth=Auth.Token(TOKEN), seconds_between_requests=None)
    repo = gh.get_repo(REPO)
    assert repo.full_name == REPO and repo.default_branch == "main"
    pr = repo.get_pull(57632)
    assert pr.merged and pr.user.login == "Juntian777" and len(pr.head.sha) == 40
    files = list(repo.get_pull(59000).get_files())  # PaginatedList follows Link headers
    assert [f.filename for f in files] == [f"pkg/f{i:03d}.py" for i in range(7)]
    commits = list(pr.get_commits())
    assert commits[0].sha == pr.head.sha
    assert repo.get_commit(pr.head.sha).files[0].additions == 1
    assert repo.get_issue(58250).pull_request is not None
    assert gh.get_repo("NVIDIA/nccl").get_issue(2334).title.startswith("RoCE")
    assert repo.get_contents("dir/data.bin").decoded_content == b"\x00\x01\x02\xff"
    assert gh.get_rate_limit().resources.core.limit == 5000
    gh.close()


def test_cli_serves_a_state_file(tmp_path):
    data = tmp_path / "state.json"
    data.write_text(json.dumps(ledger_world()))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.fakehub", "--port", "0", "--data", str(data)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("fakehub listening on http://127.0.0.1:")
        base = line.split()[3]
        r = requests.get(f"{base}/repos/NVIDIA/nccl/pulls/2393", timeout=5)
        assert r.status_code == 200 and r.json()["user"]["login"] == "kodlan"
        # the admin endpoints drive it from another process
        requests.post(
            base.replace("/api/v3", "/_fakehub/merge"), json={"repo": "NVIDIA/nccl", "number": 2393}, timeout=5
        )
        assert requests.get(f"{base}/repos/NVIDIA/nccl/pulls/2393", timeout=5).json()["merged"] is True
        counts = requests.get(base.replace("/api/v3", "/_fakehub/requests"), timeout=5).json()
        assert counts["by_endpoint"] == {"GET /repos/{owner}/{repo}/pulls/{number}": 2}
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert proc.returncode == 0


def test_cli_bad_state_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"repos": {"a/b": {"pulls": {"1": {"nope": 1}}}}}')
    out = subprocess.run(
        [sys.executable, "-m", "tests.support.fakehub", "--data", str(bad)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
        timeout=30,
    )
    assert out.returncode == 2 and "unknown keys ['nope']" in out.stderr and "Traceback" not in out.stderr


# ---- schema validation against GitHub's OpenAPI description ---------------------------------
def _openapi_spec() -> dict:
    try:
        return specs.openapi(fetch=True)
    except specs.Missing as exc:
        pytest.skip(str(exc))


def _to_jsonschema(s):
    """OpenAPI 3.0 ``nullable`` -> JSON Schema type unions."""
    if isinstance(s, list):
        return [_to_jsonschema(x) for x in s]
    if not isinstance(s, dict):
        return s
    out = {k: _to_jsonschema(v) for k, v in s.items() if k not in ("nullable", "example", "examples")}
    if s.get("nullable"):
        return {"anyOf": [out, {"type": "null"}]}
    return out


@pytest.mark.network
def test_responses_match_githubs_openapi_schemas(hub):
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema not installed")
    spec = _openapi_spec()
    s = _s()
    pr = s.get(f"{hub.base_url}/repos/{REPO}/pulls/57632").json()
    cases = [
        ("/repos/{owner}/{repo}", f"/repos/{REPO}"),
        ("/repos/{owner}/{repo}/pulls/{pull_number}", f"/repos/{REPO}/pulls/57632"),
        ("/repos/{owner}/{repo}/pulls/{pull_number}", f"/repos/{REPO}/pulls/58250"),
        ("/repos/{owner}/{repo}/pulls/{pull_number}/files", f"/repos/{REPO}/pulls/59000/files"),
        ("/repos/{owner}/{repo}/pulls/{pull_number}/commits", f"/repos/{REPO}/pulls/57632/commits"),
        ("/repos/{owner}/{repo}/commits/{ref}", f"/repos/{REPO}/commits/{pr['head']['sha']}"),
        ("/repos/{owner}/{repo}/issues/{issue_number}", "/repos/NVIDIA/nccl/issues/2334"),
        ("/repos/{owner}/{repo}/issues/{issue_number}", f"/repos/{REPO}/issues/58250"),
        ("/repos/{owner}/{repo}/contents/{path}", f"/repos/{REPO}/contents/README.md"),
        ("/rate_limit", "/rate_limit"),
    ]
    for template, path in cases:
        schema = spec["paths"][template]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
        body = s.get(hub.base_url + path).json()
        jsonschema.Draft4Validator(_to_jsonschema(schema)).validate(body)
    # the write endpoints
    api = f"{hub.base_url}/repos/{REPO}"
    pull = s.post(f"{api}/pulls", json={"title": "t", "head": "h", "base": "main"}).json()
    issue = s.post(f"{api}/issues", json={"title": "t", "labels": ["l"]}).json()
    writes = [
        ("/repos/{owner}/{repo}/pulls", "post", "201", pull),
        ("/repos/{owner}/{repo}/issues", "post", "201", issue),
        (
            "/repos/{owner}/{repo}/issues/{issue_number}/comments",
            "post",
            "201",
            s.post(f"{api}/issues/{issue['number']}/comments", json={"body": "c"}).json(),
        ),
        (
            "/repos/{owner}/{repo}/pulls/{pull_number}",
            "patch",
            "200",
            s.patch(f"{api}/pulls/{pull['number']}", json={"state": "closed"}).json(),
        ),
        (
            "/repos/{owner}/{repo}/issues/{issue_number}",
            "patch",
            "200",
            s.patch(f"{api}/issues/{issue['number']}", json={"state": "closed"}).json(),
        ),
        ("/repos/{owner}/{repo}/pulls", "get", "200", s.get(f"{api}/pulls", params={"state": "all"}).json()),
        ("/repos/{owner}/{repo}/issues", "get", "200", s.get(f"{api}/issues", params={"state": "all"}).json()),
        ("/repos/{owner}/{repo}/issues", "post", "422", s.post(f"{api}/issues", json={}).json()),
    ]
    for template, method, status, body in writes:
        schema = spec["paths"][template][method]["responses"][status]["content"]["application/json"]["schema"]
        jsonschema.Draft4Validator(_to_jsonschema(schema)).validate(body)
    # error bodies: "Basic Error"
    err_schema = spec["paths"]["/repos/{owner}/{repo}/pulls/{pull_number}"]["get"]["responses"]["406"]
    body = s.get(f"{hub.base_url}/repos/{REPO}/pulls/59001", headers={"Accept": "application/vnd.github.diff"}).json()
    jsonschema.Draft4Validator(_to_jsonschema(err_schema["content"]["application/json"]["schema"])).validate(body)


# ---- strict where GitHub is strict, and GitHub's odd answers (issue #12) ----------------------
OLD_DOCUMENT = """query($owner: String!, $name: String!) {
  repository(owner: $owner, name: $name) { pr1: pullRequest(number: 57632) { ...PRFields } }
}
fragment PRFields on PullRequest { number state }
fragment IssueFields on Issue { number state }
"""


def test_graphql_document_with_an_unused_fragment_is_refused_even_without_the_schema():
    data = ledger_world()
    with FakeHub(data, graphql_schema=None) as h:
        assert h.validator.mode == "schema-free rules only"
        r = _s().post(
            h.graphql_url, json={"query": OLD_DOCUMENT, "variables": {"owner": "vllm-project", "name": "vllm"}}
        )
        body = r.json()
        assert r.status_code == 200 and "data" not in body
        assert body["errors"][0]["message"] == "Fragment IssueFields was defined, but not used"
        assert body["errors"][0]["locations"] == [{"line": 5, "column": 1}]


def test_moved_repository_301_keeps_path_and_query(hub):
    hub.state.set_file(REPO, "v1", "a.txt", "one\n")
    repo = hub.state.rename(REPO, "vllm-project/vllm-renamed")
    s = _s()
    r = s.get(f"{hub.base_url}/repos/{REPO}/contents/a.txt", params={"ref": "v1"}, allow_redirects=False)
    assert r.status_code == 301 and r.json()["message"] == "Moved Permanently"
    assert r.headers["Location"] == f"{hub.base_url}/repositories/{repo.id}/contents/a.txt?ref=v1"
    assert r.json()["url"] == r.headers["Location"]
    followed = s.get(r.headers["Location"], headers={"Accept": "application/vnd.github.raw+json"})
    assert followed.content == b"one\n"
    hub.state.rename("vllm-project/vllm-renamed", "elsewhere/vllm", other_root="http://localhost:1")
    r = s.get(f"{hub.base_url}/repos/vllm-project/vllm-renamed/pulls/57632", allow_redirects=False)
    assert r.status_code == 301 and r.headers["Location"].startswith("http://localhost:1/api/v3/repositories/")


def test_contents_over_1mb_is_403_too_large_for_json_only(hub):
    hub.state.set_file(REPO, "main", "big.bin", b"\x01" * (1024 * 1024 + 1))
    url = f"{hub.base_url}/repos/{REPO}/contents/big.bin"
    r = _s().get(url)
    assert r.status_code == 403
    assert r.json()["errors"] == [{"resource": "Blob", "field": "data", "code": "too_large"}]
    raw = _s().get(url, headers={"Accept": "application/vnd.github.raw+json"})
    assert raw.status_code == 200 and len(raw.content) == 1024 * 1024 + 1


def test_diff_not_available_422_and_non_utf8_bytes(hub):
    pull = hub.state.pull(REPO, 58834)
    pull.diff_unavailable = True
    r = _s().get(f"{hub.base_url}/repos/{REPO}/pulls/58834", headers={"Accept": "application/vnd.github.diff"})
    assert r.status_code == 422 and r.json()["errors"][0]["code"] == "not_available"
    assert "taking too long" in r.json()["message"]
    pull.diff_unavailable = False
    pull.diff = b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-\xe9\n+\xff\n"
    r = _s().get(f"{hub.base_url}/repos/{REPO}/pulls/58834", headers={"Accept": "application/vnd.github.diff"})
    assert r.content == pull.diff
    files = _s().get(f"{hub.base_url}/repos/{REPO}/pulls/58834/files").json()
    assert files[0]["patch"] == "@@ -1 +1 @@\n-\ufffd\n+\ufffd"  # JSON carries text: replaced


def test_429_with_and_without_retry_after(hub):
    url = f"{hub.base_url}/repos/{REPO}/pulls/57632"
    hub.inject("/repos/*", status=429, retry_after=7, times=1)
    r = _s().get(url)
    assert r.status_code == 429 and r.headers["Retry-After"] == "7" and "secondary rate limit" in r.json()["message"]
    hub.inject("/repos/*", status=429, retry_after=None, times=1)
    r = _s().get(url)
    assert r.status_code == 429 and "Retry-After" not in r.headers
    hub.inject("/repos/*", secondary=True, retry_after=None, times=1)
    r = _s().get(url)
    assert r.status_code == 403 and "Retry-After" not in r.headers


def test_head_repo_null_when_the_fork_is_gone(hub):
    hub.state.pull(REPO, 58834).head_repo_deleted = True
    pr = _s().get(f"{hub.base_url}/repos/{REPO}/pulls/58834").json()
    assert pr["head"]["repo"] is None and len(pr["head"]["sha"]) == 40 and pr["base"]["repo"]["full_name"] == REPO


def test_304_is_free_only_with_a_token(hub):
    url = f"{hub.base_url}/repos/{REPO}/pulls/57632"
    for session, bucket in ((_s(None), "core:anon"), (_s(), "core")):
        etag = session.get(url).headers["ETag"]
        used = hub.rate(bucket).used
        assert session.get(url, headers={"If-None-Match": etag}).status_code == 304
        assert hub.rate(bucket).used == used + (1 if bucket == "core:anon" else 0)

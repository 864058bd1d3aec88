"""The tracker against GitHub's own published descriptions of its API, not only against the fake.

- GraphQL: every document the client can send (PR-only, issue-only, mixed, a full chunk of
  aliases, the largest repository of the real ledger) passes all of the spec's validation rules
  (graphql-core) against GitHub's published schema (npm ``@octokit/graphql-schema``); the
  document the client sent before issue #12 does not, and the fake now refuses it as GitHub does.
- REST: every call the client makes (method, path, query parameters, media type) is an
  operation of GitHub's OpenAPI description (npm ``@octokit/openapi``), and every body the fake
  serves for it validates against that operation's response schema.
- A ``status --refresh`` of the real ledger sends only documents that validate; what it costs
  (requests, GraphQL points) is counted here and reported in docs/github.md.

The descriptions come from the npm registry into ``$PATCHSET_CACHE/npm`` (``.ci/run`` runs
``python -m tests.support.fakehub.specs``); without them these tests skip and say why.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from patchset.ledger import store
from patchset.tracker.github import GitHubClient
from patchset.tracker.github.graphql import MAX_ALIASES, build_query
from patchset.tracker.status import ROLES, status
from patchset.upstream.refs import PRRef
from tests.support.fakehub import specs
from tests.support.fakehub.server import FakeHub
from tests.support.fakehub.world import ledger_world, small_diff, world_for_refs

graphql = pytest.importorskip("graphql", reason="graphql-core is not installed (pip install -e '.[test]')")
jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed")

TOKEN = "ghp_conformance0000000000000000000000000"
VLLM = "vllm-project/vllm"
REPO_ROOT = Path(__file__).resolve().parents[1]

# What build_query sent before #12, for a repository whose refs are all pull requests: the
# IssueFields fragment defined but unused, and ``state`` of two types under one key.
OLD_PR_ONLY = """query($owner: String!, $name: String!) {
  rateLimit { limit remaining resetAt cost }
  repository(owner: $owner, name: $name) {
    pr57632: pullRequest(number: 57632) { ...PRFields }
  }
}
fragment PRFields on PullRequest { number title url state isDraft merged mergedAt closedAt updatedAt author { login } mergeCommit { oid } headRefOid reviewDecision commits(last: 1) { nodes { commit { oid statusCheckRollup { state } } } } }
fragment IssueFields on Issue { number title url state stateReason closedAt updatedAt author { login } }
"""
OLD_MIXED = OLD_PR_ONLY.replace(
    "{ ...PRFields }\n  }",
    "{ ...PRFields }\n    issue2334: issueOrPullRequest(number: 2334) { __typename ...IssueFields ...PRFields }\n  }",
)


@pytest.fixture(scope="module")
def schema() -> Any:
    try:
        return specs.graphql_schema(fetch=True)
    except specs.Missing as exc:
        pytest.skip(f"GitHub's GraphQL schema is not available: {exc}")


@pytest.fixture(scope="module")
def openapi() -> dict[str, Any]:
    try:
        return specs.openapi(fetch=True)
    except specs.Missing as exc:
        pytest.skip(f"GitHub's OpenAPI description is not available: {exc}")


def _problems(schema: Any, document: str) -> list[str]:
    return [e.message for e in graphql.validate(schema, graphql.parse(document), graphql.specified_rules)]


def _ledger_refs(path: Path) -> list[PRRef]:
    ledger = store.load_ledger(path)
    refs: list[PRRef] = []
    for p in ledger.patches:
        for attr, kind in ROLES:
            for text in getattr(p.upstream, attr):
                ref = PRRef.parse(text, None, kind)
                if ref not in refs:
                    refs.append(ref)
    return refs


# ---- GraphQL -----------------------------------------------------------------------------------
def test_every_document_the_client_can_send_validates(schema):
    real = _ledger_refs(REPO_ROOT / "patches.toml")
    by_repo: dict[str, list[PRRef]] = {}
    for r in real:
        by_repo.setdefault(r.repo, []).append(r)
    largest = max(by_repo.values(), key=len)
    assert len(largest) >= 5, "the real ledger's largest repository should have several refs"
    full = [PRRef(VLLM, n, "issue" if n % 3 == 0 else "pr") for n in range(1, MAX_ALIASES + 1)]
    cases = {
        "pr-only": [PRRef(VLLM, 57632), PRRef(VLLM, 58704)],
        "issue-only": [PRRef("NVIDIA/nccl", 2334, "issue")],
        "mixed": [PRRef("NVIDIA/nccl", 2393), PRRef("NVIDIA/nccl", 2334, "issue")],
        f"{MAX_ALIASES} aliases": full,
        f"real ledger, {largest[0].repo}": largest,
        **{f"real ledger, {repo}": refs for repo, refs in by_repo.items()},
    }
    for name, refs in cases.items():
        for start in range(0, len(refs), MAX_ALIASES):  # the chunks the client sends
            doc = build_query(refs[start : start + MAX_ALIASES])
            assert _problems(schema, doc) == [], name


def test_the_old_documents_fail_githubs_rules(schema):
    assert _problems(schema, OLD_PR_ONLY) == ["Fragment 'IssueFields' is never used."]
    mixed = _problems(schema, OLD_MIXED)
    assert len(mixed) == 1 and "Fields 'state' conflict" in mixed[0] and "IssueState!" in mixed[0]


def test_the_fake_rejects_the_old_document_as_github_does(schema):
    data = ledger_world()
    data["tokens"] = [TOKEN]
    with FakeHub(data) as hub:
        assert hub.validator.mode.startswith("all rules, @octokit/graphql-schema")
        import requests

        s = requests.Session()
        s.headers["Authorization"] = f"bearer {TOKEN}"
        variables = {"owner": "vllm-project", "name": "vllm"}
        old = s.post(hub.graphql_url, json={"query": OLD_PR_ONLY, "variables": variables}).json()
        assert "data" not in old
        assert [e["message"] for e in old["errors"]] == ["Fragment IssueFields was defined, but not used"]
        conflict = s.post(hub.graphql_url, json={"query": OLD_MIXED, "variables": variables}).json()
        assert "data" not in conflict and "conflict" in conflict["errors"][0]["message"]
        new = s.post(hub.graphql_url, json={"query": build_query([PRRef(VLLM, 57632)]), "variables": variables}).json()
        assert "errors" not in new and new["data"]["repository"]["pr57632"]["state"] == "MERGED"


def test_status_refresh_of_the_real_ledger_sends_only_valid_documents(schema, real_ledger, tmp_path, capsys):
    ledger = real_ledger / "patches.toml"
    refs = _ledger_refs(ledger)
    data = world_for_refs(refs)
    data["tokens"] = [TOKEN]
    with FakeHub(data) as hub:
        client = GitHubClient(base_url=hub.base_url, token=TOKEN, cache_dir=tmp_path / "cache", retries=0)
        report = status(ledger, refresh=True, client=client)
        docs = list(hub.graphql_documents)
        assert docs and all(_problems(schema, d) == [] for d in docs)
        errors = [r.pr.error for r in report.rows if r.pr and r.pr.error]
        assert errors == []  # every ref got a state: no document was refused
        repos = {r.repo for r in refs}
        assert len(docs) == len(repos)  # one document per repository (each under 100 refs)
        gql = hub.count("POST /graphql")
        rest = hub.count() - gql
        points = hub.rate("graphql").used
        with capsys.disabled():
            print(
                f"\nstatus --refresh of the real ledger: {len(refs)} refs in {len(repos)} repositories -> "
                f"{gql} GraphQL requests ({points} points), {rest} REST requests {dict(hub.counts())}"
            )
        # a second refresh: GraphQL has no conditional requests; the REST diffs are free 304s
        hub.reset_counts()
        before = hub.rate("core").used
        status(ledger, refresh=True, client=client)
        assert hub.count("POST /graphql") == len(repos)
        assert hub.rate("core").used == before  # the REST reads were 304s: no cost with a token
        assert hub.count(status=200) == hub.count("POST /graphql")
        # without a token: GitHub's GraphQL refuses, so one REST read per ref (60 per hour)
        hub.reset_counts()
        anon_before = hub.rate("core:anon").used
        anon = GitHubClient(base_url=hub.base_url, token=None, gh="", cache_dir=tmp_path / "anon", retries=0)
        status(ledger, refresh=True, client=anon)
        assert hub.count("POST /graphql") == 0 and hub.count() == len(refs)
        anon_cost = hub.rate("core:anon").used - anon_before
        status(ledger, refresh=True, client=anon)  # again: 304s, which cost without a token
        assert hub.rate("core:anon").used - anon_before == 2 * len(refs)
        with capsys.disabled():
            print(f"without a token: {hub.count()} REST requests over two refreshes, {anon_cost} per refresh")


# ---- REST ------------------------------------------------------------------------------------
def _rest_world() -> dict[str, Any]:
    data = ledger_world()
    data["tokens"] = [TOKEN]
    vllm = data["repos"][VLLM]
    vllm["contents"] = {"main": {"vllm/small.py": "A = 1\n", "vllm/big.bin": {"base64": ""}}}
    many = "".join(small_diff(f"f/{i:03d}.py", str(i)) for i in range(120))
    vllm["pulls"]["59100"] = {"title": "Huge", "author": "someone", "diff": many, "diff_too_large": True}
    binary = small_diff("vllm/a.py", "bin") + (
        "diff --git a/img.png b/img.png\nindex 1111111..2222222 100644\nBinary files a/img.png and b/img.png differ\n"
    )
    vllm["pulls"]["59101"] = {"title": "Slow", "author": "someone", "diff": binary, "diff_unavailable": True}
    vllm["pulls"]["59102"] = {"title": "Fork gone", "author": "someone", "diff": small_diff("x.py", "g")}
    data["repos"]["old-owner/old-name"] = {"description": "renamed below"}
    data["repos"]["old-owner/old-name"]["contents"] = {"v1": {"README": "moved\n"}}
    return data


def _exercise(hub: FakeHub, tmp_path: Path) -> None:
    """Every kind of REST call the client makes, with and without a token."""
    hub.state.set_file(VLLM, "main", "vllm/big.bin", b"\x00" * (1024 * 1024 + 5))
    hub.state.pull(VLLM, 59102).head_repo_deleted = True
    hub.state.rename("old-owner/old-name", "new-owner/new-name")
    c = GitHubClient(base_url=hub.base_url, token=TOKEN, cache_dir=tmp_path / "c1", retries=0)
    c.pull_states([PRRef(VLLM, 57632), PRRef("NVIDIA/nccl", 2334, "issue")])
    c.pr_diff(PRRef(VLLM, 57632))
    c.pr_diff(PRRef(VLLM, 59100))  # 406 -> file pages
    c.pr_diff(PRRef(VLLM, 59101))  # 422 -> files lack a patch -> pull + commits + commit patches
    head = c.pull_states([PRRef(VLLM, 58704)])[PRRef(VLLM, 58704)].head_sha
    c.commit_diff(VLLM, head)
    c.file_at(VLLM, "main", "vllm/small.py")
    c.file_at(VLLM, "main", "vllm/big.bin")  # 403 too_large -> raw
    c.file_at("old-owner/old-name", "v1", "README")  # 301 -> /repositories/{id}/...
    anon = GitHubClient(base_url=hub.base_url, token=None, gh="", cache_dir=tmp_path / "c2", retries=0)
    anon.pull_states([PRRef(VLLM, 58834), PRRef(VLLM, 59102), PRRef("NVIDIA/nccl", 2334, "issue")])


def _template_of(spec: dict[str, Any], path: str) -> str | None:
    rel = path.removeprefix("/api/v3")
    for template in spec["paths"]:
        rx = "^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$"
        if template.endswith("/contents/{path}"):
            rx = rx.replace(r"contents/[^/]+$", "contents/.+$")
        if re.match(rx, rel):
            return template
    return None


def _documented_media(op: dict[str, Any]) -> set[str]:
    media = {"application/vnd.github+json", "application/json"}  # GitHub's default, always accepted
    for resp in op["responses"].values():
        media |= set((resp.get("content") or {}).keys())
    return media | set(re.findall(r"application/vnd\.github[\w.+-]*", op.get("description", "")))


def _to_jsonschema(s: Any) -> Any:
    """OpenAPI 3.0 ``nullable`` -> JSON Schema type unions."""
    if isinstance(s, list):
        return [_to_jsonschema(x) for x in s]
    if not isinstance(s, dict):
        return s
    out = {k: _to_jsonschema(v) for k, v in s.items() if k not in ("nullable", "example", "examples")}
    return {"anyOf": [out, {"type": "null"}]} if s.get("nullable") else out


def _known_gap(e: Any) -> bool:
    """Where GitHub's description is stricter than GitHub: it says ``head.repo`` of a pull request
    is an object, but GitHub sends null once the fork is deleted (recorded in PyGithub's
    ReplayData, ``PullRequest.setUp.txt``; see test_github_client.py's replay tests)."""
    return list(e.absolute_path) in (["head", "repo"], [0, "head", "repo"]) and e.instance is None


def test_every_rest_call_is_a_documented_operation_and_every_fake_body_matches(openapi, tmp_path):
    with FakeHub(_rest_world()) as hub:
        hub.keep_bodies = True
        _exercise(hub, tmp_path)
        records = [r for r in hub.requests if r.endpoint != "POST /graphql"]
    assert {r.status for r in records} >= {200, 301, 403, 406, 422}
    basic_error = _to_jsonschema(
        openapi["paths"]["/repos/{owner}/{repo}/pulls/{pull_number}"]["get"]["responses"]["406"]["content"][
            "application/json"
        ]["schema"]
    )
    checked: set[tuple[str, str, int]] = set()
    for r in records:
        assert r.api_version == "2022-11-28", r.path
        rel = r.path.removeprefix("/api/v3")
        if rel.startswith("/repositories/"):
            continue  # the target of GitHub's own 301 (not described in the OpenAPI document)
        template = _template_of(openapi, r.path)
        assert template is not None, f"{r.method} {r.path} is not in GitHub's REST description"
        op = openapi["paths"][template].get(r.method.lower())
        assert op is not None, f"{r.method} {template} is not in GitHub's REST description"
        declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "query"}
        sent = {k for k, _ in (pair.split("=", 1) for pair in r.query.split("&") if pair)}
        assert sent <= declared, f"{r.method} {template}: undocumented query {sent - declared}"
        accept = r.accept.split(",")[0].strip()
        assert accept in _documented_media(op), f"{r.method} {template}: undocumented media type {accept}"
        if r.body is None or not r.content_type.startswith("application/json") or r.status == 304:
            continue
        body = json.loads(r.body)
        resp = op["responses"].get(str(r.status))
        schema = ((resp or {}).get("content") or {}).get("application/json", {}).get("schema")
        if schema is None and r.status >= 300:
            schema = basic_error  # a status GitHub sends but does not describe here (301, 422 not_available)
        assert schema is not None, f"{r.method} {template} {r.status}: no schema to check against"
        errors = [e for e in jsonschema.Draft4Validator(_to_jsonschema(schema)).iter_errors(body) if not _known_gap(e)]
        assert errors == [], f"{r.method} {template} {r.status}: {errors[0].message if errors else ''}"
        checked.add((r.method, template, r.status))
    templates = {t for _, t, _ in checked}
    assert {
        "/repos/{owner}/{repo}/pulls/{pull_number}",
        "/repos/{owner}/{repo}/pulls/{pull_number}/files",
        "/repos/{owner}/{repo}/pulls/{pull_number}/commits",
        "/repos/{owner}/{repo}/issues/{issue_number}",
        "/repos/{owner}/{repo}/contents/{path}",
    } <= templates
    assert ("GET", "/repos/{owner}/{repo}/contents/{path}", 403) in checked  # too_large, documented

"""The client's one GraphQL document per repository, and the rows read back from its answer.

With a token the state of every tracked PR and issue of a repository costs one request: an
aliased field per ref (up to ``MAX_ALIASES``), each asking the PR's state, merge commit, head,
review decision, CI rollup and the cross-references of its timeline (``tracker.followups``), so
reverts and follow-ups come in the same answer. The document passes GitHub's validation rules
(no unused fragment, no two fields of different types under one response key). Each aliased
node is checked field by field (``tracker.github.payloads``): one malformed value, or an error on one
alias, marks that row only. What it costs: docs/github.md.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from patchset.tracker.followups import TIMELINE, parse_timeline
from patchset.tracker.github.failures import Failure, reset_of
from patchset.tracker.github.payloads import Unreadable, pr_from_graphql
from patchset.tracker.github.transport import Transport, failure, short
from patchset.upstream.refs import GRAPHQL, MALFORMED, NOT_FOUND, RATE_LIMIT, PRRef, PRState, RowError

__all__ = ["MAX_ALIASES", "PR_FIELDS", "build_query", "fetch_states", "parse_states"]

MAX_ALIASES = 100  # refs per GraphQL request; a repository with more is split into several
PR_FIELDS = (
    "number title url state isDraft merged mergedAt closedAt createdAt updatedAt author { login } "
    "mergeCommit { oid } headRefOid reviewDecision "
    "commits(last: 1) { nodes { commit { oid statusCheckRollup { state } } } } " + TIMELINE
)
# ``state`` is an IssueState on an Issue and a PullRequestState on a PullRequest: selecting both
# under one response key in ``issueOrPullRequest`` breaks the spec's OverlappingFieldsCanBeMerged
# rule, so the issue's is aliased.
ISSUE_FIELDS = "number title url issueState: state stateReason closedAt createdAt updatedAt author { login }"


def build_query(refs: Iterable[PRRef]) -> str:
    """The one GraphQL document for a repository: an aliased field per ref. Only the fragments
    the document uses are defined: GitHub rejects a document with an unused fragment."""
    lines = []
    used: set[str] = set()
    for ref in refs:
        if ref.kind == "pr":
            lines.append(f"    {ref.alias}: pullRequest(number: {ref.number}) {{ ...PRFields }}")
            used.add("PRFields")
        else:
            lines.append(
                f"    {ref.alias}: issueOrPullRequest(number: {ref.number}) {{ __typename ...IssueFields ...PRFields }}"
            )
            used.update(("PRFields", "IssueFields"))
    fragments = {
        "PRFields": f"fragment PRFields on PullRequest {{ {PR_FIELDS} }}\n",
        "IssueFields": f"fragment IssueFields on Issue {{ {ISSUE_FIELDS} }}\n",
    }
    return (
        "query($owner: String!, $name: String!) {\n"
        "  rateLimit { limit remaining resetAt cost }\n"
        "  repository(owner: $owner, name: $name) {\n"
        + "\n".join(lines)
        + "\n  }\n}\n"
        + "".join(text for name, text in fragments.items() if name in used)
    )


def fetch_states(transport: Transport, repo: str, refs: list[PRRef]) -> dict[PRRef, PRState | RowError]:
    """Ask GitHub for ``refs`` of ``repo`` in one GraphQL request; a failed request is the
    error of every row."""
    owner, name = repo.split("/", 1)
    try:
        resp = transport.send(
            "POST",
            transport.requester().graphql_url,
            payload={"query": build_query(refs), "variables": {"owner": owner, "name": name}},
        )
        if resp.status != 200:
            raise failure(resp)
        doc = resp.json()
        if not isinstance(doc, dict):
            raise Failure(RowError(MALFORMED, "GraphQL answer is not an object"))
    except Failure as f:
        return {r: f.row for r in refs}
    return parse_states(repo, refs, doc, resp.headers)


def parse_states(
    repo: str, refs: list[PRRef], doc: Mapping[str, Any], headers: Mapping[str, str] | None = None
) -> dict[PRRef, PRState | RowError]:
    """Turn one GraphQL answer into a row per ref (a state, or the error that hit that alias)."""
    errors = doc.get("errors") or []
    if not isinstance(errors, list):
        errors = [{"message": str(errors)}]
    by_alias: dict[str, dict[str, Any]] = {}
    general: list[dict[str, Any]] = []
    for e in errors:
        if not isinstance(e, dict):
            continue
        path = e.get("path") or []
        if isinstance(path, list) and len(path) >= 2 and path[0] == "repository":
            by_alias[str(path[1])] = e
        else:
            general.append(e)
    for e in general:
        if e.get("type") == "RATE_LIMITED":
            row = RowError(
                RATE_LIMIT,
                str(e.get("message") or "GraphQL rate limit exceeded"),
                reset_at=reset_of(headers or {}),
                status=200,
            )
            return {r: row for r in refs}
    data = doc.get("data")
    repo_node = data.get("repository") if isinstance(data, dict) else None
    first = general[0] if general else {}
    if repo_node is None:
        return {r: _unanswered(first, f"no data for {repo}", repository=True) for r in refs}
    if not isinstance(repo_node, dict):
        return {r: RowError(MALFORMED, "repository is not an object") for r in refs}
    now = time.time()
    out: dict[PRRef, PRState | RowError] = {}
    for ref in refs:
        node = repo_node.get(ref.alias)
        if node is None:
            out[ref] = _unanswered(by_alias.get(ref.alias) or first, f"no data for {ref}")
            continue
        try:
            state = pr_from_graphql(ref, node, now)
        except Unreadable as bad:
            out[ref] = bad.row()
            continue
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            out[ref] = RowError(MALFORMED, f"unexpected GraphQL shape for {ref} ({short(exc)})")
            continue
        if state.is_pull and "timelineItems" in node:  # its cross-references, checked item by item
            found, state.followup_notes = parse_timeline(repo, ref.number, node)
            state.followups = [f.to_json() for f in found]
        out[ref] = state
    return out


def _unanswered(e: Mapping[str, Any], fallback: str, *, repository: bool = False) -> RowError:
    """The row of a node the answer lacks, from its error ``e`` ({}: none); a missing PR is a 404."""
    kind = NOT_FOUND if e.get("type") == "NOT_FOUND" else (GRAPHQL if e else MALFORMED)
    status = 404 if kind == NOT_FOUND and not repository else None
    return RowError(kind, str(e.get("message") or fallback), status=status)

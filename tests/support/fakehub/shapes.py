"""GitHub REST response shapes, built from the fake hub's state.

The field sets follow GitHub's published OpenAPI description (``@octokit/openapi``): every field
the description marks *required* for these endpoints is present with the documented type, so a
client that parses real GitHub responses parses these too (``tests/test_fakehub.py`` validates
them against the description when it is cached). Values that GitHub computes from data the fake
does not keep (avatars, counters, file modes, blob ids of PR files) are plausible constants.
"""

from __future__ import annotations

import base64
from typing import Any

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from tests.support.fakehub.state import Comment, Commit, Issue, Pull, Repo, as_bytes, as_text, blob_sha, fake_sha

DOCS = "https://docs.github.com/rest"


class Urls:
    """Where things live: ``api`` is the REST root (``…/api/v3``), ``html`` the web root."""

    def __init__(self, root: str) -> None:
        self.html = root.rstrip("/")
        self.api = self.html + "/api/v3"


def user(login: str, u: Urls, uid: int | None = None) -> dict[str, Any]:
    uid = uid if uid is not None else (int(fake_sha("user", login)[:7], 16))
    a = f"{u.api}/users/{login}"
    return {
        "login": login,
        "id": uid,
        "node_id": f"U_{uid}",
        "avatar_url": f"{u.html}/avatars/{login}",
        "gravatar_id": "",
        "url": a,
        "html_url": f"{u.html}/{login}",
        "followers_url": f"{a}/followers",
        "following_url": f"{a}/following{{/other_user}}",
        "gists_url": f"{a}/gists{{/gist_id}}",
        "starred_url": f"{a}/starred{{/owner}}{{/repo}}",
        "subscriptions_url": f"{a}/subscriptions",
        "organizations_url": f"{a}/orgs",
        "repos_url": f"{a}/repos",
        "events_url": f"{a}/events{{/privacy}}",
        "received_events_url": f"{a}/received_events",
        "type": "User",
        "site_admin": False,
    }


def repository(repo: Repo, u: Urls) -> dict[str, Any]:
    a = f"{u.api}/repos/{repo.full_name}"
    h = f"{u.html}/{repo.full_name}"
    open_issues = sum(1 for p in repo.pulls.values() if p.state == "open") + sum(
        1 for i in repo.issues.values() if i.state == "open"
    )
    out: dict[str, Any] = {
        "id": repo.id,
        "node_id": f"R_{repo.id}",
        "name": repo.name,
        "full_name": repo.full_name,
        "owner": user(repo.owner, u),
        "private": False,
        "html_url": h,
        "description": repo.description,
        "fork": False,
        "url": a,
        "homepage": None,
        "language": "Python",
        "mirror_url": None,
        "license": None,
        "default_branch": repo.default_branch,
        "size": 1,
        "created_at": repo.created_at,
        "updated_at": repo.updated_at,
        "pushed_at": repo.updated_at,
        "git_url": f"git://{u.html.split('://', 1)[-1]}/{repo.full_name}.git",
        "ssh_url": f"git@localhost:{repo.full_name}.git",
        "clone_url": f"{h}.git",
        "svn_url": h,
        "forks": 0,
        "forks_count": 0,
        "stargazers_count": 0,
        "watchers": 0,
        "watchers_count": 0,
        "open_issues": open_issues,
        "open_issues_count": open_issues,
        "network_count": 0,
        "subscribers_count": 0,
        "has_issues": True,
        "has_projects": False,
        "has_wiki": False,
        "has_pages": False,
        "has_downloads": True,
        "has_discussions": False,
        "archived": False,
        "disabled": False,
        "visibility": "public",
        "topics": [],
    }
    for key, tail in [
        ("archive_url", "/{archive_format}{/ref}"),
        ("assignees_url", "/assignees{/user}"),
        ("blobs_url", "/git/blobs{/sha}"),
        ("branches_url", "/branches{/branch}"),
        ("collaborators_url", "/collaborators{/collaborator}"),
        ("comments_url", "/comments{/number}"),
        ("commits_url", "/commits{/sha}"),
        ("compare_url", "/compare/{base}...{head}"),
        ("contents_url", "/contents/{+path}"),
        ("contributors_url", "/contributors"),
        ("deployments_url", "/deployments"),
        ("downloads_url", "/downloads"),
        ("events_url", "/events"),
        ("forks_url", "/forks"),
        ("git_commits_url", "/git/commits{/sha}"),
        ("git_refs_url", "/git/refs{/sha}"),
        ("git_tags_url", "/git/tags{/sha}"),
        ("hooks_url", "/hooks"),
        ("issue_comment_url", "/issues/comments{/number}"),
        ("issue_events_url", "/issues/events{/number}"),
        ("issues_url", "/issues{/number}"),
        ("keys_url", "/keys{/key_id}"),
        ("labels_url", "/labels{/name}"),
        ("languages_url", "/languages"),
        ("merges_url", "/merges"),
        ("milestones_url", "/milestones{/number}"),
        ("notifications_url", "/notifications{?since,all,participating}"),
        ("pulls_url", "/pulls{/number}"),
        ("releases_url", "/releases{/id}"),
        ("stargazers_url", "/stargazers"),
        ("statuses_url", "/statuses/{sha}"),
        ("subscribers_url", "/subscribers"),
        ("subscription_url", "/subscription"),
        ("tags_url", "/tags"),
        ("teams_url", "/teams"),
        ("trees_url", "/git/trees{/sha}"),
    ]:
        out[key] = a + tail
    return out


def _label(repo: Repo, name: str, u: Urls) -> dict[str, Any]:
    lid = int(fake_sha("label", repo.full_name, name)[:7], 16)
    return {
        "id": lid,
        "node_id": f"LA_{lid}",
        "url": f"{u.api}/repos/{repo.full_name}/labels/{name}",
        "name": name,
        "description": None,
        "color": "ededed",
        "default": False,
    }


def pull(repo: Repo, p: Pull, u: Urls) -> dict[str, Any]:
    a = f"{u.api}/repos/{repo.full_name}"
    h = f"{u.html}/{repo.full_name}"
    files = diff_files(p.diff)
    repo_json = repository(repo, u)

    def side(ref: str, sha: str, gone: bool = False) -> dict[str, Any]:
        # A pull request whose fork was deleted has ``head.repo: null`` (GitHub keeps the label).
        return {
            "label": f"{repo.owner}:{ref}",
            "ref": ref,
            "sha": sha,
            "user": user(repo.owner, u),
            "repo": None if gone else repo_json,
        }

    links = {
        "self": f"{a}/pulls/{p.number}",
        "html": p.html_url or f"{h}/pull/{p.number}",
        "issue": f"{a}/issues/{p.number}",
        "comments": f"{a}/issues/{p.number}/comments",
        "review_comments": f"{a}/pulls/{p.number}/comments",
        "review_comment": f"{a}/pulls/comments{{/number}}",
        "commits": f"{a}/pulls/{p.number}/commits",
        "statuses": f"{a}/statuses/{p.head_sha}",
    }
    return {
        "url": links["self"],
        "id": p.id,
        "node_id": f"PR_{p.id}",
        "html_url": links["html"],
        "diff_url": f"{h}/pull/{p.number}.diff",
        "patch_url": f"{h}/pull/{p.number}.patch",
        "issue_url": links["issue"],
        "commits_url": links["commits"],
        "review_comments_url": links["review_comments"],
        "review_comment_url": links["review_comment"],
        "comments_url": links["comments"],
        "statuses_url": links["statuses"],
        "number": p.number,
        "state": p.state,
        "locked": False,
        "title": p.title,
        "user": user(p.author, u),
        "body": p.body or None,
        "labels": [_label(repo, n, u) for n in p.labels],
        "milestone": None,
        "active_lock_reason": None,
        "created_at": p.created_at,
        "updated_at": p.updated_at,
        "closed_at": p.closed_at,
        "merged_at": p.merged_at,
        "merge_commit_sha": p.merge_commit_sha,
        "assignee": None,
        "assignees": [],
        "requested_reviewers": [],
        "requested_teams": [],
        "head": side(p.head_ref, p.head_sha, p.head_repo_deleted),
        "base": side(p.base_ref, p.base_sha),
        "_links": {k: {"href": v} for k, v in links.items()},
        "author_association": "CONTRIBUTOR",
        "auto_merge": None,
        "draft": p.draft,
        "merged": p.merged,
        # GitHub computes mergeability in the background (null at first); the fake answers at once.
        "mergeable": None if p.state == "closed" else True,
        "rebaseable": None if p.state == "closed" else True,
        "mergeable_state": "unknown" if p.state == "closed" else "clean",
        "merged_by": user(p.merged_by, u) if p.merged and p.merged_by else None,
        "comments": len(p.comments),
        "review_comments": 0,
        "maintainer_can_modify": False,
        "commits": len(p.commits),
        "additions": sum(f["additions"] for f in files),
        "deletions": sum(f["deletions"] for f in files),
        "changed_files": len(files),
    }


def issue(repo: Repo, i: Issue | Pull, u: Urls) -> dict[str, Any]:
    """An issue; a pull request served through the issues endpoint carries ``pull_request``."""
    a = f"{u.api}/repos/{repo.full_name}"
    h = f"{u.html}/{repo.full_name}"
    is_pull = isinstance(i, Pull)
    out: dict[str, Any] = {
        "id": i.id,
        "node_id": f"I_{i.id}",
        "url": f"{a}/issues/{i.number}",
        "repository_url": a,
        "labels_url": f"{a}/issues/{i.number}/labels{{/name}}",
        "comments_url": f"{a}/issues/{i.number}/comments",
        "events_url": f"{a}/issues/{i.number}/events",
        "html_url": f"{h}/{'pull' if is_pull else 'issues'}/{i.number}",
        "number": i.number,
        "state": i.state,
        "state_reason": None if is_pull else i.state_reason,
        "title": i.title,
        "body": i.body or None,
        "user": user(i.author, u),
        "labels": [_label(repo, n, u) for n in i.labels],
        "assignee": None,
        "assignees": [],
        "milestone": None,
        "locked": False,
        "active_lock_reason": None,
        "comments": len(i.comments),
        "closed_at": i.closed_at,
        "created_at": i.created_at,
        "updated_at": i.updated_at,
        "author_association": "CONTRIBUTOR",
    }
    if is_pull:
        out["pull_request"] = {
            "url": f"{a}/pulls/{i.number}",
            "html_url": f"{h}/pull/{i.number}",
            "diff_url": f"{h}/pull/{i.number}.diff",
            "patch_url": f"{h}/pull/{i.number}.patch",
            "merged_at": i.merged_at,
        }
        out["draft"] = i.draft
    return out


def issue_comment(repo: Repo, number: int, c: Comment, u: Urls) -> dict[str, Any]:
    """A comment on issue (or pull request) ``number``, as the issue comments API returns it."""
    a = f"{u.api}/repos/{repo.full_name}"
    return {
        "id": c.id,
        "node_id": f"IC_{c.id}",
        "url": f"{a}/issues/comments/{c.id}",
        "html_url": f"{u.html}/{repo.full_name}/issues/{number}#issuecomment-{c.id}",
        "body": c.body,
        "user": user(c.author, u),
        "created_at": c.created_at,
        "updated_at": c.updated_at,
        "issue_url": f"{a}/issues/{number}",
        "author_association": "OWNER" if c.author == repo.owner else "CONTRIBUTOR",
    }


def diff_files(diff: str | bytes) -> list[dict[str, Any]]:
    """The per-file entries GitHub lists for a diff (without URLs): name, status, counts, patch.

    ``patch`` is the file's hunks from the first ``@@`` on, without the trailing newline, as GitHub
    returns it. GitHub leaves ``patch`` out for binary files and very large file diffs; so does this.
    A diff that is not UTF-8 is listed with U+FFFD in place of the bad bytes (JSON carries text).
    """
    diff = as_text(diff)
    if not diff.strip():
        return []
    try:
        ps = PatchSet(diff)
    except UnidiffParseError:
        return []
    sections = _raw_sections(diff)
    if len(sections) != len(ps):
        sections = ["".join(str(h) for h in pf) for pf in ps]
    out = []
    for pf, raw in zip(ps, sections, strict=False):
        path = pf.path
        if pf.is_added_file:
            status = "added"
        elif pf.is_removed_file:
            status = "removed"
        elif pf.is_rename:
            status = "renamed"
        else:
            status = "modified"
        entry: dict[str, Any] = {
            "filename": path,
            "status": status,
            "additions": pf.added,
            "deletions": pf.removed,
            "changes": pf.added + pf.removed,
        }
        if pf.is_rename:
            src = pf.source_file
            entry["previous_filename"] = src[2:] if src.startswith("a/") else src
        hunks = raw
        if hunks and not pf.is_binary_file:
            entry["patch"] = hunks.rstrip("\n")
        # GitHub reports the new blob's id; the fake has no blobs for PR files, so it derives one.
        entry["sha"] = None if status == "removed" else fake_sha("blob", path, hunks)
        out.append(entry)
    return out


def _raw_sections(diff: str) -> list[str]:
    """Each file's hunks exactly as written (from its first ``@@`` line), one per ``diff --git``."""
    sections: list[list[str]] = []
    for line in diff.splitlines(keepends=True):
        if line.startswith("diff --git "):
            sections.append([])
        elif sections and (sections[-1] or line.startswith("@@")):
            sections[-1].append(line)
    return ["".join(s) for s in sections]


def file_entry(repo: Repo, ref: str, entry: dict[str, Any], u: Urls) -> dict[str, Any]:
    name = entry["filename"]
    return {
        **entry,
        "blob_url": f"{u.html}/{repo.full_name}/blob/{ref}/{name}",
        "raw_url": f"{u.html}/{repo.full_name}/raw/{ref}/{name}",
        "contents_url": f"{u.api}/repos/{repo.full_name}/contents/{name}?ref={ref}",
    }


def commit(repo: Repo, c: Commit, u: Urls, with_files: bool = True) -> dict[str, Any]:
    a = f"{u.api}/repos/{repo.full_name}"
    person = {"name": c.author_name, "email": c.author_email, "date": c.date}
    out: dict[str, Any] = {
        "url": f"{a}/commits/{c.sha}",
        "sha": c.sha,
        "node_id": f"C_{c.sha[:16]}",
        "html_url": f"{u.html}/{repo.full_name}/commit/{c.sha}",
        "comments_url": f"{a}/commits/{c.sha}/comments",
        "commit": {
            "url": f"{a}/git/commits/{c.sha}",
            "author": person,
            "committer": person,
            "message": c.message,
            "comment_count": 0,
            "tree": {"sha": fake_sha("tree", c.sha), "url": f"{a}/git/trees/{fake_sha('tree', c.sha)}"},
            "verification": {
                "verified": False,
                "reason": "unsigned",
                "payload": None,
                "signature": None,
                "verified_at": None,
            },
        },
        "author": user(c.author, u),
        "committer": user(c.author, u),
        "parents": [
            {"sha": p, "url": f"{a}/commits/{p}", "html_url": f"{u.html}/{repo.full_name}/commit/{p}"}
            for p in c.parents
        ],
    }
    if with_files:
        files = diff_files(c.diff)
        adds = sum(f["additions"] for f in files)
        dels = sum(f["deletions"] for f in files)
        out["stats"] = {"additions": adds, "deletions": dels, "total": adds + dels}
        out["files"] = [file_entry(repo, c.sha, f, u) for f in files]
    return out


def commit_patch(c: Commit) -> bytes:
    """``git format-patch`` style bytes for one commit (GitHub's ``vnd.github.patch`` media type);
    the diff part is byte for byte the commit's diff."""
    subject, _, rest = c.message.partition("\n")
    body = rest.strip("\n")
    diff = as_bytes(c.diff)
    head = (
        f"From {c.sha} Mon Sep 17 00:00:00 2001\n"
        f"From: {c.author_name} <{c.author_email}>\n"
        f"Date: {c.date}\n"
        f"Subject: [PATCH] {subject}\n\n" + (body + "\n\n" if body else "") + "---\n"
    )
    return head.encode("utf-8") + diff + (b"" if diff.endswith(b"\n") or not diff else b"\n") + b"--\n2.45.0\n\n"


def content(repo: Repo, ref: str, path: str, data: bytes, u: Urls) -> dict[str, Any]:
    """A file from the contents API. Content over 1 MB comes back empty with encoding "none", as on
    GitHub (the caller must then ask for the raw media type)."""
    a = f"{u.api}/repos/{repo.full_name}"
    sha = blob_sha(data)
    big = len(data) > 1024 * 1024
    enc = base64.b64encode(data).decode("ascii")
    wrapped = "\n".join(enc[i : i + 60] for i in range(0, len(enc), 60)) + ("\n" if enc else "")
    self_url = f"{a}/contents/{path}?ref={ref}"
    html = f"{u.html}/{repo.full_name}/blob/{ref}/{path}"
    git = f"{a}/git/blobs/{sha}"
    return {
        "type": "file",
        "encoding": "none" if big else "base64",
        "size": len(data),
        "name": path.rsplit("/", 1)[-1],
        "path": path,
        "content": "" if big else wrapped,
        "sha": sha,
        "url": self_url,
        "git_url": git,
        "html_url": html,
        "download_url": f"{u.html}/{repo.full_name}/raw/{ref}/{path}",
        "_links": {"self": self_url, "git": git, "html": html},
    }


def error(message: str, status: int, doc: str = DOCS, **extra: Any) -> dict[str, Any]:
    """GitHub's "Basic Error" body: message, documentation_url and (recently) status as a string."""
    return {"message": message, "documentation_url": doc, "status": str(status), **extra}

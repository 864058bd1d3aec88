"""The state behind the local GitHub-shaped server: repositories, pulls, issues, commits, files.

Kept apart from the HTTP layer so tests can build a world in Python (or load one from a JSON
file), mutate it while the server runs (force-push, merge, close), and so the REST shapes and
the GraphQL executor read one consistent model. Every mutation goes through ``HubState.lock``.

JSON state file (every key optional except the repo names)::

    {"tokens": ["tok1"],                      # accepted tokens; absent = any token is accepted
     "repos": {"vllm-project/vllm": {
         "default_branch": "main", "description": "...",
         "pulls":   {"57632": {"title": "...", "author": "someone", "state": "open", "draft": false,
                               "merged_at": null, "merge_commit_sha": null, "head_sha": "...",
                               "review_decision": "APPROVED", "ci": "SUCCESS", "diff": "diff --git ...",
                               "diff_too_large": false, "commits": ["<sha>", ...]}},
         "issues":  {"2334": {"title": "...", "author": "...", "state": "open",
                              "comments": [{"body": "...", "author": "login"}]}},
         "commits": {"<sha>": {"message": "...", "author": "login", "parents": [], "diff": "..."}},
         "contents": {"<ref>": {"path/in/repo": "text"}}}}}
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from patchset.errors import InputError

_EPOCH_DEFAULT = "2026-09-20T12:00:00Z"
_ids = itertools.count(1_000_001)


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def fake_sha(*parts: str) -> str:
    """A deterministic 40-hex id for generated objects (not a real git object id)."""
    return hashlib.sha1("\0".join(parts).encode("utf-8")).hexdigest()


def blob_sha(data: bytes) -> str:
    """Git's blob id for ``data`` (what GitHub's contents API reports as ``sha``)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Commit:
    sha: str
    message: str = "A commit"
    author: str = "octocat"
    author_name: str = "The Octocat"
    author_email: str = "octocat@example.invalid"
    date: str = _EPOCH_DEFAULT
    parents: list[str] = field(default_factory=list)
    diff: str | bytes = ""  # bytes: a diff that is not UTF-8 (served byte for byte)


@dataclass
class Comment:
    """A comment on an issue or a pull request (GitHub keeps both in one list per number)."""

    body: str
    author: str = "octocat"
    created_at: str = _EPOCH_DEFAULT
    updated_at: str = _EPOCH_DEFAULT
    id: int = field(default_factory=lambda: next(_ids))


@dataclass
class Pull:
    number: int
    title: str = "A pull request"
    author: str = "octocat"
    state: str = "open"  # open | closed (merged pulls are closed with merged_at set)
    draft: bool = False
    merged_at: str | None = None
    merge_commit_sha: str | None = None
    merged_by: str | None = None
    head_sha: str = ""
    head_ref: str = ""
    base_ref: str = "main"
    base_sha: str = ""
    created_at: str = _EPOCH_DEFAULT
    updated_at: str = _EPOCH_DEFAULT
    closed_at: str | None = None
    body: str = ""
    review_decision: str | None = None  # APPROVED | CHANGES_REQUESTED | REVIEW_REQUIRED | None
    ci: str | None = None  # SUCCESS | FAILURE | PENDING | ERROR | EXPECTED | None (no checks)
    diff: str | bytes = ""  # bytes: a diff that is not UTF-8 (served byte for byte)
    diff_too_large: bool = False  # the diff media types answer 406 too_large
    diff_unavailable: bool = False  # the diff media types answer 422 not_available ("taking too long")
    head_repo_deleted: bool = False  # the fork is gone: ``head.repo`` is null in the REST shape
    commits: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    comments: list[Comment] = field(default_factory=list)
    html_url: str | None = None  # served instead of the pull's own web URL (a hostile server's link)
    id: int = field(default_factory=lambda: next(_ids))

    @property
    def merged(self) -> bool:
        return self.merged_at is not None


@dataclass
class Issue:
    number: int
    title: str = "An issue"
    author: str = "octocat"
    state: str = "open"
    state_reason: str | None = None  # completed | not_planned | reopened | None
    body: str = ""
    created_at: str = _EPOCH_DEFAULT
    updated_at: str = _EPOCH_DEFAULT
    closed_at: str | None = None
    labels: list[str] = field(default_factory=list)
    comments: list[Comment] = field(default_factory=list)
    id: int = field(default_factory=lambda: next(_ids))


@dataclass
class Repo:
    owner: str
    name: str
    default_branch: str = "main"
    description: str | None = None
    pulls: dict[int, Pull] = field(default_factory=dict)
    issues: dict[int, Issue] = field(default_factory=dict)
    commits: dict[str, Commit] = field(default_factory=dict)
    contents: dict[str, dict[str, bytes]] = field(default_factory=dict)
    created_at: str = "2023-02-09T12:00:00Z"
    updated_at: str = _EPOCH_DEFAULT
    id: int = field(default_factory=lambda: next(_ids))

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"


def _fields(cls: type, raw: dict[str, Any], where: str) -> dict[str, Any]:
    known = set(cls.__dataclass_fields__)  # type: ignore[attr-defined]
    unknown = set(raw) - known
    if unknown:
        raise InputError(f"{where}: unknown keys {sorted(unknown)}", hint=f"known keys: {sorted(known)}")
    return dict(raw)


def _diff_field(raw: dict[str, Any]) -> dict[str, Any]:
    """A diff in a JSON state file is text, or ``{"base64": ...}`` for bytes that are not UTF-8."""
    if isinstance(raw.get("diff"), dict):
        raw["diff"] = _content_bytes(raw["diff"])
    return raw


def _comments(items: list[Any], where: str) -> list[Comment]:
    """Comments as given in Python (``Comment``) or in a JSON state file (objects)."""
    out = []
    for c in items:
        if not isinstance(c, (Comment, dict)):
            raise InputError(f"{where}: a comment must be an object, got {type(c).__name__}")
        out.append(c if isinstance(c, Comment) else Comment(**_fields(Comment, c, f"{where} comment")))
    return out


class HubState:
    """All repositories the server knows, plus the accepted tokens. Guard access with ``lock``."""

    def __init__(self, tokens: list[str] | None = None) -> None:
        self.repos: dict[str, Repo] = {}
        # old "owner/name" (lower case) -> (current full name, other web root or None): GitHub
        # answers 301 for a renamed or transferred repository (see ``rename``)
        self.moved: dict[str, tuple[str, str | None]] = {}
        self.tokens: set[str] | None = set(tokens) if tokens is not None else None
        self.lock = threading.RLock()

    # ---- loading -------------------------------------------------------------------------
    @classmethod
    def from_json(cls, data: dict[str, Any], where: str = "fakehub data") -> HubState:
        if not isinstance(data, dict):
            raise InputError(f"{where}: top level must be an object")
        state = cls(tokens=data.get("tokens"))
        for full, raw in (data.get("repos") or {}).items():
            raw = dict(raw or {})
            pulls = raw.pop("pulls", {}) or {}
            issues = raw.pop("issues", {}) or {}
            commits = raw.pop("commits", {}) or {}
            contents = raw.pop("contents", {}) or {}
            repo = state.add_repo(full, **_fields(Repo, raw, f"{where}: repos.{full}"))
            for sha, c in commits.items():
                c = _diff_field(_fields(Commit, c, f"{where}: {full} commit {sha}"))
                state.add_commit(full, sha=sha, **c)
            for num, p in pulls.items():
                state.add_pull(full, int(num), **_diff_field(_fields(Pull, p, f"{where}: {full} pull {num}")))
            for num, i in issues.items():
                state.add_issue(full, int(num), **_fields(Issue, i, f"{where}: {full} issue {num}"))
            for ref, files in contents.items():
                for path, text in files.items():
                    repo.contents.setdefault(ref, {})[path] = _content_bytes(text)
        return state

    @classmethod
    def from_file(cls, path: Path) -> HubState:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InputError(f"{path}: no such file", hint="pass --data with an existing JSON state file") from None
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
        return cls.from_json(data, where=str(path))

    # ---- building ------------------------------------------------------------------------
    def repo(self, full_name: str) -> Repo | None:
        # GitHub matches owner/name case-insensitively.
        with self.lock:
            return self.repos.get(full_name.lower())

    def _need_repo(self, full_name: str) -> Repo:
        repo = self.repo(full_name)
        if repo is None:
            raise KeyError(f"no repository {full_name!r} in the fake hub")
        return repo

    def add_repo(self, full_name: str, **kw: Any) -> Repo:
        owner, _, name = full_name.partition("/")
        if not owner or not name or "/" in name:
            raise InputError(f"repository name must be OWNER/NAME, got {full_name!r}")
        with self.lock:
            repo = Repo(owner=owner, name=name, **kw)
            self.repos[full_name.lower()] = repo
            return repo

    def add_commit(self, full_name: str, sha: str | None = None, **kw: Any) -> Commit:
        with self.lock:
            repo = self._need_repo(full_name)
            sha = sha or fake_sha(full_name, "commit", str(len(repo.commits)), as_text(kw.get("diff", "")))
            commit = Commit(sha=sha, **kw)
            repo.commits[sha] = commit
            return commit

    def add_pull(self, full_name: str, number: int, **kw: Any) -> Pull:
        with self.lock:
            repo = self._need_repo(full_name)
            pull = Pull(number=number, **kw)
            if not pull.head_ref:
                pull.head_ref = f"pr-{number}"
            if not pull.base_sha:
                pull.base_sha = fake_sha(full_name, "base", pull.base_ref)
            if not pull.commits:
                # One commit carrying the whole diff, so the commits fallback has something to read.
                commit = self.add_commit(
                    full_name,
                    sha=pull.head_sha or None,
                    message=pull.title,
                    author=pull.author,
                    parents=[pull.base_sha],
                    diff=pull.diff,
                    date=pull.updated_at,
                )
                pull.commits = [commit.sha]
            if not pull.head_sha:
                pull.head_sha = pull.commits[-1]
            if pull.merged_at and not pull.merge_commit_sha:
                pull.merge_commit_sha = fake_sha(full_name, "merge", str(number))
            if (pull.merged_at or pull.state == "closed") and not pull.closed_at:
                pull.closed_at = pull.merged_at or pull.updated_at
            if pull.merged_at:
                pull.state = "closed"
            pull.comments = _comments(pull.comments, f"{full_name} pull {number}")
            repo.pulls[number] = pull
            return pull

    def add_issue(self, full_name: str, number: int, **kw: Any) -> Issue:
        with self.lock:
            repo = self._need_repo(full_name)
            issue = Issue(number=number, **kw)
            issue.comments = _comments(issue.comments, f"{full_name} issue {number}")
            repo.issues[number] = issue
            return issue

    def set_file(self, full_name: str, ref: str, path: str, data: bytes | str) -> None:
        with self.lock:
            repo = self._need_repo(full_name)
            repo.contents.setdefault(ref, {})[path] = data.encode("utf-8") if isinstance(data, str) else data

    def rename(self, old: str, new: str, *, other_root: str | None = None) -> Repo:
        """Rename (or transfer) repository ``old`` to ``new``. REST reads of the old name then
        answer 301 with ``Location: …/repositories/{id}/…`` (the query string kept), as GitHub
        does; ``other_root`` (e.g. ``http://localhost:PORT``) makes that Location point at
        another host, as a moved GitHub Enterprise server would."""
        with self.lock:
            repo = self._need_repo(old)
            del self.repos[old.lower()]
            repo.owner, _, repo.name = new.partition("/")
            self.repos[new.lower()] = repo
            self.moved[old.lower()] = (repo.full_name, other_root)
            return repo

    def repo_by_id(self, repo_id: int) -> Repo | None:
        with self.lock:
            return next((r for r in self.repos.values() if r.id == repo_id), None)

    # ---- mutations tests use -------------------------------------------------------------
    def pull(self, full_name: str, number: int) -> Pull:
        with self.lock:
            pull = self._need_repo(full_name).pulls.get(number)
            if pull is None:
                raise KeyError(f"no pull {full_name}#{number} in the fake hub")
            return pull

    def force_push(
        self, full_name: str, number: int, diff: str | bytes, head_sha: str | None = None, message: str | None = None
    ) -> str:
        """Replace the PR's commits with one new commit carrying ``diff``; return the new head sha."""
        with self.lock:
            pull = self.pull(full_name, number)
            sha = head_sha or fake_sha(full_name, str(number), "force-push", pull.head_sha, as_text(diff))
            self.add_commit(
                full_name,
                sha=sha,
                message=message or pull.title,
                author=pull.author,
                parents=[pull.base_sha],
                diff=diff,
                date=now_iso(),
            )
            pull.commits = [sha]
            pull.head_sha = sha
            pull.diff = diff
            pull.updated_at = now_iso()
            return sha

    def merge(
        self,
        full_name: str,
        number: int,
        merge_commit_sha: str | None = None,
        merged_at: str | None = None,
        merged_by: str = "merger",
    ) -> str:
        with self.lock:
            pull = self.pull(full_name, number)
            at = merged_at or now_iso()
            pull.merged_at = at
            pull.closed_at = at
            pull.updated_at = at
            pull.state = "closed"
            pull.merged_by = merged_by
            pull.merge_commit_sha = merge_commit_sha or fake_sha(full_name, str(number), "merge", pull.head_sha)
            self.add_commit(
                full_name,
                sha=pull.merge_commit_sha,
                message=f"{pull.title} (#{number})",
                author=merged_by,
                parents=[pull.base_sha],
                diff=pull.diff,
                date=at,
            )
            return pull.merge_commit_sha

    def issue(self, full_name: str, number: int) -> Issue:
        with self.lock:
            issue = self._need_repo(full_name).issues.get(number)
            if issue is None:
                raise KeyError(f"no issue {full_name}#{number} in the fake hub")
            return issue

    # ---- writes the REST API makes (POST/PATCH; see tests.support.fakehub) -----------------------
    def next_number(self, full_name: str) -> int:
        """The number a new issue or pull request gets: both share one sequence, as on GitHub."""
        with self.lock:
            repo = self._need_repo(full_name)
            return max([0, *repo.issues, *repo.pulls]) + 1

    def open_pull(
        self,
        full_name: str,
        title: str,
        head: str,
        base: str,
        *,
        body: str = "",
        draft: bool = False,
        author: str = "octocat",
    ) -> Pull:
        """A new pull request from branch ``head`` into ``base``. The head branch need not exist:
        its head commit is made up (no diff)."""
        with self.lock:
            at = now_iso()
            return self.add_pull(
                full_name,
                self.next_number(full_name),
                title=title,
                body=body,
                head_ref=head,
                base_ref=base,
                head_sha=fake_sha(full_name, "head", head, at),
                draft=draft,
                author=author,
                created_at=at,
                updated_at=at,
            )

    def open_issue(
        self, full_name: str, title: str, *, body: str = "", labels: list[str] | None = None, author: str = "octocat"
    ) -> Issue:
        with self.lock:
            at = now_iso()
            return self.add_issue(
                full_name,
                self.next_number(full_name),
                title=title,
                body=body,
                labels=list(labels or []),
                author=author,
                created_at=at,
                updated_at=at,
            )

    def edit_pull(
        self,
        full_name: str,
        number: int,
        *,
        title: str | None = None,
        body: str | None = None,
        state: str | None = None,
    ) -> Pull:
        """PATCH semantics: what is None stays; ``state`` is ``open`` or ``closed``."""
        with self.lock:
            pull = self.pull(full_name, number)
            at = now_iso()
            if title is not None:
                pull.title = title
            if body is not None:
                pull.body = body
            if state in ("open", "closed"):
                pull.state = state
                pull.closed_at = at if state == "closed" else None
            pull.updated_at = at
            return pull

    def edit_issue(
        self,
        full_name: str,
        number: int,
        *,
        title: str | None = None,
        body: str | None = None,
        labels: list[str] | None = None,
        state: str | None = None,
        state_reason: str | None = None,
    ) -> Issue:
        """PATCH semantics: what is None stays. Closing without a reason is ``completed``, opening
        is ``reopened``, as on GitHub."""
        with self.lock:
            issue = self.issue(full_name, number)
            at = now_iso()
            if title is not None:
                issue.title = title
            if body is not None:
                issue.body = body
            if labels is not None:
                issue.labels = list(labels)
            if state in ("open", "closed"):
                issue.state = state
                issue.state_reason = state_reason or ("completed" if state == "closed" else "reopened")
                issue.closed_at = at if state == "closed" else None
            issue.updated_at = at
            return issue

    def add_comment(self, full_name: str, number: int, body: str, author: str = "octocat") -> Comment:
        """A comment on issue or pull request ``number``; like GitHub, it bumps ``updated_at``."""
        with self.lock:
            repo = self._need_repo(full_name)
            item: Issue | Pull | None = repo.issues.get(number) or repo.pulls.get(number)
            if item is None:
                raise KeyError(f"no issue or pull {full_name}#{number} in the fake hub")
            at = now_iso()
            comment = Comment(body=body, author=author, created_at=at, updated_at=at)
            item.comments.append(comment)
            item.updated_at = at
            return comment

    def close(self, full_name: str, number: int) -> None:
        with self.lock:
            repo = self._need_repo(full_name)
            at = now_iso()
            if number in repo.pulls:
                target: Pull | Issue = repo.pulls[number]
            elif number in repo.issues:
                target = repo.issues[number]
                target.state_reason = "completed"
            else:
                raise KeyError(f"no pull or issue {full_name}#{number}")
            target.state = "closed"
            target.closed_at = at
            target.updated_at = at


def as_bytes(diff: str | bytes) -> bytes:
    return diff.encode("utf-8") if isinstance(diff, str) else diff


def as_text(diff: str | bytes) -> str:
    """A diff as text for the JSON shapes (GitHub's JSON cannot carry a byte that is not UTF-8)."""
    return diff if isinstance(diff, str) else diff.decode("utf-8", "replace")


def _content_bytes(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, dict) and "base64" in value:
        return base64.b64decode(value["base64"])
    raise InputError(f"file content must be a string or {{'base64': ...}}, got {type(value).__name__}")

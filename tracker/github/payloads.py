"""PR and issue states read from GitHub's answers, and from the states recorded in the client's
cache, checked field by field before anything uses them.

Both are untrusted. A date must be ISO 8601, a commit 40 lowercase hex digits, a state one of the
schema's values, a URL http(s), text bounded; else ``Unreadable`` names the field and the
sanitised value, and the client makes it that one row's ``RowError``. Free text is kept as it is
and made safe where printed (``patchset.text``).
"""

from __future__ import annotations

import datetime as dt
import math
import re
import reprlib
from collections.abc import Callable, Mapping
from typing import Any, NoReturn, TypeVar

from patchset.text import Word, safe_url, terminal
from patchset.tracker.followups import BadItem, FollowUp
from patchset.upstream.refs import MALFORMED, CheckState, PRRef, PRState, ReviewDecision, RowError

__all__ = [
    "Unreadable",
    "check_state",
    "file_entry",
    "issue_from_rest",
    "pr_from_graphql",
    "pull_from_rest",
    "recorded_state",
]

MAX_TEXT = 4096  # a title or login longer than this is not GitHub's (titles stop at 256 characters)
_SHA = re.compile(r"[0-9a-f]{40}")
_DATE = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:(Z)|([+-])(\d{2}):(\d{2}))", re.ASCII
)
_ENUM_WORD = re.compile(r"[A-Z][A-Z_]{0,39}", re.ASCII)
# GitHub's GraphQL schema: PullRequestState, IssueState, PullRequestReviewDecision, StatusState.
PR_STATES = {"OPEN": "open", "CLOSED": "closed", "MERGED": "merged"}
ISSUE_STATES = {"OPEN": "open", "CLOSED": "closed"}
REST_STATES = ("open", "closed")
REVIEW_DECISIONS = tuple(ReviewDecision)
CI_STATES = tuple(CheckState)
STATES = ("open", "closed", "merged")  # PRState.state

_shorten = reprlib.Repr()
_shorten.maxstring = 60
_shorten.maxother = 60
_shorten.maxlist = _shorten.maxdict = _shorten.maxtuple = 4
_shorten.maxlevel = 2


def shown(value: Any) -> str:
    """``value`` for a message: a short repr, control and bidi characters shown as escapes."""
    return terminal(_shorten.repr(value))


class Unreadable(ValueError):
    """A field of an answer (or of a recorded state) that is not what the schema says."""

    def __init__(self, field: str, value: Any) -> None:
        self.field = field
        self.value = shown(value)
        super().__init__(f"{field}: {self.value}")

    def row(self, what: str = "upstream data") -> RowError:
        return RowError(MALFORMED, f"unreadable {what}: {self.field}: {self.value}")


# ---- field checks ------------------------------------------------------------------------------------
def _text(value: Any, field: str, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise Unreadable(field, value)
    return value


def _flag(value: Any, field: str, *, default: bool | None = None) -> bool:
    if value is None and default is not None:
        return default
    if not isinstance(value, bool):
        raise Unreadable(field, value)
    return value


def _number(value: Any, field: str, ref: PRRef) -> None:
    """GitHub's number of the item, when the answer carries one: an int, the one asked for."""
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value != ref.number:
        raise Unreadable(field, value)


def _date(value: Any, field: str) -> str | None:
    """An ISO 8601 date-time as GitHub writes it (``2026-10-01T10:00:00Z``), checked to be a real
    instant; None stays None."""
    if value is None:
        return None
    m = _DATE.fullmatch(value) if isinstance(value, str) else None
    if m is None:
        raise Unreadable(field, value)
    y, mo, d, h, mi, s = (int(m.group(i)) for i in range(1, 7))
    try:
        dt.datetime(y, mo, d, h, mi, s)
    except ValueError:
        raise Unreadable(field, value) from None
    if m.group(9) is not None and (int(m.group(10)) > 23 or int(m.group(11)) > 59):
        raise Unreadable(field, value)
    return value


def _optional(value: Any, field: str, ok: Callable[[str], object]) -> Any:
    """``value`` when it is None or a string ``ok`` accepts; ``Unreadable`` otherwise."""
    if value is not None and (not isinstance(value, str) or not ok(value)):
        raise Unreadable(field, value)
    return value


def _sha(value: Any, field: str) -> str | None:
    return _optional(value, field, _SHA.fullmatch)


def _choice(value: Any, field: str, choices: Any) -> Any:
    return _optional(value, field, choices.__contains__)


W = TypeVar("W", bound=Word)


def _word(kind: type[W], value: str | None) -> W | None:
    """A word ``_choice`` accepted, as its member of ``kind``."""
    return None if value is None else kind(value)


def _enum_word(value: Any, field: str) -> str | None:
    """An enum value the client only passes on (an issue's state reason): a short upper-case word."""
    return _optional(value, field, _ENUM_WORD.fullmatch)


def _url(value: Any, field: str) -> str | None:
    if value is None:
        return None
    if safe_url(value) is None:
        raise Unreadable(field, value)
    return str(value)


def _object(value: Any, field: str) -> Mapping[str, Any]:
    """A nested object, or ``{}`` for null."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise Unreadable(field, value)
    return value


def _login(value: Any, field: str) -> str | None:
    """``author { login }``: null (a deleted account) or an object with a string login."""
    return _text(_object(value, field).get("login"), f"{field}.login", optional=True)


def _time(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise Unreadable(field, value)
    return float(value)


# ---- GraphQL ---------------------------------------------------------------------------------------
def pr_from_graphql(ref: PRRef, n: Any, now: float) -> PRState:
    """One aliased node of the batched GraphQL answer (a PullRequest, or an Issue through
    ``issueOrPullRequest``) as a checked ``PRState``."""
    n = _object(n, "node")
    kind = n.get("__typename", "PullRequest")
    if kind not in ("PullRequest", "Issue"):
        raise Unreadable("__typename", kind)
    _number(n.get("number"), "number", ref)
    if kind == "PullRequest" and "headRefOid" in n:
        state = PR_STATES[_choice(n.get("state"), "state", PR_STATES) or _missing("state")]
        merged = _flag(n.get("merged"), "merged")
        if merged != (state == "merged"):
            raise Unreadable("merged", n.get("merged"))
        nodes = _object(n.get("commits"), "commits").get("nodes") or []
        if not isinstance(nodes, list):
            raise Unreadable("commits.nodes", nodes)
        last = _object(nodes[-1] if nodes else None, "commits.nodes[-1]")
        commit = _object(last.get("commit"), "commit")
        rollup = _object(commit.get("statusCheckRollup"), "statusCheckRollup")
        return PRState(
            ref=ref,
            title=_text(n.get("title"), "title") or "",
            author=_login(n.get("author"), "author"),
            state=state,
            draft=_flag(n.get("isDraft"), "isDraft", default=False),
            merged=merged,
            merged_at=_date(n.get("mergedAt"), "mergedAt"),
            merge_commit=_sha(_object(n.get("mergeCommit"), "mergeCommit").get("oid"), "mergeCommit"),
            head_sha=_sha(n.get("headRefOid"), "headRefOid"),
            updated_at=_date(n.get("updatedAt"), "updatedAt"),
            closed_at=_date(n.get("closedAt"), "closedAt"),
            created_at=_date(n.get("createdAt"), "createdAt"),
            review_decision=_word(ReviewDecision, _choice(n.get("reviewDecision"), "reviewDecision", REVIEW_DECISIONS)),
            ci=_word(CheckState, _choice(rollup.get("state"), "statusCheckRollup.state", CI_STATES)),
            url=_url(n.get("url"), "url"),
            is_pull=True,
            fetched_at=now,
        )
    raw_state = n["issueState"] if "issueState" in n else n.get("state")
    return PRState(
        ref=ref,
        title=_text(n.get("title"), "title") or "",
        author=_login(n.get("author"), "author"),
        state=ISSUE_STATES[_choice(raw_state, "state", ISSUE_STATES) or _missing("state")],
        url=_url(n.get("url"), "url"),
        updated_at=_date(n.get("updatedAt"), "updatedAt"),
        closed_at=_date(n.get("closedAt"), "closedAt"),
        created_at=_date(n.get("createdAt"), "createdAt"),
        is_pull=False,
        state_reason=_enum_word(n.get("stateReason"), "stateReason"),
        fetched_at=now,
    )


def _missing(field: str) -> NoReturn:
    raise Unreadable(field, None)


# ---- REST ------------------------------------------------------------------------------------------
def pull_from_rest(ref: PRRef, p: Any) -> PRState:
    """``GET /repos/{owner}/{repo}/pulls/{number}`` as a checked ``PRState``."""
    p = _object(p, "pull")
    _number(p.get("number"), "number", ref)
    merged_at = _date(p.get("merged_at"), "merged_at")
    merged = _flag(p.get("merged"), "merged", default=False) or merged_at is not None
    state = _choice(p.get("state"), "state", REST_STATES) or _missing("state")
    merge_commit = _sha(p.get("merge_commit_sha"), "merge_commit_sha")
    return PRState(
        ref=ref,
        title=_text(p.get("title"), "title") or "",
        author=_login(p.get("user"), "user"),
        state="merged" if merged else state,
        draft=_flag(p.get("draft"), "draft", default=False),
        merged=merged,
        merged_at=merged_at,
        merge_commit=merge_commit if merged else None,
        head_sha=_sha(_object(p.get("head"), "head").get("sha"), "head.sha"),
        updated_at=_date(p.get("updated_at"), "updated_at"),
        closed_at=_date(p.get("closed_at"), "closed_at"),
        created_at=_date(p.get("created_at"), "created_at"),
        url=_url(p.get("html_url"), "html_url"),
        is_pull=True,
    )


def issue_from_rest(ref: PRRef, i: Any) -> PRState:
    """``GET /repos/{owner}/{repo}/issues/{number}`` as a checked ``PRState``."""
    i = _object(i, "issue")
    _number(i.get("number"), "number", ref)
    pr = i.get("pull_request")
    merged_at = _date(_object(pr, "pull_request").get("merged_at"), "pull_request.merged_at")
    state = _choice(i.get("state"), "state", REST_STATES) or _missing("state")
    reason = i.get("state_reason")
    return PRState(
        ref=ref,
        title=_text(i.get("title"), "title") or "",
        author=_login(i.get("user"), "user"),
        state="merged" if merged_at else state,
        merged=merged_at is not None,
        merged_at=merged_at,
        updated_at=_date(i.get("updated_at"), "updated_at"),
        closed_at=_date(i.get("closed_at"), "closed_at"),
        created_at=_date(i.get("created_at"), "created_at"),
        url=_url(i.get("html_url"), "html_url"),
        is_pull=bool(pr),
        state_reason=_enum_word(reason.upper() if isinstance(reason, str) else reason, "state_reason"),
    )


# ---- a PR's file list ------------------------------------------------------------------------------
FILE_STATUSES = ("added", "removed", "modified", "renamed", "copied", "changed", "unchanged")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _file_name(value: Any, field: str) -> str:
    """A repository path as GitHub lists it: text without a control character (a newline would
    end the diff header it is written into)."""
    name = _text(value, field)
    if not name or _CONTROL.search(name):
        raise Unreadable(field, value)
    return name


_HUNK = re.compile(r"@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@", re.ASCII)


def _hunks_only(patch: str) -> bool:
    """GitHub's ``patch`` of one file is hunks and nothing else: each ``@@`` header followed by
    exactly the context, removed and added lines it counts (and "\\ No newline" markers), so no
    line can start the header of another file."""
    old = new = 0
    for line in patch.split("\n"):
        if old == 0 and new == 0:
            m = _HUNK.match(line)
            if m:
                old, new = int(m.group(1) or 1), int(m.group(2) or 1)
            elif line and not line.startswith("\\"):
                return False
            continue
        tag = line[:1]
        if tag in (" ", ""):  # context (an empty line: a blank context line with its space dropped)
            old, new = old - 1, new - 1
        elif tag == "-":
            old -= 1
        elif tag == "+":
            new -= 1
        elif tag != "\\":
            return False
        if old < 0 or new < 0:
            return False
    return True


def file_entry(f: Mapping[str, Any]) -> tuple[str, str, str | None, str | None, bool]:
    """One entry of ``GET /repos/{o}/{r}/pulls/{n}/files``: ``(filename, previous filename,
    status, patch, changed)``, checked."""
    new = _file_name(f.get("filename"), "filename")
    old = _file_name(f["previous_filename"], "previous_filename") if f.get("previous_filename") else new
    status = _choice(f.get("status"), "status", FILE_STATUSES)
    patch = f.get("patch")
    if patch is not None and (not isinstance(patch, str) or not _hunks_only(patch)):
        raise Unreadable("patch", patch)
    changes = f.get("changes")
    if changes is not None and (not isinstance(changes, int) or isinstance(changes, bool) or changes < 0):
        raise Unreadable("changes", changes)
    return new, old, status, patch, bool(changes)


# ---- recorded states ---------------------------------------------------------------------------------
def check_state(s: PRState) -> PRState:
    """``s`` as read back from the cache: every field of the type and form the parsers produce."""
    _text(s.title, "title")
    _text(s.author, "author", optional=True)
    _choice(s.state, "state", STATES) or _missing("state")
    for name in ("draft", "merged", "is_pull"):
        _flag(getattr(s, name), name)
    if s.merged != (s.state == "merged"):
        raise Unreadable("merged", s.merged)
    for name in ("merged_at", "updated_at", "closed_at", "created_at"):
        _date(getattr(s, name), name)
    _followups(s)
    _sha(s.merge_commit, "merge_commit")
    _sha(s.head_sha, "head_sha")
    _choice(s.review_decision, "review_decision", REVIEW_DECISIONS)
    _choice(s.ci, "ci", CI_STATES)
    _url(s.url, "url")
    _enum_word(s.state_reason, "state_reason")
    _text(s.source, "source")
    s.fetched_at = _time(s.fetched_at, "fetched_at")
    if s.age_s is not None:
        _time(s.age_s, "age_s")
    return s


def _followups(s: PRState) -> None:
    """A recorded state's follow-ups (``tracker.followups``): a list of checked items, or None."""
    if s.followups is not None:
        if not isinstance(s.followups, list):
            raise Unreadable("followups", s.followups)
        for i, item in enumerate(s.followups):
            try:
                FollowUp.from_json(item)
            except BadItem as exc:
                raise Unreadable(f"followups[{i}]", str(exc)) from None
    if not isinstance(s.followup_notes, list) or not all(isinstance(n, str) for n in s.followup_notes):
        raise Unreadable("followup_notes", s.followup_notes)


def recorded_state(ref: PRRef, raw: Any) -> PRState:
    """The state recorded for ``ref`` in the client's cache (``PRState.to_json()`` form), checked:
    an entry for another ref, or with any field out of shape, raises ``Unreadable``."""
    raw = _object(raw, "entry")
    try:
        recorded_ref = PRRef.from_json(_object(raw.get("ref"), "ref"))
    except Unreadable:
        raise
    except Exception:  # InputError, KeyError, TypeError, ValueError: not a ref
        raise Unreadable("ref", raw.get("ref")) from None
    if recorded_ref != ref:
        raise Unreadable("ref", str(recorded_ref))
    for name in ("title", "state"):
        if name not in raw:
            raise Unreadable(name, None)
    try:
        state = PRState.from_json(raw)
    except TypeError as exc:  # a required field missing
        raise Unreadable("entry", str(exc)) from None
    return check_state(state)

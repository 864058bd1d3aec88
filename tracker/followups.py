"""What upstream did after a patch's pull request: follow-up fixes, reverts, later mentions.

Two sources, neither asking anything new of GitHub: the PR's ``CROSS_REFERENCED_EVENT`` timeline
items, asked for in the same batched query (``TIMELINE``, ``parse_timeline``), and, with a clone,
the commit messages that name the PR or revert its merge (``commit_mentions``). ``classify`` reads
each title (bodies are not fetched: every refresh would cost more) as reverted, a follow-up merged
or open, or a mention, and ``why`` says which words decided it. Every field is checked; a
malformed item is dropped with a note.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from patchset.text import Word


class FollowUpClass(Word):
    """What the later work does to the patch."""

    REVERTED = "reverted"
    FOLLOW_UP_MERGED = "follow-up-merged"
    FOLLOW_UP_OPEN = "follow-up-open"
    MENTIONED = "mentioned"


REVERTED, FOLLOWUP_MERGED, FOLLOWUP_OPEN, MENTIONED = FollowUpClass
CLASSES = tuple(FollowUpClass)
RANK = {REVERTED: 0, FOLLOWUP_MERGED: 1, FOLLOWUP_OPEN: 2, MENTIONED: 3}

TIMELINE_LAST = 25  # the newest cross-references asked for per PR (GitHub counts them in totalCount)
MAX_TEXT = 512  # a title longer than this is not GitHub's (titles stop at 256 characters)
MAX_COMMITS = 100  # commit messages read per PR from a clone

# The selection inside ``fragment PRFields on PullRequest``: valid against GitHub's schema
# (``state`` is a PullRequestState on a PullRequest and an IssueState on an Issue, so under the
# one ``source`` selection the issue's is aliased, as in the PR fragment itself).
TIMELINE = (
    f"timelineItems(itemTypes: [CROSS_REFERENCED_EVENT], last: {TIMELINE_LAST}) {{ totalCount nodes {{ "
    "... on CrossReferencedEvent { referencedAt willCloseTarget isCrossRepository source { __typename "
    "... on PullRequest { number title url state mergedAt createdAt mergeCommit { oid } author { login } "
    "repository { nameWithOwner } } "
    "... on Issue { number title url issueState: state createdAt author { login } repository { nameWithOwner } } "
    "} } } }"
)

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:Z|[+-]\d{2}:\d{2})", re.ASCII)
_SHA = re.compile(r"[0-9a-f]{40}", re.ASCII)
_REPO = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}", re.ASCII)
_LOGIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:\[bot\])?", re.ASCII)


class WorkRef(Word):
    """What names the patch: a pull request, an issue or a commit."""

    PR = "pr"
    ISSUE = "issue"
    COMMIT = "commit"


class WorkState(Word):
    """The state of the later work (a commit on the branch: merged)."""

    OPEN = "open"
    MERGED = "merged"
    CLOSED = "closed"


class Via(Word):
    """How it was found: the PR timeline, a commit message, or the ledger."""

    TIMELINE = "timeline"
    COMMIT = "commit"
    RECORDED = "recorded"


_PR_STATES = {"OPEN": WorkState.OPEN, "CLOSED": WorkState.CLOSED, "MERGED": WorkState.MERGED}
_ISSUE_STATES = {"OPEN": WorkState.OPEN, "CLOSED": WorkState.CLOSED}

# a title that says it reverts: `Revert "…"`, `[Revert] …`, `Reverts #123`, `[Bugfix] Revert …`
_REVERT = re.compile(r"^\s*(?:\[[^\]]{0,40}\]\s*)*\[?\s*re(?:vert(?:s|ing|ed)?)\b", re.IGNORECASE)
_FOLLOW = re.compile(
    r"\b(?:fix(?:es|ed|ing|up)?|bug\s*fix|hot\s*fix|follow[\s-]*ups?|regression|re-?land(?:s|ed)?|re-?apply|"
    r"revert(?:s|ed)?)\b",
    re.IGNORECASE,
)


class BadItem(ValueError):
    """A timeline item with a field out of shape (named in the message)."""


@dataclass
class FollowUp:
    """One later piece of upstream work that names a patch's pull request."""

    of: str  # the patch's ref it names: "vllm-project/vllm#57632"
    ref: str  # "vllm-project/vllm#58999"; a commit: "vllm-project/vllm@<sha>"
    kind: WorkRef
    klass: FollowUpClass
    why: str  # what decided the class
    title: str = ""
    url: str | None = None
    state: WorkState = WorkState.OPEN
    created_at: str | None = None
    merged_at: str | None = None
    merge_commit: str | None = None
    author: str | None = None
    via: Via = Via.TIMELINE
    in_base: bool | None = None  # its merge commit is in the target's base (a clone tells)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["class"] = out.pop("klass")
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> FollowUp:
        """A follow-up as ``to_json`` wrote it (the client's cache), checked field by field."""
        if not isinstance(d, Mapping):
            raise BadItem("a follow-up that is not an object")
        klass = d.get("class")
        if klass not in CLASSES:
            raise BadItem(f"class {str(klass)[:40]!r}")
        return cls(
            of=_text(d.get("of"), "of"),
            ref=_text(d.get("ref"), "ref"),
            kind=WorkRef(_choice(d.get("kind"), "kind", WorkRef)),
            klass=FollowUpClass(klass),
            why=_text(d.get("why"), "why"),
            title=_text(d.get("title") or "", "title"),
            url=_url(d.get("url")),
            state=WorkState(_choice(d.get("state"), "state", WorkState)),
            created_at=_date(d.get("created_at"), "created_at"),
            merged_at=_date(d.get("merged_at"), "merged_at"),
            merge_commit=_sha(d.get("merge_commit"), "merge_commit"),
            author=_login(d.get("author"), "author"),
            via=Via(_choice(d.get("via") or Via.TIMELINE, "via", Via)),
            in_base=d.get("in_base") if isinstance(d.get("in_base"), bool) else None,
        )


# ---- field checks ----------------------------------------------------------------------------
def _text(value: Any, field: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise BadItem(f"{field}: not a string of at most {MAX_TEXT} characters")
    return value


def _optional(value: Any, field: str, form: re.Pattern[str], what: str) -> str | None:
    """``value`` when it is None or a string of this ``form``; BadItem saying it is not ``what``."""
    if value is not None and (not isinstance(value, str) or not form.fullmatch(value)):
        raise BadItem(f"{field}: not {what}")
    return value


def _date(value: Any, field: str) -> str | None:
    return _optional(value, field, _DATE, "an ISO 8601 date-time")


def _sha(value: Any, field: str) -> str | None:
    return _optional(value, field, _SHA, "a 40-hex commit")


def _choice(value: Any, field: str, choices: Iterable[str]) -> str:
    if not isinstance(value, str) or value not in tuple(choices):
        raise BadItem(f"{field}: {str(value)[:40]!r} is not one of the schema's values")
    return value


def _login(value: Any, field: str) -> str | None:
    return _optional(value, field, _LOGIN, "a GitHub login")


def _url(value: Any) -> str | None:
    """An http(s) URL without spaces or control characters, else None (never an error: a link
    is only left out)."""
    ok = isinstance(value, str) and len(value) <= 2048 and re.fullmatch(r"https?://[^\s\x00-\x1f\x7f<>\"'\\]+", value)
    return value if ok else None


def _obj(value: Any, field: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise BadItem(f"{field}: not an object")
    return value


# ---- classification --------------------------------------------------------------------------
def classify(title: str, kind: str, state: str, number: int, *, same_repo: bool = True) -> tuple[FollowUpClass, str]:
    """``(class, why)`` for an item naming PR ``number``: see the module docstring."""
    if kind == "issue":
        return MENTIONED, "an issue names it"
    if not same_repo:
        return MENTIONED, "a pull request of another repository names it"
    if kind == "pr" and state == "closed":
        return MENTIONED, "a pull request closed without merging names it"
    if _REVERT.match(title):
        if state == "merged":
            return REVERTED, "a merged pull request titled as a revert names it"
        return FOLLOWUP_OPEN, "an open pull request titled as a revert names it"
    named = re.search(rf"#{number}(?!\d)", title) is not None
    word = _FOLLOW.search(title)
    if named or word:
        why = f"its title names #{number}" if named else f"its title says {word.group(0).lower()!r}"  # type: ignore[union-attr]
        return (FOLLOWUP_MERGED if state == "merged" else FOLLOWUP_OPEN), why
    return MENTIONED, "a pull request names it"


# ---- the timeline --------------------------------------------------------------------------
def parse_timeline(repo: str, number: int, node: Mapping[str, Any]) -> tuple[list[FollowUp], list[str]]:
    """The cross-references of one PR node of the batched answer: ``(follow-ups, notes)``. An
    item with a field out of shape is left out and named in ``notes``; the timeline itself out
    of shape is one note."""
    notes: list[str] = []
    timeline = node.get("timelineItems")
    if not isinstance(timeline, Mapping) or not isinstance(timeline.get("nodes"), list):
        return [], ["timeline: not a connection of items"]
    of = f"{repo}#{number}"
    out: dict[str, FollowUp] = {}  # by ref: the first item naming it
    for i, item in enumerate(timeline["nodes"]):
        try:
            f = _cross_reference(repo, number, of, _obj(item, "item"))
        except BadItem as exc:
            notes.append(f"timeline item {i}: {exc}")
            continue
        if f is not None:
            out.setdefault(f.ref, f)
    total = timeline.get("totalCount")
    if isinstance(total, int) and not isinstance(total, bool) and total > len(timeline["nodes"]):
        notes.append(f"timeline: the newest {len(timeline['nodes'])} of {total} cross-references read")
    return list(out.values()), notes


def _cross_reference(repo: str, number: int, of: str, item: Mapping[str, Any]) -> FollowUp | None:
    if not item:  # another event type (GitHub's itemTypes filter leaves none, a double might)
        return None
    source = _obj(item.get("source"), "source")
    typename = source.get("__typename")
    if typename not in ("PullRequest", "Issue"):
        raise BadItem(f"source.__typename {str(typename)[:40]!r}")
    n = source.get("number")
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        raise BadItem("source.number: not a positive integer")
    where = _obj(source.get("repository"), "source.repository").get("nameWithOwner")
    if not isinstance(where, str) or not _REPO.fullmatch(where):
        raise BadItem("source.repository.nameWithOwner: not OWNER/NAME")
    if where.lower() == repo.lower() and n == number:
        return None  # the PR naming itself
    kind = WorkRef.PR if typename == "PullRequest" else WorkRef.ISSUE
    if kind == "pr":
        state = _PR_STATES[_choice(source.get("state"), "source.state", _PR_STATES)]
    else:
        state = _ISSUE_STATES[_choice(source.get("issueState"), "source.issueState", _ISSUE_STATES)]
    title = _text(source.get("title") or "", "source.title")
    klass, why = classify(title, kind, state, number, same_repo=where.lower() == repo.lower())
    return FollowUp(
        of=of,
        ref=f"{where}#{n}",
        kind=kind,
        klass=klass,
        why=why,
        title=title,
        url=_url(source.get("url")),
        state=state,
        created_at=_date(source.get("createdAt"), "source.createdAt")
        or _date(item.get("referencedAt"), "referencedAt"),
        merged_at=_date(source.get("mergedAt"), "source.mergedAt") if kind == "pr" else None,
        merge_commit=_sha(_obj(source.get("mergeCommit"), "source.mergeCommit").get("oid"), "source.mergeCommit.oid")
        if kind == "pr"
        else None,
        author=_login(_obj(source.get("author"), "source.author").get("login"), "source.author.login"),
    )


# ---- commits of a clone ------------------------------------------------------------------------
def commit_mentions(
    repo: Any, github: str, number: int, *, merge_commit: str | None, since: str | None, tip: str
) -> list[FollowUp]:
    """Commits on the branch (``tip``, after ``merge_commit`` when it is in the clone, else after
    ``since``) whose message names ``#number`` or reverts ``merge_commit``; at most
    ``MAX_COMMITS``. ``repo``: a ``patchset.upstream.repo.GitRepo``. Reads the clone only."""
    start = merge_commit if merge_commit and repo.rev(merge_commit) else (since if since and repo.rev(since) else None)
    rng = f"{start}..{tip}" if start else tip
    args = [
        "log",
        "-z",
        f"--max-count={MAX_COMMITS}",
        "-E",
        "-i",
        "--format=%H%x1f%s%x1f%b",
        f"--grep=#{number}([^0-9]|$)",
    ]
    if merge_commit:
        args.append(f"--grep=reverts commit {merge_commit[:12]}")
    proc = repo.git(*args, rng, "--", check=False)
    if proc.returncode != 0:
        return []
    of = f"{github}#{number}"
    out: list[FollowUp] = []
    for entry in proc.stdout.decode("utf-8", "replace").split("\0"):
        parts = entry.strip("\n").split("\x1f", 2)
        if len(parts) != 3 or not _SHA.fullmatch(parts[0]):
            continue
        sha, subject, body = parts
        own = re.findall(r"\(#(\d+)\)\s*$", subject)
        if own and int(own[-1]) == number:
            continue  # the PR's own squash merge
        message = f"{subject}\n{body}"
        reverts = bool(_REVERT.match(subject)) and (
            re.search(rf"#{number}(?!\d)", message) is not None
            or (merge_commit is not None and merge_commit[:12] in message)
        )
        if reverts:
            klass, why = REVERTED, "a commit on the branch reverts it"
        elif re.search(
            rf"\b(?:fix(?:es|ed)?|closes?|follow[\s-]*up(?:\s+(?:to|of|on))?)\s*:?\s*#{number}(?!\d)", message, re.I
        ):
            klass, why = FOLLOWUP_MERGED, f"a commit on the branch says it fixes or follows up #{number}"
        else:
            klass, why = MENTIONED, f"a commit on the branch names #{number}"
        title = "".join(ch for ch in subject[:MAX_TEXT] if ch.isprintable())
        ref = f"{github}#{own[-1]}" if own else f"{github}@{sha}"
        out.append(
            FollowUp(
                of=of,
                ref=ref,
                kind=WorkRef.PR if own else WorkRef.COMMIT,
                klass=klass,
                why=why,
                title=title,
                state=WorkState.MERGED,
                merge_commit=sha,
                via=Via.COMMIT,
            )
        )
    return out


def merge(*groups: Iterable[FollowUp]) -> list[FollowUp]:
    """One list, a ref once (the timeline's entry kept, with what a commit adds: that it is merged
    on the branch), most telling class first, then newest first."""
    by_ref: dict[tuple[str, str], FollowUp] = {}
    for group in groups:
        for f in group:
            key = (f.of, f.ref)
            had = by_ref.get(key)
            if had is None:
                by_ref[key] = f
            elif RANK[f.klass] < RANK[had.klass]:
                f.title, f.url = had.title or f.title, had.url or f.url
                by_ref[key] = f
    items = sorted(by_ref.values(), key=lambda f: f.ref)
    items.sort(key=lambda f: f.merged_at or f.created_at or "", reverse=True)
    items.sort(key=lambda f: RANK[f.klass])
    return items


# ---- the ledger's recorded form ---------------------------------------------------------------
_RECORDED = re.compile(
    rf"^({'|'.join(re.escape(c) for c in CLASSES)}) ({_REPO.pattern}#\d+) of ({_REPO.pattern}#\d+)$", re.ASCII
)


def recorded_text(f: FollowUp) -> str | None:
    """How ``[patch.status] followups`` records one: ``"reverted vllm-project/vllm#58999 of
    vllm-project/vllm#57632"``; None for what is not recorded (mentions, bare commits)."""
    if f.klass == MENTIONED or f.kind == "commit":
        return None
    return f"{f.klass} {f.ref} of {f.of}"


def from_recorded(text: str) -> FollowUp | None:
    """A recorded follow-up back (class, refs; no title): None when the text is not one."""
    m = _RECORDED.match(text)
    if not m:
        return None
    klass, ref, of = m.group(1), m.group(2), m.group(3)
    state = WorkState.MERGED if klass in (REVERTED, FOLLOWUP_MERGED) else WorkState.OPEN
    return FollowUp(
        of=of,
        ref=ref,
        kind=WorkRef.PR,
        klass=FollowUpClass(klass),
        why="recorded in the ledger",
        state=state,
        via=Via.RECORDED,
    )

"""``patchset status``: what upstream's state means for every patch of the ledger, and what to do.

For each patch the dashboard reads the state of every pull request and issue the ledger names
(``[patch.upstream]``) through ``patchset.tracker.github.GitHubClient`` (one batched request per
repository), then works out what it means:

* a merged PR: is its merge commit in the target's base, in upstream's branch, and which release
  first contains it (from a local upstream history, when there is one);
* a PR taken verbatim (``origin`` upstream/revert): has its head moved since it was vendored
  (``lock.heads[id]``, else ``status.head``), and does its current diff, filtered like the body
  (``[patch.source]`` globs, else the files our body touches), still have our body's patch id;
  giving a drift class: unchanged, revised, merged-as-vendored, merged-with-changes,
  closed-unmerged (or head-moved / unknown when the diff cannot be read);
* later upstream work naming each PR (``tracker.followups``: GitHub's cross-references, read in
  the same batched query, and the commit messages of a local clone): reverted upstream, a
  follow-up merged or open, a mention;
* an action: drop at the next rebase, refresh from the PR, take upstream's follow-up, keep a patch
  whose PR upstream reverted, upstream it, held, nothing to do.

Offline first. Without ``--refresh`` nothing touches the network: states come from the client's
on-disk cache (with their age) or, on a fresh clone with no cache, from the state recorded in
the ledger (``[patch.status]``, with its date). ``--refresh`` asks GitHub and records the new
states in the ledger (one atomic edit; human notes and the vendored head are kept). A failure
(401, rate limit, 404, 5xx, timeout, malformed answer) marks its rows and falls back to the
recorded state; the dashboard always renders. So does a malformed value in an answer or in the
recorded states (a date that is not one, a merge commit that is not a sha, a state outside the
schema's enum): the client checks every field (``tracker.payloads``) and that one row says
"unreadable upstream data: <field>: <value>" (exit 2, as for any row that could not be read).
"""

from __future__ import annotations

import datetime as dt
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from patchset.commands.interrupted import Interruption, interruptions
from patchset.errors import InputError, PatchFormatError
from patchset.ledger import store as ledger_mod
from patchset.ledger.model import Ledger, Patch
from patchset.upstream.refs import NO_NETWORK, OFFLINE, PRRef, PRState, RowError

__all__ = [
    "VERBATIM_ORIGINS",
    "RefRow",
    "StatusReport",
    "StatusRow",
    "collect_status",
    "make_client",
    "open_histories",
    "record_status",
    "status",
]

VERBATIM_ORIGINS = ("upstream", "upstream-partial", "revert")
MODES = ("default", "offline", "refresh")

# drift classes
UNCHANGED = "unchanged"
REVISED = "revised"
MERGED_AS_VENDORED = "merged-as-vendored"
MERGED_WITH_CHANGES = "merged-with-changes"
MERGED = "merged"  # merged, the diff could not be compared
CLOSED_UNMERGED = "closed-unmerged"
HEAD_MOVED = "head-moved"  # open, head moved, diff not compared
UNKNOWN = "unknown"
NA = "n/a"

# actions
DROP = "drop-at-rebase"
REFRESH = "refresh"
UPSTREAM_IT = "upstream"
HELD = "held"
NOTHING = "nothing"
DROPPED = "dropped"
CHECK = "unknown"
FOLLOW_UP = "follow-up"  # upstream fixed it again: take the follow-up
REVERTED_UP = "reverted"  # upstream reverted the PR the patch carries

ROLES = (("prs", "pr"), ("ports", "pr"), ("reverts", "pr"), ("issues", "issue"), ("based_on", "pr"))


def make_client(
    offline: bool = False,
    base_url: str | None = None,
    token: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    **kw: Any,
):  # -> GitHubClient
    """The client every command uses: ``base_url`` from the argument, ``$PATCHSET_GITHUB_API`` or
    ``$GITHUB_API_URL`` (GitHub Enterprise, or a local GitHub-shaped server), else api.github.com."""
    from patchset.tracker.github import GitHubClient

    url = base_url or os.environ.get("PATCHSET_GITHUB_API") or os.environ.get("GITHUB_API_URL") or None
    return GitHubClient(base_url=url, token=token, cache_dir=cache_dir, offline=offline, **kw)


@dataclass
class RefRow:
    """One upstream ref of a patch as the dashboard shows it. ``source`` says where the state
    came from: network, cache (``age_s`` old), recorded (the ledger, on ``recorded``) or none."""

    ref: str
    role: str
    kind: str = "pr"
    state: str = "unknown"  # open | draft | merged | closed | unknown
    title: str = ""
    author: str | None = None
    merged_at: str | None = None
    merge_commit: str | None = None
    head: str | None = None
    updated_at: str | None = None
    review: str | None = None
    ci: str | None = None
    url: str | None = None
    source: str = "none"
    age_s: float | None = None
    recorded: str | None = None
    error: dict[str, Any] | None = None
    created_at: str | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @property
    def known(self) -> bool:
        return self.state != "unknown"


@dataclass
class StatusRow:
    """One patch on the dashboard."""

    order: int
    id: str
    target: str
    title: str
    origin: str
    state: str  # active | held | dropped
    optional: bool = False
    files: list[str] = field(default_factory=list)  # the files the ledger says the patch touches
    pr: RefRow | None = None
    refs: list[RefRow] = field(default_factory=list)
    drift: str = NA
    head_moved: bool | None = None
    vendored_head: str | None = None
    in_base: bool | None = None
    in_main: bool | None = None
    first_release: str | None = None
    action: str = NOTHING
    action_text: str = ""
    notes: list[str] = field(default_factory=list)
    # later upstream work naming the patch's PRs (``tracker.followups.FollowUp.to_json()``)
    followups: list[dict[str, Any]] = field(default_factory=list)
    followups_from: list[str] = field(default_factory=list)  # what was read: timeline, commits, recorded

    @property
    def upstream_state(self) -> str:
        return self.pr.state if self.pr else "none"

    @property
    def data(self) -> str:
        """Where this row's upstream state came from, in words."""
        if self.pr is None:
            return ""
        return _data_words(self.pr)

    @property
    def error(self) -> str | None:
        if self.pr is not None and self.pr.error:
            return error_text(self.pr.error)
        return None

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k not in ("pr", "refs")}
        out["upstream_state"] = self.upstream_state
        out["pr"] = self.pr.to_json() if self.pr else None
        out["refs"] = [r.to_json() for r in self.refs]
        out["data"] = self.data
        out["error"] = self.error
        return out


@dataclass
class StatusReport:
    """The dashboard: one row per patch, warnings, and how old the data is."""

    ledger: str
    title: str
    mode: str
    generated_at: str
    rows: list[StatusRow]
    targets: dict[str, dict[str, str]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    recorded: list[str] = field(default_factory=list)  # ids whose [patch.status] --refresh rewrote
    round_trips: int = 0
    # an apply, rebase or ledger edit left half-done (``patchset.commands.interrupted``, as validate says)
    interrupted: list[Interruption] = field(default_factory=list)

    def by_target(self) -> dict[str, list[StatusRow]]:
        out: dict[str, list[StatusRow]] = {}
        for r in self.rows:
            out.setdefault(r.target, []).append(r)
        return out

    def counts(self, attr: str = "action") -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows:
            v = getattr(r, attr)
            out[v] = out.get(v, 0) + 1
        return out

    def oldest(self) -> str:
        """How old the oldest upstream state on the page is, in words."""
        worst: tuple[float, str] | None = None
        now = time.time()
        for r in self.rows:
            for ref in ([r.pr] if r.pr else []) + r.refs:
                age = age_seconds(ref, now)
                if age is None:
                    continue
                if worst is None or age > worst[0]:
                    worst = (age, _data_words(ref))
        return worst[1] if worst else "no upstream data"

    def errors(self) -> list[str]:
        """One line per upstream read that failed; a host that could not be reached at all (no
        network) is one line for all its reads."""
        out = []
        down: dict[str, list[str]] = {}
        for r in self.rows:
            for ref in ([r.pr] if r.pr else []) + r.refs:
                if not ref.error or ref.error.get("error") == OFFLINE:
                    continue
                if ref.error.get("error") == NO_NETWORK:
                    down.setdefault(str(ref.error.get("message")), []).append(ref.ref)
                    continue
                out.append(f"{r.id}: {ref.ref}: {error_text(ref.error)}")
        said = [
            f"no network: {where}: {len(refs)} upstream read(s) not made; the rows show what was recorded"
            for where, refs in down.items()
        ]
        return said + out

    @property
    def exit_code(self) -> int:
        """0 when every upstream state could be read (or none was asked for); 2 when some rows
        carry an error (network, auth, rate limit, unreadable upstream data or recorded state
        ...): the page still shows every row; else 1 when an apply, rebase or ledger edit was
        interrupted half-way (a finding, as in validate)."""
        if self.errors():
            return 2
        return 1 if any(i.problem for i in self.interrupted) else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "ledger": self.ledger,
            "exit_code": self.exit_code,
            "title": self.title,
            "mode": self.mode,
            "generated_at": self.generated_at,
            "data_age": self.oldest(),
            "warnings": self.warnings,
            "interrupted": [i.to_json() for i in self.interrupted],
            "errors": self.errors(),
            "recorded": self.recorded,
            "round_trips": self.round_trips,
            "targets": self.targets,
            "counts": {
                "action": self.counts("action"),
                "drift": self.counts("drift"),
                "upstream_state": self.counts("upstream_state"),
            },
            "rows": [r.to_json() for r in self.rows],
        }


def web_root(api: str | None = None) -> str:
    """The web address of the GitHub the client reads: https://github.com for the public API
    (``api.github.com``), ``https://HOST`` for GitHub Enterprise (``https://HOST/api/v3``)."""
    from urllib.parse import urlsplit

    api = api if api is not None else (os.environ.get("PATCHSET_GITHUB_API") or os.environ.get("GITHUB_API_URL") or "")
    parts = urlsplit(api)
    if not api or parts.hostname in (None, "api.github.com") or parts.scheme not in ("http", "https"):
        return "https://github.com"
    return f"{parts.scheme}://{parts.netloc}"


def ref_url(ref: str, kind: str = "pr", root: str | None = None) -> str | None:
    """The web page of ``owner/repo#N``: ``…/pull/N`` (``kind`` "issue": ``…/issues/N``)."""
    try:
        r = PRRef.parse(ref, {}, kind)
    except InputError:
        return None
    return f"{root or web_root()}/{r.repo}/{'issues' if kind == 'issue' else 'pull'}/{r.number}"


def commit_url(ref: str, sha: str | None, root: str | None = None) -> str | None:
    """The web page of a merge commit of the repository of ``ref`` (a 40-hex ``sha`` only)."""
    import re as _re

    if not sha or not _re.fullmatch(r"[0-9a-f]{40}", sha):
        return None
    repo = ref.partition("#")[0].partition("@")[0]
    try:
        PRRef(repo, 1)
    except InputError:
        return None
    return f"{root or web_root()}/{repo}/commit/{sha}"


def error_text(err: Mapping[str, Any]) -> str:
    """A row error in words, with when a rate limit resets."""
    kind = "no network" if err.get("error") == NO_NETWORK else err.get("error")
    text = f"{kind}: {err.get('message')}"
    if err.get("reset_at_iso"):
        text += f" (resets at {err['reset_at_iso']})"
    return text


def age_seconds(ref: RefRow, now: float) -> float | None:
    if ref.source in ("network", "cache") and ref.age_s is not None:
        return ref.age_s
    if ref.source == "network":
        return 0.0
    if ref.source == "recorded" and ref.recorded:
        d = dt.date.fromisoformat(ref.recorded)
        return max(0.0, now - dt.datetime(d.year, d.month, d.day, tzinfo=dt.timezone.utc).timestamp())
    return None


def _data_words(ref: RefRow) -> str:
    if ref.source == "network":
        return "live"
    if ref.source == "cache":
        return f"cache, {_duration(ref.age_s or 0)} old"
    if ref.source == "recorded":
        if not ref.recorded:
            return "recorded (no date)"
        days = (dt.date.today() - dt.date.fromisoformat(ref.recorded)).days
        return f"recorded {ref.recorded} ({days} day{'s' if days != 1 else ''} ago)"
    return "no data"


def _duration(s: float) -> str:
    if s < 90:
        return f"{int(s)} s"
    if s < 5400:
        return f"{int(s // 60)} min"
    if s < 2 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{int(s // 86400)} days"


# ---- histories ---------------------------------------------------------------------------------
def open_histories(ledger: Ledger) -> dict[str, Any]:
    """A local upstream git history per target, when one is already there (never cloned or
    fetched here): the clone ``patchset.upstream.clone.UpstreamClone`` keeps for the target's upstream."""
    from patchset.upstream import cache

    clones = cache.subdir("upstream", create=False)
    if not clones.is_dir() or not any(clones.iterdir()):
        return {}  # no clone at all: skip importing the git layer (status --offline starts fast)
    from patchset.upstream.clone import UpstreamClone

    out: dict[str, Any] = {}
    for name, t in ledger.targets.items():
        try:
            clone = UpstreamClone(t.upstream)
        except Exception:
            continue
        if clone.cloned:
            out[name] = clone
    return out


def _releases(repo: Any) -> list[tuple[str, str]]:
    """``[(version, sha)]`` of the release tags of a history, oldest first."""
    if hasattr(repo, "releases"):
        return list(repo.releases())
    from packaging.version import InvalidVersion, Version

    out = repo.git(
        "for-each-ref", "--format=%(refname:strip=2) %(*objectname) %(objectname)", "refs/tags"
    ).stdout.decode()
    found = []
    for line in out.splitlines():
        parts = line.split()
        if not parts:
            continue
        tag, sha = parts[0], parts[1] if len(parts) == 3 else parts[-1]
        try:
            found.append((Version(tag.lstrip("v")), tag.lstrip("v"), sha))
        except InvalidVersion:
            continue
    found.sort()
    return [(v, s) for _, v, s in found]


def _place_merge(row: StatusRow, target: Any, repo: Any | None) -> None:
    """Fill ``in_base``, ``in_main`` and ``first_release`` for a merged PR."""
    mc = row.pr.merge_commit if row.pr else None
    if not mc:
        return
    if repo is None:
        row.notes.append(f"no local history of {row.target}: cannot tell whether the merge is in the base")
        return
    try:
        if not repo.rev(mc):
            row.notes.append(f"merge commit {mc[:12]} is not in the local history of {row.target} (fetch it)")
            return
        base = repo.rev(target.base) if target.base else None
        if base is None and target.base:
            base = repo.rev(f"refs/tags/{target.base}") or repo.rev(f"refs/tags/v{target.base}")
        row.in_base = repo.is_ancestor(mc, base) if base else None
        if target.base and base is None:
            row.notes.append(f"base {target.base} is not in the local history of {row.target}")
        tip = repo.rev(f"refs/heads/{target.branch}") or repo.rev(f"refs/remotes/origin/{target.branch}")
        row.in_main = repo.is_ancestor(mc, tip) if tip else None
        for version, sha in _releases(repo):
            if repo.is_ancestor(mc, sha):
                row.first_release = version
                break
    except Exception as exc:
        row.notes.append(f"history of {row.target}: {exc}")


# ---- states ----------------------------------------------------------------------------------
def _refs_of(p: Patch, aliases: Mapping[str, str] | None = None) -> list[tuple[str, PRRef]]:
    out: list[tuple[str, PRRef]] = []
    for attr, kind in ROLES:
        for text in getattr(p.upstream, attr):
            try:
                out.append((attr, PRRef.parse(text, aliases, kind)))
            except InputError:
                continue
    return out


def _ref_row(role: str, ref: PRRef, got: PRState | RowError | None) -> RefRow:
    row = RefRow(ref=str(ref), role=role, kind=ref.kind)
    if isinstance(got, PRState):
        state = "merged" if got.merged else ("draft" if got.draft and got.state == "open" else got.state)
        row.state, row.title, row.author = state, got.title, got.author
        row.merged_at, row.merge_commit, row.head = got.merged_at, got.merge_commit, got.head_sha
        row.updated_at, row.review, row.ci, row.url = got.updated_at, got.review_decision, got.ci, got.url
        row.created_at = got.created_at
        row.source = "cache" if got.source == "cache" else "network"
        row.age_s = got.age_s if got.source == "cache" else 0.0
    elif isinstance(got, RowError):
        row.error = got.to_json()
    return row


def _recorded_into(row: RefRow, p: Patch) -> None:
    """Fill an unknown primary ref from the state the ledger recorded."""
    st = p.status
    if st.pr_state == "unknown" and st.recorded is None:
        return
    row.state = st.pr_state
    row.source = "recorded"
    row.recorded = st.recorded.isoformat() if st.recorded else None
    row.merged_at = st.merged_at.isoformat() if st.merged_at else row.merged_at
    row.merge_commit = st.merge_commit or row.merge_commit
    if row.error and row.error.get("error") == OFFLINE:
        row.error = None  # not a failure: offline is what was asked for
    if p.authors and p.origin in VERBATIM_ORIGINS:
        row.author = row.author or p.authors[0]


def _recorded_is_newer(p: Patch, ref: RefRow) -> bool:
    if p.status.recorded is None or ref.age_s is None:
        return False
    fetched = dt.datetime.fromtimestamp(time.time() - ref.age_s, tz=dt.timezone.utc).date()
    return p.status.recorded > fetched


def collect_status(
    ledger: Ledger, *, client: Any = None, mode: str = "default", histories: Mapping[str, Any] | None = None
) -> StatusReport:
    """Build the dashboard. ``client``: a ``GitHubClient`` (``offline=True`` unless mode is
    refresh); None reads only what the ledger recorded. ``histories``: target -> ``GitRepo``."""
    if mode not in MODES:
        raise InputError(f"status mode must be one of {MODES}, got {mode!r}")
    histories = dict(histories or {})
    warnings: list[str] = []
    all_refs: list[PRRef] = []
    per_patch: dict[str, list[tuple[str, PRRef]]] = {}
    aliases = getattr(client, "aliases", None)
    for p in ledger.patches:
        refs = _refs_of(p, aliases)
        per_patch[p.id] = refs
        all_refs += [r for _, r in refs if r not in all_refs]
    trips0 = getattr(client, "round_trips", 0)
    states: dict[PRRef, PRState | RowError] = {}
    if client is not None and all_refs:
        notice = getattr(client, "auth_notice", None) if mode == "refresh" else None
        if notice:
            warnings.append(notice)
        try:
            states = client.pull_states(all_refs, max_age=0 if mode == "refresh" else None)
        except Exception as exc:
            states = {r: RowError("http", f"state request failed ({type(exc).__name__}: {exc})") for r in all_refs}
    rows: list[StatusRow] = []
    order: dict[str, int] = {}
    for p in ledger.patches:
        order[p.target] = order.get(p.target, 0) + (1 if p.state == "active" else 0)
        row = StatusRow(
            order=order[p.target] if p.state == "active" else 0,
            id=p.id,
            target=p.target,
            title=p.title,
            origin=p.origin,
            state=p.state,
            optional=p.optional,
            files=list(p.files),
        )
        refs = per_patch[p.id]
        primary = next(((role, r) for role, r in refs if role in ("prs", "ports") and r.kind == "pr"), None)
        for role, ref in refs:
            rr = _ref_row(role, ref, states.get(ref))
            if primary is not None and ref == primary[1] and role == primary[0]:
                row.pr = rr
                if not rr.known:
                    _recorded_into(rr, p)
                elif rr.source == "cache" and _recorded_is_newer(p, rr):
                    # the ledger (pulled from someone's later --refresh) knows better than our old cache
                    row.pr = rr = RefRow(ref=rr.ref, role=rr.role, kind=rr.kind, title=rr.title, url=rr.url)
                    _recorded_into(rr, p)
            else:
                row.refs.append(rr)
        _analyse(ledger, p, row, client, mode)
        if row.pr is not None and row.pr.state == "merged":
            _place_merge(row, ledger.targets.get(p.target), histories.get(p.target))
        _followups(p, row, refs, states, ledger.targets.get(p.target), histories.get(p.target))
        _decide(p, row)
        rows.append(row)
    targets = {
        n: {"github": t.github, "branch": t.branch, "base": t.base, "base_version": t.base_version}
        for n, t in ledger.targets.items()
    }
    return StatusReport(
        ledger=str(ledger.path),
        title=str(ledger.extra.get("title", "")),
        mode=mode,
        generated_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        rows=rows,
        targets=targets,
        warnings=warnings,
        round_trips=getattr(client, "round_trips", 0) - trips0,
    )


# ---- follow-ups ------------------------------------------------------------------------------
FOLLOWUP_ROLES = ("prs", "ports", "reverts", "based_on")


def _followups(
    p: Patch,
    row: StatusRow,
    refs: list[tuple[str, PRRef]],
    states: Mapping[PRRef, PRState | RowError],
    target: Any,
    repo: Any | None,
) -> None:
    """Later upstream work naming each PR of the patch: the timeline of its state (live or
    cached), else what the ledger recorded; and, with a local clone, the branch's commits that
    name it. Each item is checked again here (a cached state is as untrusted as an answer)."""
    from patchset.tracker import followups as fu

    found: list[fu.FollowUp] = []
    recorded = [f for f in (fu.from_recorded(t) for t in p.status.followups) if f is not None]
    base = tip = None
    if repo is not None and target is not None:
        try:
            base = (repo.rev(target.base) if target.base else None) or None
            tip = repo.rev(f"refs/heads/{target.branch}") or repo.rev(f"refs/remotes/origin/{target.branch}")
        except Exception as exc:  # a broken clone: say so, show the rest
            row.notes.append(f"history of {row.target}: {exc}")
    for role, ref in refs:
        if role not in FOLLOWUP_ROLES or ref.kind != "pr":
            continue
        got = states.get(ref)
        items: list[fu.FollowUp] = []
        if isinstance(got, PRState) and got.followups is not None:
            _source(row, "timeline")
            for d in got.followups:
                try:
                    f = fu.FollowUp.from_json(d)
                except fu.BadItem as exc:
                    row.notes.append(f"{ref}: a follow-up left out ({exc})")
                    continue
                if f.of == str(ref):
                    items.append(f)
            row.notes += [f"{ref}: {n}" for n in got.followup_notes if isinstance(n, str)][:3]
        else:
            mine = [f for f in recorded if f.of == str(ref)]
            if mine or p.status.followups:
                _source(row, "recorded")
            items += mine
        if tip and target is not None and (not target.github or target.github.lower() == ref.repo.lower()):
            merge = next((r.merge_commit for r in [row.pr, *row.refs] if r is not None and r.ref == str(ref)), None)
            try:
                items += fu.commit_mentions(repo, ref.repo, ref.number, merge_commit=merge, since=base, tip=tip)
                _source(row, "commits")
            except Exception as exc:
                row.notes.append(f"history of {row.target}: {exc}")
        found += items
    merged = fu.merge(found)
    if base and repo is not None:
        for f in merged:
            if f.merge_commit and f.state == "merged":
                try:
                    f.in_base = bool(repo.rev(f.merge_commit)) and repo.is_ancestor(f.merge_commit, base)
                except Exception:
                    f.in_base = None
    row.followups = [{**f.to_json(), "role": _role_of(refs, f.of)} for f in merged]


def _source(row: StatusRow, what: str) -> None:
    if what not in row.followups_from:
        row.followups_from.append(what)


def _role_of(refs: list[tuple[str, PRRef]], of: str) -> str:
    return next((role for role, r in refs if str(r) == of), "")


def _short_ref(text: str) -> str:
    """``vllm-project/vllm#58999`` -> ``vllm#58999`` for the repositories with a short name."""
    from patchset.upstream.refs import DEFAULT_ALIASES

    repo, sep, n = text.partition("#")
    short = {v.lower(): k for k, v in DEFAULT_ALIASES.items()}.get(repo.lower())
    return f"{short}#{n}" if sep and short else text


def _followup_action(row: StatusRow) -> None:
    """What upstream's later work means for the action (after ``_decide``'s own choice)."""
    live = [f for f in row.followups if f.get("in_base") is not True]
    carried = [f for f in live if f.get("role") in ("prs", "ports")]
    reverted = [f for f in carried if f["class"] == "reverted"]
    if reverted:
        f = reverted[0]
        when = f" on {f['merged_at'][:10]}" if f.get("merged_at") else ""
        row.action = REVERTED_UP
        row.action_text = (
            f"upstream reverted it: {_short_ref(f['ref'])}{when}; the next base does not carry it, keep the patch"
        )
        return
    undone = [f for f in live if f.get("role") == "reverts" and f["class"] == "reverted"]
    if undone:
        f = undone[0]
        row.action = DROP
        row.action_text = (
            f"upstream reverted {_short_ref(f['of'])} too ({_short_ref(f['ref'])}): drop it at that rebase"
        )
        return
    fixed = [f for f in carried if f["class"] == "follow-up-merged"]
    if fixed:
        names = ", ".join(_short_ref(f["ref"]) for f in fixed[:3]) + (
            f" and {len(fixed) - 3} more" if len(fixed) > 3 else ""
        )
        before = row.action_text
        row.action = FOLLOW_UP
        row.action_text = f"upstream fixed it again: take {names}" + (f" ({before})" if before else "")
    opened = [f for f in carried if f["class"] == "follow-up-open"]
    if opened:
        what = (
            "revert"
            if any(str(f.get("title", "")).lower().lstrip("[").startswith("revert") for f in opened)
            else "follow-up"
        )
        row.action_text += f"; {what} open upstream: " + ", ".join(_short_ref(f["ref"]) for f in opened[:3])


# ---- drift -----------------------------------------------------------------------------------
def _strip(ledger: Ledger, p: Patch) -> int:
    if p.source.strip is not None:
        return p.source.strip
    t = ledger.targets.get(p.target)
    return t.strip if t else 1


def _upstream_filtered(ledger: Ledger, p: Patch, diff: bytes, body: bytes) -> bytes:
    strip = _strip(ledger, p)
    from patchset.patchfmt.filters import filter_diff, split_sections

    if p.source.kind == "pr":
        return filter_diff(diff, p.source.include, p.source.exclude, strip, source=f"{p.id} upstream").data
    ours = [path for s in split_sections(body, strip, source=p.body_path) if s.kind == "file" for path in s.paths]
    return filter_diff(diff, ours, [], strip, source=f"{p.id} upstream").data if ours else diff


def _analyse(ledger: Ledger, p: Patch, row: StatusRow, client: Any, mode: str) -> None:
    """The drift class of a verbatim upstream patch."""
    pr = row.pr
    if pr is None or p.origin not in VERBATIM_ORIGINS or p.state == "dropped":
        return
    row.vendored_head = ledger.lock.heads.get(p.id) or p.status.head or None
    if pr.head and row.vendored_head:
        row.head_moved = not (pr.head.startswith(row.vendored_head) or row.vendored_head.startswith(pr.head))
    if pr.state == "closed":
        row.drift = CLOSED_UNMERGED
        return
    if not pr.known:
        row.drift = UNKNOWN
        return
    if row.head_moved is False:
        # the head we vendored is still the head: the diff is the one we took
        row.drift = MERGED_AS_VENDORED if pr.state == "merged" else UNCHANGED
        return
    same = _same_change(ledger, p, row, client)
    if pr.state == "merged":
        row.drift = {True: MERGED_AS_VENDORED, False: MERGED_WITH_CHANGES, None: MERGED}[same]
    elif same is True:
        row.drift = UNCHANGED
        if row.head_moved:
            row.notes.append("head moved since vendored, same change (patch id)")
    elif same is False:
        row.drift = REVISED
    else:
        row.drift = HEAD_MOVED if row.head_moved else UNKNOWN


def _same_change(ledger: Ledger, p: Patch, row: StatusRow, client: Any) -> bool | None:
    """Does upstream's current diff carry our body's change? None when it cannot be told."""
    body_path = ledger.body_file(p)
    if not body_path.is_file():
        row.notes.append("body not imported: cannot compare with upstream's diff")
        return None
    if client is None or row.pr is None or row.pr.source == "recorded":
        row.notes.append("upstream diff not read (no live or cached state): run `patchset status --refresh`")
        return None
    from patchset.tracker.github import FetchError

    try:
        diff = client.pr_diff(PRRef.parse(row.pr.ref))
    except FetchError as exc:
        if exc.row.kind == OFFLINE:
            row.notes.append("upstream diff not cached: run `patchset status --refresh`")
        elif exc.row.kind == NO_NETWORK:
            row.notes.append("upstream diff not read: no network")
        else:
            row.notes.append(f"upstream diff: {exc.row}")
        return None
    body = body_path.read_bytes()
    strip = _strip(ledger, p)
    from patchset.patchfmt.filters import patch_id

    try:
        theirs = patch_id(_upstream_filtered(ledger, p, diff, body), strip, source=f"{p.id} upstream")
        ours = patch_id(body, strip, source=p.body_path)
    except PatchFormatError as exc:
        row.notes.append(f"cannot compare diffs: {exc.message}")
        return None
    if theirs is None or ours is None:
        row.notes.append("nothing to compare: a diff without file sections")
        return None
    return theirs == ours


# ---- actions ---------------------------------------------------------------------------------
def _decide(p: Patch, row: StatusRow) -> None:
    _decide_state(p, row)
    if p.state == "active":
        _followup_action(row)


def _decide_state(p: Patch, row: StatusRow) -> None:
    pr = row.pr
    if p.state == "held":
        row.action, row.action_text = HELD, p.reason or "no reason recorded"
        return
    if p.state == "dropped":
        row.action, row.action_text = DROPPED, p.reason or "no reason recorded"
        return
    if pr is None:
        if p.origin in ("ours", "port"):
            who = "" if p.origin == "ours" else f"; or ask {', '.join(p.authors) or 'the author'}"
            row.action, row.action_text = UPSTREAM_IT, f"no upstream PR{who}"
        else:
            row.action, row.action_text = NOTHING, "no upstream PR to follow"
        return
    if pr.error and pr.error.get("error") == "not_found":
        row.action, row.action_text = CHECK, f"{pr.ref} not found upstream (deleted, renamed or private?)"
        return
    if not pr.known:
        why = f" ({row.error})" if row.error else ""
        row.action, row.action_text = CHECK, f"upstream state unknown{why}: retry `patchset status --refresh`"
        return
    if pr.state == "merged":
        row.action = DROP
        if row.in_base:
            row.action_text = "already in the base: drop it now"
        elif row.drift == MERGED_WITH_CHANGES:
            row.action_text = "merged with changes: the next base has upstream's version, not ours"
        else:
            when = f" {pr.merged_at[:10]}" if pr.merged_at else ""
            rel = f", first in {row.first_release}" if row.first_release else ""
            row.action_text = f"merged{when}{rel}"
        return
    if pr.state == "closed":
        row.action, row.action_text = UPSTREAM_IT, "PR closed without merging: carry it, or open a new PR"
        return
    if row.drift == REVISED:
        row.action, row.action_text = REFRESH, f"revised upstream: `patchset fetch --check {p.id}`, then --update"
        return
    if row.drift == HEAD_MOVED:
        row.action, row.action_text = REFRESH, f"head moved since vendored: `patchset fetch --check {p.id}`"
        return
    bits = [b for b in (pr.review and pr.review.lower().replace("_", " "), pr.ci and f"CI {pr.ci.lower()}") if b]
    row.action, row.action_text = NOTHING, f"PR {pr.state}" + (f" ({', '.join(bits)})" if bits else "")


# ---- entry points ------------------------------------------------------------------------------
def status(
    ledger_path: Path,
    *,
    refresh: bool = False,
    offline: bool = False,
    client: Any = None,
    histories: Mapping[str, Any] | None = None,
) -> StatusReport:
    """The dashboard for ``ledger_path``. Default and ``offline``: no network (cache, else the
    recorded states). ``refresh``: ask GitHub, then record the new states into the ledger."""
    if refresh and offline:
        raise InputError("--refresh and --offline contradict each other", hint="pass one of them")
    ledger = ledger_mod.load_ledger(ledger_path)
    mode = "refresh" if refresh else ("offline" if offline else "default")
    if client is None:
        client = make_client(offline=not refresh)
    elif not refresh and not getattr(client, "offline", True):
        raise InputError("status without --refresh must not use the network: pass an offline client")
    if histories is None:
        histories = open_histories(ledger)
    report = collect_status(ledger, client=client, mode=mode, histories=histories)
    if refresh:
        report.recorded = record_status(ledger_path, report)  # (finishes an interrupted ledger edit first)
    report.interrupted = interruptions(ledger.root)  # what is still half-done, as validate says
    if mode != "refresh" and any(r.pr and r.pr.source == "recorded" for r in report.rows):
        report.warnings.append(
            f"offline: showing recorded states (oldest: {report.oldest()}); `patchset status --refresh` asks GitHub"
        )
    elif mode == "offline":
        report.warnings.append(f"offline: no network used; the oldest data shown is {report.oldest()}")
    return report


def _recorded_followups(r: StatusRow) -> list[str] | None:
    """What ``[patch.status] followups`` becomes for a freshly read row: the reverts and
    follow-ups GitHub's timeline named (not mentions, not what a clone's commits say: the clone
    is read again each time); None when no timeline was read (keep what is recorded)."""
    from patchset.tracker import followups as fu

    if "timeline" not in r.followups_from or "recorded" in r.followups_from:
        return None  # no timeline read now (or only for some refs): keep what is recorded
    timeline = [f for f in r.followups if f.get("via") == "timeline"]
    out: list[str] = []
    for d in timeline:
        try:
            text = fu.recorded_text(fu.FollowUp.from_json(d))
        except fu.BadItem:
            continue
        if text and text not in out:
            out.append(text)
    return out


_SHA = re.compile(r"[0-9a-f]{7,40}")


def _recordable(pr: RefRow, today: dt.date) -> dict[str, Any] | None:
    """The ``[patch.status]`` values for a freshly read state, or None when one of them is not
    what the ledger's schema takes (the client checks every answer, so this is a last guard: a
    bad value must never stop the recording of the other rows)."""
    new: dict[str, Any] = {"pr_state": pr.state, "recorded": today}
    if pr.state == "merged" and pr.merged_at:
        try:
            new["merged_at"] = dt.date.fromisoformat(pr.merged_at[:10])
        except ValueError:
            return None
    if pr.state == "merged" and pr.merge_commit:
        if not _SHA.fullmatch(pr.merge_commit):
            return None
        new["merge_commit"] = pr.merge_commit
    return new


def record_status(ledger_path: Path, report: StatusReport, today: dt.date | None = None) -> list[str]:
    """Write every freshly read primary PR state into ``[patch.status]`` (one atomic edit), and
    the reverts and follow-ups GitHub's timeline named (``followups``). Human notes and the
    vendored ``head`` are kept. Returns the ids whose status changed."""
    today = today or dt.date.today()
    fresh = {r.id for r in report.rows if r.pr is not None and r.pr.source == "network" and r.pr.known}
    follow = {r.id: f for r in report.rows if (f := _recorded_followups(r)) is not None}
    if not fresh and not follow:
        return []
    changed: list[str] = []
    with ledger_mod.edit(ledger_path) as e:
        for r in report.rows:
            t = e.patch_table(r.id) if r.id in fresh or r.id in follow else None
            if t is None:
                continue
            old = dict(t.get("status") or {})
            new: dict[str, Any] = {}
            pr = r.pr
            if r.id in fresh and pr is not None:
                values = _recordable(pr, today)
                if values is None:
                    report.warnings.append(f"{r.id}: upstream state not recorded (a value is not a date or a commit)")
                else:
                    new = values
                    for k, v in new.items():
                        e.set_path(t, f"status.{k}", v)
                    if pr.state != "merged":
                        st = t.get("status")
                        for k in ("merged_at", "merge_commit"):
                            if st is not None and k in st:
                                del st[k]
            if r.id in follow:
                items = follow[r.id]
                st = t.get("status")
                if items:
                    e.set_path(t, "status.followups", items)
                elif st is not None and "followups" in st:
                    del st["followups"]
                if list(old.get("followups") or []) != items:
                    changed.append(r.id)
            if any(old.get(k) != v for k, v in new.items() if k != "recorded") and r.id not in changed:
                changed.append(r.id)
    return changed

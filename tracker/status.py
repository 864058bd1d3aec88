"""``patchset status``: what upstream's state means for every patch of the ledger, and what to do.

For each patch: the states of the PRs and issues it names (one batched request per repository
through ``patchset.tracker.github``), whether a merged PR is in the base, upstream's branch and
which release, how a vendored PR's diff drifted from our body, later upstream work naming it
(``tracker.followups``) and the action that follows.

Offline first: without ``--refresh`` states come from the client's cache or the ledger's
``[patch.status]``; ``--refresh`` asks GitHub and records them in one atomic edit. A failed or
malformed answer marks its row and falls back to the recorded state: the dashboard always
renders (docs/github.md).
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from patchset.commands.interrupted import interruptions
from patchset.errors import InputError
from patchset.ledger import store as ledger_mod
from patchset.ledger.model import Ledger, Patch, PullState
from patchset.tracker.actions import decide
from patchset.tracker.drift import analyse
from patchset.tracker.histories import open_histories, place_merge
from patchset.tracker.recording import record_status
from patchset.tracker.report import RefRow, StatusReport, StatusRow
from patchset.tracker.rowfollowups import collect_followups
from patchset.upstream.refs import OFFLINE, PRRef, PRState, RowError

__all__ = ["MODES", "ROLES", "collect_status", "make_client", "status"]

MODES = ("default", "offline", "refresh")
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
        state = PullState("merged" if got.merged else ("draft" if got.draft and got.state == "open" else got.state))
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
    if p.authors and p.origin.verbatim:
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
    aliases = getattr(client, "aliases", None)
    per_patch = {p.id: _refs_of(p, aliases) for p in ledger.patches}
    all_refs = list(dict.fromkeys(r for refs in per_patch.values() for _, r in refs))
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
        analyse(ledger, p, row, client, mode)
        if row.pr is not None and row.pr.state == "merged":
            place_merge(row, ledger.targets.get(p.target), histories.get(p.target))
        collect_followups(p, row, refs, states, ledger.targets.get(p.target), histories.get(p.target))
        decide(p, row)
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

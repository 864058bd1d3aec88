"""Renderings of the upstream-status dashboard for people: a table per target (colour for
state, drift and action) and Markdown (for an issue or a PR comment). Machines use
``StatusReport.to_json()``; the static HTML page is ``tracker.html``.

Everything on the page came from outside (GitHub, the ledger, recorded state): the terminal view
prints through ``Term``, which shows control characters instead of sending them; the Markdown
view passes every value through ``patchset.text``'s Markdown sanitisers (``markdown_cell``,
``markdown_code``, ``markdown_link``: http(s) links only), so no value adds a cell, a row, HTML
or a link.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from typing import Any

from patchset.commands.table import Cell, Col, Styled, Term
from patchset.text import markdown_cell, markdown_code, markdown_link
from patchset.tracker.links import commit_url, ref_url
from patchset.tracker.report import RefRow, StatusReport, StatusRow
from patchset.upstream.refs import DEFAULT_ALIASES

STATE_STYLE = {
    "merged": "magenta",
    "open": "green",
    "draft": "cyan",
    "closed": "red",
    "unknown": "yellow",
    "none": "dim",
}
DRIFT_STYLE = {
    "unchanged": "green",
    "revised": "bold yellow",
    "merged-as-vendored": "magenta",
    "merged-with-changes": "bold magenta",
    "merged": "magenta",
    "closed-unmerged": "red",
    "head-moved": "yellow",
    "unknown": "dim",
    "n/a": "dim",
}
ACTION_STYLE = {
    "drop-at-rebase": "bold magenta",
    "refresh": "bold yellow",
    "upstream": "blue",
    "held": "yellow",
    "nothing": "green",
    "dropped": "dim",
    "unknown": "bold red",
    "follow-up": "bold yellow",
    "reverted": "bold red",
}
ACTION_WORDS = {
    "drop-at-rebase": "drop at next rebase",
    "refresh": "refresh from the PR",
    "upstream": "upstream it",
    "held": "held",
    "nothing": "nothing to do",
    "dropped": "dropped",
    "unknown": "unknown",
    "follow-up": "upstream fixed it again",
    "reverted": "upstream reverted it",
}
FOLLOWUP_WORDS = {
    "reverted": "reverted by",
    "follow-up-merged": "follow-up merged",
    "follow-up-open": "follow-up open",
    "mentioned": "mentioned in",
}
MODE_WORDS = {
    "default": "no network: answers cached by earlier `--refresh` runs, else the states recorded in the ledger; "
    "`patchset status --refresh` asks GitHub",
    "offline": "no network at all: the cache, else the states recorded in the ledger",
    "refresh": "asked GitHub now; the new states are recorded in the ledger",
}
# What the two words that mean "nothing to show" mean on the dashboard.
LEGEND = (
    ("n/a", "no drift to compare: the patch is not taken verbatim from a PR (ours, a port), or it is dropped"),
    (
        "unknown",
        "not known yet: no data (run `patchset status --refresh`), a request failed (the row says why), "
        "or the upstream diff could not be compared",
    ),
    (
        "not read",
        "the follow-ups of a PR come from GitHub's timeline (`--refresh` with a token), a local clone of the "
        "upstream, or what an earlier refresh recorded in the ledger: none of them was at hand",
    ),
)


def _yes(v: bool | None) -> str:
    return "?" if v is None else ("yes" if v else "no")


def pr_words(pr: RefRow) -> str:
    """A PR's state, merge day and author: ``merged 2026-10-01 by QHarshil``."""
    return pr.state + (f" {pr.merged_at[:10]}" if pr.merged_at else "") + (f" by {pr.author}" if pr.author else "")


def upstream_cell(r: StatusRow) -> str:
    """The PR column in words: ``vllm-project/vllm#58021 merged 2026-10-01 by QHarshil``."""
    return "—" if r.pr is None else f"{r.pr.ref} {pr_words(r.pr)}"


def days_since(iso: str | None) -> int | None:
    if not iso:
        return None
    try:
        when = dt.datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return None
    return max(0, int((time.time() - when.timestamp()) // 86400))


def age_cell(r: StatusRow) -> str:
    """How old the PR is and when it last moved: ``opened 91 days ago; last activity 2026-09-25``."""
    if r.pr is None:
        return ""
    bits = []
    days = days_since(r.pr.created_at)
    if days is not None:
        bits.append(f"opened {days} day{'s' if days != 1 else ''} ago")
    last = r.pr.merged_at if r.pr.state == "merged" and r.pr.merged_at else r.pr.updated_at
    if last:
        bits.append(f"last activity {last[:10]}")
    return "; ".join(bits)


def short_ref(text: str) -> str:
    """``vllm-project/vllm#58999`` -> ``vllm#58999`` for the repositories the ledger has short names for."""
    repo, sep, n = text.partition("#")
    short = {v.lower(): k for k, v in DEFAULT_ALIASES.items()}.get(repo.lower())
    return f"{short}#{n}" if sep and short else text


def _listed_followups(r: StatusRow) -> tuple[list[tuple[str, str, str | None, str]], str]:
    """The follow-ups of a row that are listed, as ``(words, ref, link, tail)``, and the item
    counting its mentions ("" for none): mentions are counted, not listed."""
    listed = [f for f in r.followups if f["class"] != "mentioned"]
    mentions = len(r.followups) - len(listed)
    parts = [
        (
            FOLLOWUP_WORDS.get(f["class"], f["class"]),
            short_ref(f["ref"]) if "#" in f["ref"] else f"commit {str(f.get('merge_commit') or '')[:12]}",
            (f.get("url") or ref_url(f["ref"])) if "#" in f["ref"] else commit_url(f["ref"], f.get("merge_commit")),
            " (in the base)" if f.get("in_base") else "",
        )
        for f in listed
    ]
    return parts, f"{mentions} mention{'s' if mentions != 1 else ''}" if mentions else ""


def followup_items(r: StatusRow) -> list[str]:
    """The follow-ups of a row, one item each: ``reverted by vllm#58999``, ``follow-up merged
    vllm#59001 (in the base)``, ``2 mentions``."""
    parts, mentions = _listed_followups(r)
    items = [f"{words} {ref}{tail}" for words, ref, _link, tail in parts]
    return [*items, mentions] if mentions else items


def followups_cell(r: StatusRow) -> str:
    """The follow-ups in one cell; ``not read`` when the patch names a PR but no timeline, clone
    or record was read (no token: GitHub's REST answers carry no timeline)."""
    items = followup_items(r)
    if items:
        return "; ".join(items)
    has_pr = r.pr is not None or any(x.kind == "pr" for x in r.refs)
    return ("none" if r.followups_from else "not read") if has_pr else ""


def action_cell(r: StatusRow) -> str:
    """The action word and its text, the word said once (``held: <reason>``)."""
    word = ACTION_WORDS.get(r.action, r.action)
    text = r.action_text
    if text.lower().startswith(word.lower() + ":"):  # a text that already says it
        text = text[len(word) + 1 :].lstrip()
    return word + (f": {text}" if text else "")


def detail_cell(r: StatusRow) -> str:
    """Review, CI, where the merge is, and the other refs of the patch."""
    bits: list[str] = []
    if r.pr is not None:
        if r.pr.review:
            bits.append(r.pr.review.lower().replace("_", " "))
        if r.pr.ci:
            bits.append(f"CI {r.pr.ci.lower()}")
        if r.pr.state == "merged":
            if r.in_base is not None:
                bits.append(f"in base: {_yes(r.in_base)}")
            if r.in_main is not None:
                bits.append(f"in main: {_yes(r.in_main)}")
            if r.first_release:
                bits.append(f"first in {r.first_release}")
        if r.pr.merge_commit and r.pr.state == "merged":
            bits.append(f"merge commit {r.pr.merge_commit[:12]}")
        if r.head_moved is not None:
            bits.append("head moved" if r.head_moved else "head as vendored")
    for ref in r.refs:
        bits.append(f"{ref.role.rstrip('s')} {ref.ref} {ref.state}")
    return "; ".join(bits)


def render_status(term: Term, report: StatusReport) -> None:
    """A table per target, with a header saying how old the data is, and a legend."""
    head = f"upstream status of {report.ledger}"
    if report.title:
        head += f" — {report.title}"
    term.line(Styled(head, "bold"))
    term.line(
        f"mode: {report.mode} ({MODE_WORDS.get(report.mode, '')}); data: {report.oldest()}"
        + (f"; {report.round_trips} request(s)" if report.round_trips else "")
    )
    for w in report.warnings:
        term.line(Styled("warning:", "yellow"), f" {w}")
    for found in report.interrupted:
        style = "bold red" if found.problem else "yellow"
        term.line(Styled("interrupted:" if found.problem else "note:", style), f" {found.message}")
    cols = [
        Col("#", right=True),
        Col("patch", whole=True),
        Col("origin", drop=6),
        Col("upstream", drop=3),
        Col("drift", drop=4),
        Col("action", drop=1, grow=True),
        Col("follow-ups", drop=2),
        Col("files", drop=5),
        Col("age", drop=7),
        Col("detail", drop=8),
        Col("data", drop=9),
    ]
    for target, rows in report.by_target().items():
        t = report.targets.get(target, {})
        where = t.get("github") or "no GitHub repository recorded: PR references must read OWNER/REPO#N"
        table: list[list[Cell]] = []
        for r in rows:
            pid = r.id if r.state == "active" else f"{r.id} [{r.state}]"
            up = upstream_cell(r) + (f" ({r.error})" if r.error else "")
            table.append(
                [
                    str(r.order or ""),
                    Styled(pid, "dim" if r.state != "active" else ""),
                    r.origin,
                    Styled(up, "bold red" if r.error else STATE_STYLE.get(r.upstream_state, "")),
                    Styled(r.drift, DRIFT_STYLE.get(r.drift, "")),
                    Styled(action_cell(r), ACTION_STYLE.get(r.action, "")),
                    followups_cell(r),
                    list(r.files),
                    age_cell(r),
                    detail_cell(r),
                    Styled(r.data, "dim"),
                ]
            )
        term.table(cols, table, title=Styled(f"{target} ({where}, base {t.get('base') or '—'})", "bold"))
    counts = report.counts("action")
    parts: list[str | Styled] = ["actions: " + ("none" if not counts else "")]
    for i, (a, n) in enumerate(sorted(counts.items())):
        parts += [", " if i else "", Styled(f"{n} {ACTION_WORDS.get(a, a)}", ACTION_STYLE.get(a, ""))]
    term.line(*parts)
    for word, meaning in LEGEND:
        term.line(Styled(f"{word}:", "dim"), f" {meaning}")
    for e in report.errors():
        term.line(Styled("error:", "bold red"), f" {e}")
    if report.recorded:
        term.line(f"recorded into the ledger: {', '.join(report.recorded)}")


_md = markdown_cell


def _md_followups(r: StatusRow) -> str:
    parts, mentions = _listed_followups(r)
    items = [f"{_md(words)} {markdown_link(ref, link)}{tail}" for words, ref, link, tail in parts]
    return "; ".join(items + ([_md(mentions)] if mentions else [])) or _md(followups_cell(r))


def _md_upstream(r: StatusRow) -> str:
    if r.pr is None:
        return "—"
    out = markdown_link(upstream_cell(r), r.pr.url or ref_url(r.pr.ref, r.pr.kind))
    if r.pr.state == "merged" and r.pr.merge_commit:
        out += f" ({markdown_link(f'merge {r.pr.merge_commit[:12]}', commit_url(r.pr.ref, r.pr.merge_commit))})"
    for ref in r.refs:
        out += f"; {_md(ref.role.rstrip('s'))} " + markdown_link(
            f"{ref.ref} {ref.state}", ref.url or ref_url(ref.ref, ref.kind)
        )
    return out


def to_markdown(report: StatusReport) -> str:
    """The dashboard as Markdown, the terminal's content: a table per target, the data's age, the
    mode in words, and the legend. Every value escaped; http(s) links only."""
    out = [
        f"# Upstream status{': ' + _md(report.title) if report.title else ''}",
        "",
        f"Mode {markdown_code(report.mode)} ({_md(MODE_WORDS.get(report.mode, ''))}), generated "
        f"{_md(report.generated_at)}; data: {_md(report.oldest())}.",
        "",
    ]
    for w in report.warnings:
        out.append(f"> **warning:** {_md(w)}")
    for found in report.interrupted:
        out.append(f"> **{'interrupted' if found.problem else 'note'}:** {_md(found.message)}")
    if report.warnings or report.interrupted:
        out.append("")
    for target, rows in report.by_target().items():
        t = report.targets.get(target, {})
        out += [
            f"## {_md(target)} ({markdown_code(t.get('github') or '') or '-'}, "
            f"base {markdown_code(t.get('base') or '—')})",
            "",
            "| # | patch | origin | upstream | drift | action | follow-ups | files | age | detail | data |",
            "|--:|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            pid = markdown_code(r.id, cell=True) + (f" *({_md(r.state)})*" if r.state != "active" else "")
            up = _md_upstream(r)
            if r.error:
                up += f" **{_md(r.error)}**"
            word = ACTION_WORDS.get(r.action, r.action)
            text = action_cell(r)[len(word) :].lstrip(": ")
            action = f"**{_md(word)}**" + (f": {_md(text)}" if text else "")
            files = ", ".join(markdown_code(f, cell=True) for f in r.files)
            out.append(
                f"| {r.order or ''} | {pid} | {_md(r.origin)} | {up} | {_md(r.drift)} | {action} | "
                f"{_md_followups(r)} | {files} | {_md(age_cell(r))} | {_md(detail_cell(r))} | {_md(r.data)} |"
            )
        out.append("")
    counts = report.counts("action")
    out.append("Actions: " + ", ".join(f"{n} {_md(ACTION_WORDS.get(a, a))}" for a, n in sorted(counts.items())) + ".")
    out += ["", *(f"- {markdown_code(word)}: {_md(meaning)}" for word, meaning in LEGEND)]
    errors = report.errors()
    if errors:
        out += ["", "Errors:", *(f"- {_md(e)}" for e in errors)]
    return "\n".join(out) + "\n"


# ---- patchset fetch ------------------------------------------------------------------------------
FETCH_STYLE = {
    "stored": "green",
    "present": "dim",
    "local": "dim",
    "missing": "yellow",
    "failed": "bold red",
    "refused": "bold red",
}
CHECK_STYLE = {
    "unchanged": "green",
    "moved-same": "cyan",
    "changed": "bold yellow",
    "moved": "yellow",
    "gone": "bold red",
    "error": "bold red",
    "unpinned": "dim",
    "local": "dim",
    "offline": "dim",
}


def _source_table(
    term: Term,
    rows: Sequence[Any],
    styles: dict[str, str],
    shas: tuple[str, str],
    headings: tuple[str, str] | None = None,
) -> None:
    """One row per patch source (fetch and check rows alike): patch, source, coloured status, two
    commit or sha256 fields cut to 12 characters (the row attributes ``shas``, shown under
    ``headings``), and the detail message."""
    cols = [
        Col("patch", whole=True),
        Col("source", whole=True, drop=2),
        Col("status"),
        *(Col(h, drop=3 + i) for i, h in enumerate(headings or shas)),
        Col("detail", drop=1),
    ]
    term.table(
        cols,
        [
            [
                r.id,
                r.source,
                Styled(r.status, styles.get(r.status, "")),
                *((getattr(r, a) or "")[:12] for a in shas),
                r.message,
            ]
            for r in rows
        ],
    )


def render_fetch(term: Term, report) -> None:  # report: patchset.commands.fetch.FetchReport
    """One line per patch: what fetch did, and whether anything was written."""
    for w in report.warnings:
        term.line(Styled("warning:", "yellow"), f" {w}")
    _source_table(term, report.rows, FETCH_STYLE, ("head", "sha256"))
    if report.written:
        n = sum(1 for r in report.rows if r.status == "stored")
        term.line(Styled(f"stored {n} bod{'y' if n == 1 else 'ies'} and updated the lock", "green"))
    elif report.failed or report.refused:
        term.line(Styled("nothing was written", "bold red"), ": stored bodies and the lock are unchanged")
        down = report.no_network()
        for where, n in down.items():
            term.line(Styled("no network:", "bold red"), f" {where}: {n} source(s) not fetched (asked once)")
        for s in report.unreachable():
            row_down = any(
                s.startswith(f"{r.id}: ") and r.error and r.error.get("error") == "no_network" for r in report.failed
            )
            if not row_down:
                term.line(f"could not reach {s}", indent="  ")


def render_check(term: Term, report) -> None:  # report: patchset.commands.fetch.CheckReport
    """One line per source, then the interdiff of every source whose change changed."""
    _source_table(term, report.rows, CHECK_STYLE, ("pinned", "current"), headings=("pinned", "now"))
    for r in report.rows:
        if r.interdiff:
            term.line(Styled(f"interdiff of {r.id} (stored -> upstream):", "bold"))
            term.write(r.interdiff.rstrip("\n"))

"""Renderings of inspection and apply results for people (machines use ``--json``).

Every table goes through ``patchset.commands.table`` so it reads at any width and in pipes.
"""

from __future__ import annotations

import shlex
from collections import Counter
from typing import Any

from patchset.commands.table import Col, Styled, Term

STATE_STYLE = {"active": "green", "held": "yellow", "dropped": "dim"}
BODY_STYLE = {"present": "green", "not imported": "cyan", "hash mismatch": "bold red", "not in lock": "yellow"}
NO_PR = "no PR"


def render_validate(term: Term, rep: Any) -> None:  # rep: patchset.commands.inspection.ValidateReport
    term.table(
        [Col("target", whole=True), Col("active", right=True), Col("held", right=True), Col("dropped", right=True)],
        [[t, *(str(c.get(s, 0)) for s in ("active", "held", "dropped"))] for t, c in rep.counts.items()],
        title=f"ledger {rep.ledger}",
    )
    by_state = Counter(rep.bodies.values())
    parts: list[str | Styled] = ["bodies: " + ("none" if not by_state else "")]
    for i, (s, n) in enumerate(sorted(by_state.items())):
        parts += [", " if i else "", Styled(f"{n} {s}", BODY_STYLE.get(s, ""))]
    term.line(*parts)
    if rep.shared_files:
        term.line("files touched by several patches (applied in this order):")
        for f, ids in rep.shared_files.items():
            term.line(f"{f}: " + " → ".join(ids), indent="  ")
    if rep.switches:
        term.line(
            "switches: "
            + "; ".join(
                f"{pid} ({', '.join([*(f'{k}={v}' for k, v in s['env'].items()), *s['flags']])})"
                for pid, s in rep.switches.items()
            )
        )
    if rep.tests:
        term.line("tests declared: " + ", ".join(f"{pid} ({n})" for pid, n in rep.tests.items()))
    for w in rep.warnings:
        term.line(Styled("warning:", "yellow"), f" {w}")
    for p in rep.problems:
        term.line(Styled("problem:", "bold red"), f" {p}")
    term.line(
        Styled("ok", "green") if rep.ok else Styled(f"{len(rep.problems)} problem(s)", "bold red"),
        ": " + rep.coverage(),
    )


def render_hashes(term: Term, pair: dict[str, str | None] | None, indent: str) -> None:
    """The two sha256 of a file that does not match: what the lock expects and what is there."""
    if pair:
        term.line(f"expected sha256 {pair.get('expected') or '(no file)'}", indent=indent)
        term.line(f"actual   sha256 {pair.get('actual') or '(no file)'}", indent=indent)


def render_list(term: Term, rows: list[dict[str, Any]], header: bool = False) -> None:
    """The series table; piped, rows only (``cut -f2`` gives the ids) unless ``header``."""
    cols = [
        Col("#", right=True),
        Col("id", whole=True),
        Col("target", whole=True, drop=2),
        Col("origin", drop=3),
        Col("PR", whole=True, drop=1),
        Col("PR state", drop=4),
        Col("state"),
        Col("body", drop=5),
        Col("files", drop=6),  # whole paths; at a narrow width on a line under the row
    ]
    table = [
        [
            str(r["order"]),
            r["id"],
            r["target"],
            r["origin"],
            r["prs"] or "-",
            r["pr_state"] if r["prs"] else NO_PR,
            Styled(r["state"], STATE_STYLE.get(r["state"], "")),
            Styled(r["body"], BODY_STYLE.get(r["body"], "")),
            r["files"] or "-",
        ]
        for r in rows
    ]
    term.table(cols, table, header=header)


def render_show(term: Term, d: dict[str, Any]) -> None:
    term.line(
        Styled(d["id"], "bold"),
        f"  ({d['target']}, {d['kind']}, {d['origin']}, ",
        Styled(d["state"], STATE_STYLE.get(d["state"], "")),
        f"{', #' + str(d['order']) if d['order'] else ''})",
    )
    term.line(d["title"], indent="  ")
    if d["description"]:
        term.line(d["description"], indent="  ")
    if d["reason"]:
        term.line(f"reason: {d['reason']}", indent="  ")
    up = d["upstream"]
    for key in ("prs", "ports", "reverts", "issues", "based_on", "commits"):
        if up.get(key):
            term.line(f"{key}: {', '.join(up[key])}", indent="  ")
    if d["authors"]:
        term.line(
            f"authors: {', '.join(d['authors'])}" + (f"; porter: {d['porter']}" if d["porter"] else ""), indent="  "
        )
    sw = d["switches"]
    if sw["env"] or sw["flags"]:
        term.line("switches: " + ", ".join([*(f"{k}={v}" for k, v in sw["env"].items()), *sw["flags"]]), indent="  ")
    st = d["status"]
    has_pr = bool(up.get("prs") or up.get("ports"))
    if has_pr and (st["pr_state"] != "unknown" or st["recorded"]):
        term.line(
            f"upstream status: {st['pr_state']}"
            + (f" (recorded {st['recorded']})" if st["recorded"] else "")
            + (f", merged {st['merged_at']}" if st["merged_at"] else "")
            + (f": {st['note']}" if st["note"] else ""),
            indent="  ",
        )
    elif not has_pr:
        term.line(f"upstream status: {NO_PR}", indent="  ")
    if d["source"]["ref"]:
        term.line(f"source: {d['source']['kind']} {d['source']['ref']}", indent="  ")
    gen, overlay = d["generate"], d["overlay"]
    if gen:
        term.line(f"generated by: {shlex.join(gen['command'])}", indent="  ")
        if gen["script"]:
            term.line(f"script: {gen['script']}", indent="  ")
        if gen["bind"]:
            term.line(f"bind: {gen['bind']}", indent="  ")
    if overlay:
        term.line(
            f"overlay of: {', '.join(overlay['files'])}"
            + (f" (manifest {overlay['manifest']})" if overlay["manifest"] else ""),
            indent="  ",
        )
    for t in d["tests"]:
        term.line(f"test: {t['command']} [tags: {', '.join(t['tags']) or '-'}; timeout {t['timeout']}s]", indent="  ")
    if d["notes"]:
        term.line(f"notes: {d['notes']}", indent="  ")
    term.line(f"body: {d['body_path']} ({d['body_state']})", indent="  ")
    if d["diffstat"]:
        term.table(
            [
                Col("file", drop=1),  # a path that does not fit moves under the row, whole
                Col("+", right=True),
                Col("-", right=True),
                Col("op"),
            ],
            [
                [s["path"], Styled(f"+{s['added']}", "green"), Styled(f"-{s['removed']}", "red"), s["op"]]
                for s in d["diffstat"]
            ],
        )
    elif d["files"]:
        for f in d["files"]:
            term.line(f, indent="    ")


OUTCOME_STYLE = {
    "applied": "green",
    "already": "green",
    "dry-run": "cyan",
    "partial": "yellow",
    "failed": "bold red",
    "mismatch": "bold red",
}


def _apply_row(i: int, pr: Any) -> list[Any]:
    hunks = [h for f in pr.files for h in f.hunks]
    if pr.status == "applied":
        moved = [h for h in hunks if h.status in ("offset", "fuzz")]
        label = "fuzz" if any(h.status == "fuzz" for h in hunks) else "offset" if moved else "clean"
        style = "yellow" if moved else "green"
        detail = "; ".join(
            f"{f.path} {h.describe()}" for f in pr.files for h in f.hunks if h.status in ("offset", "fuzz")
        )
    else:
        label, style = pr.status.replace("_", " "), "red" if pr.status != "not_reached" else "dim"
        detail = "; ".join(
            f"{f.path}: {f.message or f.status}"
            + "".join(f" — {h.describe()}" for h in f.hunks if h.status == "failed")
            for f in pr.files
            if f.status != "applied"
        )
    return [str(i), pr.patch_id, Styled(label, style), detail]


def render_apply(term: Term, reports: list[Any]) -> None:
    """Per target: the outcome, and per patch clean / offset / fuzz / failed with hunk detail."""
    for rep in reports:
        term.line(
            Styled(rep.target, "bold"),
            f" → {rep.tree} ({rep.kind}, {rep.layout} layout" + (f", fuzz {rep.fuzz}" if rep.fuzz else "") + ")",
        )
        res = rep.result
        if res is not None:
            term.table(
                [Col("#", right=True), Col("patch", whole=True), Col("result", drop=1), Col("detail", drop=2)],
                [_apply_row(i, pr) for i, pr in enumerate(res.patches, 1)],
            )
        if rep.state is not None and rep.outcome in ("partial", "already"):
            for ps in rep.state.patches:
                term.line(
                    f"{ps.patch_id}: {ps.state.replace('_', ' ')}" + (f" ({ps.reason})" if ps.reason else ""),
                    indent="   ",
                )
        for f in rep.mismatched:
            term.line(Styled("hash mismatch:", "red"), f" {f}", indent="   ")
            render_hashes(term, rep.hashes.get(f), indent="     ")
        for c in rep.commits:
            term.line(f"commit {c[:12]}", indent="   ")
        for w in getattr(rep, "warnings", []):
            term.line(Styled("warning:", "yellow"), f" {w}", indent="   ")
        term.line(Styled(rep.outcome, OUTCOME_STYLE.get(rep.outcome, "")), f": {rep.message}")

"""Rich renderings of inspection results for people (machines use ``--json``)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from patchset.commands.inspection import ValidateReport

STATE_STYLE = {"active": "green", "held": "yellow", "dropped": "dim"}
BODY_STYLE = {"present": "green", "not imported": "cyan", "hash mismatch": "bold red", "not in lock": "yellow"}


def render_validate(console: Console, rep: ValidateReport) -> None:
    t = Table(title=f"ledger {rep.ledger}", show_lines=False)
    for col in ("target", "active", "held", "dropped"):
        t.add_column(col, justify="right" if col != "target" else "left")
    for target, counts in rep.counts.items():
        t.add_row(target, *(str(counts.get(s, 0)) for s in ("active", "held", "dropped")))
    console.print(t)
    by_state: dict[str, int] = {}
    for state in rep.bodies.values():
        by_state[state] = by_state.get(state, 0) + 1
    console.print("bodies: " + ", ".join(f"[{BODY_STYLE.get(s, '')}]{n} {s}[/]" for s, n in sorted(by_state.items())))
    if rep.shared_files:
        console.print("files touched by several patches (applied in this order):")
        for f, ids in rep.shared_files.items():
            console.print(f"  {f}: " + " → ".join(ids))
    if rep.switches:
        console.print(
            "switches: "
            + "; ".join(
                f"{pid} ({', '.join([*(f'{k}={v}' for k, v in s['env'].items()), *s['flags']])})"
                for pid, s in rep.switches.items()
            )
        )
    if rep.tests:
        console.print("tests declared: " + ", ".join(f"{pid} ({n})" for pid, n in rep.tests.items()))
    for w in rep.warnings:
        console.print(f"[yellow]warning:[/] {w}")
    for p in rep.problems:
        console.print(f"[bold red]problem:[/] {p}")
    console.print("[green]ok[/]" if rep.ok else f"[bold red]{len(rep.problems)} problem(s)[/]")


def render_list(console: Console, rows: list[dict[str, Any]]) -> None:
    t = Table()
    for col in ("#", "id", "target", "origin", "PR", "PR state", "state", "body", "files"):
        t.add_column(col, overflow="fold", no_wrap=col in ("#", "id", "state"))
    for r in rows:
        files = [f.split("/", 1)[1] if f.count("/") > 1 else f for f in r["files"]]  # drop the package dir
        shown = "\n".join(files[:3]) + (f"\n… +{len(files) - 3}" if len(files) > 3 else "")
        t.add_row(
            str(r["order"]),
            r["id"],
            r["target"],
            r["origin"],
            ", ".join(r["prs"]) or "—",
            r["pr_state"],
            f"[{STATE_STYLE.get(r['state'], '')}]{r['state']}[/]",
            f"[{BODY_STYLE.get(r['body'], '')}]{r['body']}[/]",
            shown,
        )
    console.print(t)


def render_show(console: Console, d: dict[str, Any]) -> None:
    console.print(
        f"[bold]{d['id']}[/]  ({d['target']}, {d['origin']}, [{STATE_STYLE.get(d['state'], '')}]"
        f"{d['state']}[/]{', #' + str(d['order']) if d['order'] else ''})"
    )
    console.print(f"  {d['title']}")
    if d["description"]:
        console.print(f"  {d['description']}")
    if d["reason"]:
        console.print(f"  reason: {d['reason']}")
    up = d["upstream"]
    for key in ("prs", "ports", "reverts", "issues", "based_on", "commits"):
        if up.get(key):
            console.print(f"  {key}: {', '.join(up[key])}")
    if d["authors"]:
        console.print(f"  authors: {', '.join(d['authors'])}" + (f"; porter: {d['porter']}" if d["porter"] else ""))
    sw = d["switches"]
    if sw["env"] or sw["flags"]:
        console.print("  switches: " + ", ".join([*(f"{k}={v}" for k, v in sw["env"].items()), *sw["flags"]]))
    st = d["status"]
    if st["pr_state"] != "unknown" or st["recorded"]:
        console.print(
            f"  upstream status: {st['pr_state']}"
            + (f" (recorded {st['recorded']})" if st["recorded"] else "")
            + (f", merged {st['merged_at']}" if st["merged_at"] else "")
            + (f": {st['note']}" if st["note"] else "")
        )
    if d["source"]["ref"]:
        console.print(f"  source: {d['source']['kind']} {d['source']['ref']}")
    for t in d["tests"]:
        console.print(f"  test: {t['command']} [tags: {', '.join(t['tags']) or '-'}; timeout {t['timeout']}s]")
    if d["notes"]:
        console.print(f"  notes: {d['notes']}")
    console.print(f"  body: {d['body_path']} ({d['body_state']})")
    if d["diffstat"]:
        t = Table(box=None, show_header=False, padding=(0, 1))
        for s in d["diffstat"]:
            t.add_row("   ", s["path"], f"[green]+{s['added']}[/]", f"[red]-{s['removed']}[/]", s["op"])
        console.print(t)
    elif d["files"]:
        for f in d["files"]:
            console.print(f"    {f}")


OUTCOME_STYLE = {
    "applied": "green",
    "already": "green",
    "dry-run": "cyan",
    "partial": "yellow",
    "failed": "bold red",
    "mismatch": "bold red",
}


def render_apply(console: Console, reports: list[Any]) -> None:
    """Per target: the outcome, and per patch clean / offset / fuzz / failed with hunk detail."""
    for rep in reports:
        console.print(
            f"[bold]{rep.target}[/] → {rep.tree} ({rep.kind}, {rep.layout} layout"
            + (f", fuzz {rep.fuzz}" if rep.fuzz else "")
            + ")"
        )
        res = rep.result
        if res is not None:
            t = Table(box=None, padding=(0, 1), show_header=True)
            for col in ("#", "patch", "result", "detail"):
                t.add_column(col)
            for i, pr in enumerate(res.patches, 1):
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
                        f"{f.path}: "
                        + (f.message or f.status)
                        + "".join(f" — {h.describe()}" for h in f.hunks if h.status == "failed")
                        for f in pr.files
                        if f.status != "applied"
                    )
                t.add_row(str(i), pr.patch_id, f"[{style}]{label}[/]", detail)
            console.print(t)
        if rep.state is not None and rep.outcome in ("partial", "already"):
            for ps in rep.state.patches:
                console.print(
                    f"   {ps.patch_id}: {ps.state.replace('_', ' ')}" + (f" ({ps.reason})" if ps.reason else "")
                )
        for f in rep.mismatched:
            console.print(f"   [red]hash mismatch:[/] {f}")
        for c in rep.commits:
            console.print(f"   commit {c[:12]}")
        console.print(f"[{OUTCOME_STYLE.get(rep.outcome, '')}]{rep.outcome}[/]: {rep.message}")

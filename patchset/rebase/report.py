"""What a rebase found, per patch: the report's data classes, its JSON form and a rich rendering.

Kept apart from the orchestration so the CLI, the state file of an interrupted rebase and the
tests all read the same plain data.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

CARRIED, ALREADY_UPSTREAM, SUPERSEDED, CONFLICT, SKIPPED = (
    "carried",
    "already-upstream",
    "superseded",
    "conflict",
    "skipped",
)
VERDICTS = (CARRIED, ALREADY_UPSTREAM, SUPERSEDED, CONFLICT, SKIPPED)
# how a carried patch got there
HOWS = ("clean", "offset", "merged", "moved", "resolved", "edited")


@dataclass
class HunkConflict:
    """One hunk of a patch that conflicts, with the upstream commits that changed its lines."""

    index: int
    header: str
    line: int  # where it lands on the new base (1-based, best guess)
    commits: list[dict[str, str]] = field(default_factory=list)


@dataclass
class FileResult:
    """One file of one patch in a rebase: how it was carried (or why not)."""

    path: str  # as the patch names it
    new_path: str | None  # where it is on the new base
    how: str  # clean | offset | merged | already | conflict | broken | resolved | edited
    moved_from: str | None = None
    move_candidates: list[dict[str, Any]] = field(default_factory=list)
    message: str = ""
    hunks: list[HunkConflict] = field(default_factory=list)
    rerere_id: str = ""


@dataclass
class PatchResult:
    """One patch in a rebase: its classification and its files."""

    id: str
    verdict: str  # carried | already-upstream | superseded | conflict | skipped
    how: str = ""  # for carried: clean | offset | merged | moved | resolved | edited
    files: list[FileResult] = field(default_factory=list)
    evidence: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    old_sha256: str = ""
    new_sha256: str = ""
    range_diff: str = ""

    def reason(self, label: str) -> str:
        """The ``reason`` written to the ledger when the patch is dropped or held."""
        decisive = [e["detail"] for e in self.evidence if e.get("decisive")]
        if self.verdict == SUPERSEDED:
            return f"superseded on {label}: " + "; ".join(decisive)
        if self.verdict == ALREADY_UPSTREAM:
            return f"already upstream in {label}: " + "; ".join(decisive)
        files = ", ".join(f.path for f in self.files if f.how in ("conflict", "broken"))
        return f"set aside while rebasing onto {label}: conflicts in {files}; the body still applies to the old base"

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PatchResult:
        files = []
        for f in d.get("files", []):
            hunks = [HunkConflict(**h) for h in f.get("hunks", [])]
            files.append(FileResult(**{**f, "hunks": hunks}))
        return cls(**{**d, "files": files})


@dataclass
class RebaseReport:
    """A whole rebase: every patch's fate, the new base, what stopped it."""

    target: str
    onto: str
    old_base: str  # as the ledger had it
    old_commit: str
    new_commit: str
    new_base: str  # what the ledger records now (or would)
    status: str  # done | dry-run | conflicts | stopped | nothing-to-do
    patches: list[PatchResult] = field(default_factory=list)
    written: bool = False
    backup: str = ""  # where the previous series was kept
    state_dir: str = ""
    stopped_at: str = ""  # the patch an interactive rebase stopped at
    work_files: list[str] = field(default_factory=list)  # conflicted files written out for editing
    seconds: float = 0.0

    def counts(self) -> dict[str, int]:
        out = {v: 0 for v in VERDICTS}
        for p in self.patches:
            out[p.verdict] = out.get(p.verdict, 0) + 1
        return out

    def get(self, patch_id: str) -> PatchResult:
        for p in self.patches:
            if p.id == patch_id:
                return p
        raise KeyError(patch_id)

    @property
    def ok(self) -> bool:
        return self.status in ("done", "dry-run", "nothing-to-do") and not any(
            p.verdict == CONFLICT for p in self.patches
        )

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["counts"] = self.counts()
        d["ok"] = self.ok
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RebaseReport:
        d = {k: v for k, v in d.items() if k not in ("counts", "ok")}
        return cls(**{**d, "patches": [PatchResult.from_json(p) for p in d.get("patches", [])]})


_STYLE = {CARRIED: "green", ALREADY_UPSTREAM: "cyan", SUPERSEDED: "cyan", CONFLICT: "red", SKIPPED: "yellow"}


def _detail(p: PatchResult) -> str:
    if p.verdict == CARRIED:
        parts = []
        for f in p.files:
            if f.moved_from:
                parts.append(f"{f.moved_from} -> {f.new_path}")
            elif f.how not in ("clean",):
                parts.append(f"{f.path}: {f.how}")
        return "; ".join(parts)
    if p.verdict in (ALREADY_UPSTREAM, SUPERSEDED):
        return "; ".join(e["detail"] for e in p.evidence if e.get("decisive"))
    return "; ".join(f"{f.path}: {f.message or f.how}" for f in p.files if f.how in ("conflict", "broken"))


def render(report: RebaseReport, console: Console | None = None, *, range_diffs: bool = True) -> None:
    """Print the report: one row per patch, then conflicts with their upstream commits."""
    console = console or Console()
    title = (
        f"rebase {report.target}: {report.old_base} ({report.old_commit[:12]}) -> "
        f"{report.onto} ({report.new_commit[:12]})"
    )
    table = Table(title=title, show_lines=False)
    table.add_column("#", justify="right")
    table.add_column("patch")
    table.add_column("result")
    table.add_column("details", overflow="fold")
    for i, p in enumerate(report.patches, start=1):
        verdict = p.verdict + (f" ({p.how})" if p.how and p.verdict == CARRIED else "")
        table.add_row(str(i), p.id, Text(verdict, style=_STYLE.get(p.verdict, "")), _detail(p))
    console.print(table)
    for p in report.patches:
        for w in p.warnings:
            console.print(f"[yellow]warning[/yellow] {p.id}: {w}")
    for p in report.patches:
        if p.verdict != CONFLICT:
            continue
        console.print(f"[red]conflict[/red] {p.id}")
        for f in p.files:
            if f.how not in ("conflict", "broken"):
                continue
            where = f.new_path if f.new_path and f.new_path != f.path else ""
            console.print(f"  {f.path}{' (now ' + where + ')' if where else ''}: {f.message}")
            for h in f.hunks:
                console.print(f"    hunk #{h.index} {h.header} near line {h.line}")
                for c in h.commits:
                    console.print(f"      upstream {c['sha'][:12]} {c['subject']}")
    if range_diffs:
        for p in report.patches:
            if p.range_diff:
                console.print(f"[bold]range-diff {p.id}[/bold]")
                console.print(Text(p.range_diff.rstrip("\n")))
    counts = report.counts()
    summary = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    console.print(
        f"{summary or 'no active patches'}; status: {report.status}"
        + (f"; previous series kept in {report.backup}" if report.backup else "")
        + ("; dry run, nothing written" if report.status == "dry-run" else "")
    )
    if report.status == "stopped":
        console.print(
            f"stopped at {report.stopped_at}: edit {', '.join(report.work_files)} then run "
            "`patchset rebase --continue` (or --skip, --abort)"
        )
    elif report.status == "conflicts":
        console.print(
            "nothing written: resolve the conflicts with `patchset rebase --onto "
            f"{report.onto} --interactive` (recorded resolutions replay next time)"
        )

"""What a rebase found, per patch: the report's data classes and their JSON form.

Kept apart from the orchestration so the CLI, the state file of an interrupted rebase and the
tests all read the same plain data. The terminal view is ``patchset.commands.rebase_view``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from patchset.text import Word


class Verdict(Word):
    """What became of a patch in a rebase."""

    CARRIED = "carried"
    ALREADY_UPSTREAM = "already-upstream"
    SUPERSEDED = "superseded"
    CONFLICT = "conflict"
    SKIPPED = "skipped"


CARRIED, ALREADY_UPSTREAM, SUPERSEDED, CONFLICT, SKIPPED = Verdict
VERDICTS = tuple(Verdict)


class How(Word):
    """How one file of a patch went onto the new base."""

    CLEAN = "clean"
    OFFSET = "offset"
    MERGED = "merged"
    ALREADY = "already"
    CONFLICT = "conflict"
    BROKEN = "broken"
    RESOLVED = "resolved"  # a conflict resolved (rerere, or by hand)
    EDITED = "edited"  # edited by hand after a stop


# how a carried patch got there
HOWS = ("clean", "offset", "merged", "moved", "resolved", "edited", "regenerated", "refreshed")


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
    how: How
    moved_from: str | None = None
    move_candidates: list[dict[str, Any]] = field(default_factory=list)
    message: str = ""
    hunks: list[HunkConflict] = field(default_factory=list)
    rerere_id: str = ""


@dataclass
class PatchResult:
    """One patch in a rebase: its classification and its files."""

    id: str
    verdict: Verdict
    how: str = ""  # for carried: clean | offset | merged | moved | resolved | edited | regenerated | refreshed
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


class RebaseStatus(Word):
    """How a whole rebase ended."""

    DONE = "done"
    DRY_RUN = "dry-run"
    CONFLICTS = "conflicts"
    STOPPED = "stopped"
    NOTHING_TO_DO = "nothing-to-do"


@dataclass
class RebaseReport:
    """A whole rebase: every patch's fate, the new base, what stopped it."""

    target: str
    onto: str
    old_base: str  # as the ledger had it
    old_commit: str
    new_commit: str
    new_base: str  # what the ledger records now (or would)
    status: RebaseStatus
    patches: list[PatchResult] = field(default_factory=list)
    written: bool = False
    backup: str = ""  # where the previous series was kept
    state_dir: str = ""
    stopped_at: str = ""  # the patch an interactive rebase stopped at
    work_files: list[str] = field(default_factory=list)  # conflicted files written out for editing
    seconds: float = 0.0

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {v: 0 for v in VERDICTS}
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

"""What an apply reports: the series it takes and, per patch and per file, what happened.

Plain records (``SeriesItem`` in; ``SeriesResult``, ``PatchResult``, ``FileResult`` out) with their
JSON and text forms, kept apart from the code that fills them in (``patchset.engine.patching``,
``patchset.engine.tree``) so that a caller reads what it gets back without reading the engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from patchset.engine.hunks import HunkResult
from patchset.errors import ApplyFailed
from patchset.text import json_fields

PatchStatus = Literal["applied", "already_applied", "failed", "not_reached"]


@dataclass
class SeriesItem:
    """One patch of a series as the engine takes it: id, body and strip level."""

    patch_id: str
    body: bytes
    strip: int = 1


@dataclass
class FileResult:
    """What happened to one file of one patch."""

    path: str  # tree path written (for a deletion: the path removed)
    patch_path: str  # the path as the patch names it
    op: str
    status: str  # engine FileStatus
    hunks: Sequence[HunkResult] = field(default_factory=list)
    message: str = ""
    sha256: str | None = None  # of the file after this patch (None: absent)
    old_path: str | None = None  # tree path read (renames/copies)

    def to_json(self) -> dict[str, Any]:
        return json_fields(self, "path patch_path op old_path status message sha256 hunks")


@dataclass
class PatchResult:
    """What happened to one patch: its status and its files."""

    patch_id: str
    status: PatchStatus
    files: list[FileResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "applied"

    def to_json(self) -> dict[str, Any]:
        return json_fields(self, "patch_id status files")

    def describe(self) -> str:
        lines = [f"{self.patch_id}: {self.status}"]
        for f in self.files:
            lines.append(f"  {f.path}: {f.status}" + (f" ({f.message})" if f.message else ""))
            for h in f.hunks:
                if h.status != "clean":
                    lines.append(f"    {h.describe()}")
        return "\n".join(lines)


@dataclass
class SeriesResult:
    """A whole series on a tree: per-patch results and the digest of every touched file."""

    root: str
    ok: bool
    dry_run: bool
    committed: bool
    patches: list[PatchResult]
    files: dict[str, str | None]  # every touched tree path -> sha256 after the series
    modes: dict[str, int | None] = field(default_factory=dict)
    recovered: str | None = None  # what recover() did with an interrupted earlier run
    failed_patch: str | None = None

    def to_json(self) -> dict[str, Any]:
        return json_fields(self, "root ok dry_run committed recovered failed_patch patches") | {
            "files": dict(self.files),
            "modes": {k: (oct(v) if v is not None else None) for k, v in self.modes.items()},
        }

    def raise_for_failure(self) -> None:
        """Raise ``ApplyFailed`` (exit 1) naming the failing patch, files and hunks."""
        if self.ok:
            return
        bad = next(p for p in self.patches if p.status in ("failed", "already_applied"))
        hint = (
            "the tree seems to carry this patch already: check with detect_state"
            if bad.status == "already_applied"
            else "rebase the patch onto this tree; nothing was written"
        )
        raise ApplyFailed(f"patch {bad.patch_id} does not apply to {self.root}:\n" + bad.describe(), hint=hint)

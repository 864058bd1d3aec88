"""Which patches of a series a tree already carries (``detect_state``); reads, never writes.

Answers "is this tree patched?" without a record of what was done to it: from the lock's file
hashes when they all match, else by peeling the patches off in memory, last first, and replaying
them (``patchset.engine.patching``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from patchset.engine.hunks import reverse_file_patch
from patchset.engine.patching import apply_patch, parse_all
from patchset.engine.paths import Paths
from patchset.engine.results import SeriesItem
from patchset.engine.treestate import TreeState
from patchset.ledger.lock import sha256_bytes
from patchset.patchfmt.filepatch import FilePatch

StateName = Literal["applied", "not_applied", "unknown"]


@dataclass
class PatchState:
    """Whether a tree carries one patch (applied, not applied, unknown) and why."""

    patch_id: str
    state: StateName
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class SeriesState:
    """Which patches of a series a tree already carries."""

    patches: list[PatchState]
    matches_expected: bool | None = None  # every expected sha256 matched (None: none given)

    @property
    def all_applied(self) -> bool:
        return all(p.state == "applied" for p in self.patches)

    @property
    def none_applied(self) -> bool:
        return all(p.state == "not_applied" for p in self.patches)

    def summary(self) -> str:
        if self.matches_expected:
            return "the tree already carries the series (every file matches the lock)"
        if self.all_applied:
            return "the tree already carries the whole series"
        if self.none_applied:
            return "the tree carries none of the series"

        def spans(state: str) -> str:
            idx = [i for i, p in enumerate(self.patches, 1) if p.state == state]
            out, start = [], None
            for k, i in enumerate(idx):
                if start is None:
                    start = i
                if k + 1 == len(idx) or idx[k + 1] != i + 1:
                    out.append(f"{start}" if start == i else f"{start}-{i}")
                    start = None
            return ", ".join(out)

        text = f"the tree carries patches {spans('applied') or 'none'}"
        text += f", not {spans('not_applied')}" if spans("not_applied") else ""
        if spans("unknown"):
            text += f"; unknown: {spans('unknown')}"
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "summary": self.summary(),
            "matches_expected": self.matches_expected,
            "patches": [p.to_json() for p in self.patches],
        }


def _reverse(fps: list[FilePatch]) -> list[FilePatch]:
    return [reverse_file_patch(fp) for fp in reversed(fps)]


def detect_state(
    root: Path,
    items: list[SeriesItem],
    expected: dict[str, str | None] | None = None,
    *,
    path_for: Callable[[str], str] | None = None,
) -> SeriesState:
    """Which patches of ``items`` does the tree at ``root`` carry? Reads, never writes.

    ``expected`` (path -> sha256 after the whole series, as in the lock) short-cuts the answer when
    every file matches. Else patches are peeled off from the last (one whose reverse applies is
    *applied*), then the rest replayed forward (one that applies is *not applied*); one that fits
    neither way is *unknown*."""
    root = Path(root)
    paths = Paths(root, path_for)
    state = TreeState(paths.root)
    parsed = parse_all(items, paths, state)
    matches: bool | None = None
    if expected is not None:
        matches = True
        for path, digest in expected.items():  # keys in the patches' layout, like the lock
            data, _ = state.get(paths.resolve(path, "expected", state))
            if (None if data is None else sha256_bytes(data)) != digest:  # None: must be absent
                matches = False
                break
        if matches:
            return SeriesState([PatchState(i.patch_id, "applied", "file hashes match") for i in items], True)
    n = len(items)
    applied = [False] * n
    peel = state.fork()
    for k in range(n - 1, -1, -1):
        rev_item = SeriesItem(items[k].patch_id, b"", items[k].strip)
        r = apply_patch(peel, _reverse(parsed[k]), rev_item, paths, 0)
        if r.ok:
            applied[k] = True
    # replay: the tree with the peeled patches re-applied in order must be the tree itself
    base, replay = peel, peel.fork()
    states: list[PatchState] = []
    for k in range(n):
        item = items[k]
        if applied[k]:
            r = apply_patch(replay, parsed[k], item, paths, 0)
            if r.ok:
                states.append(PatchState(item.patch_id, "applied", "reverse-applies"))
                continue
            states.append(PatchState(item.patch_id, "unknown", "reverse-applies, but not forward on the peeled tree"))
            continue
        r = apply_patch(replay, parsed[k], item, paths, 0)
        if r.ok:
            states.append(PatchState(item.patch_id, "not_applied", "applies forward"))
        else:
            why = "; ".join(f"{f.path}: {f.message or f.status}" for f in r.files if f.status != "applied") or r.status
            states.append(PatchState(item.patch_id, "unknown", f"applies neither way: {why}"))
    del base
    return SeriesState(states, matches)

"""What one target's apply is made of, whatever the tree: the run, where it goes, its series, its report.

``ApplyRun`` is one ``patchset apply`` (the ledger and the choices every target shares), built by
the CLI and passed down; ``TreeArg`` is where one target's series goes (``parse_tree_args`` reads
``--tree [NAME=]DIR``); ``TargetReport`` is what every kind of apply (``tree``, ``repo``, an index)
returns. ``series_items`` refuses a series whose bodies are missing or changed since they were
locked (before any tree is read); ``series_files`` is what the series leaves on a base, in memory
(what a patch appended to it starts from); ``refuse_ledger_tree`` keeps a build tree from being
the ledger.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from patchset.commands.inspection import BODY_MISMATCH, BODY_MISSING, body_state
from patchset.confine import STATE_DIRS, is_within
from patchset.engine.detect import SeriesState
from patchset.engine.hunks import FileOutcome, apply_file
from patchset.engine.results import SeriesItem, SeriesResult
from patchset.engine.tree import TreePass
from patchset.errors import InputError, PatchFormatError
from patchset.ledger.lock import sha256_bytes
from patchset.ledger.model import Ledger, Patch, Target
from patchset.patchfmt.diffs import parse_patch
from patchset.patchfmt.filepatch import FilePatch
from patchset.progress import Progress
from patchset.text import Word, json_fields


class TreeKind(Word):
    """What kind of tree a series goes onto."""

    TREE = "tree"  # --tree DIR: a plain directory
    REPO = "repo"  # --repo DIR: a git checkout, one commit per patch
    INDEX = "index"  # --from-index SPEC --into DIR: a release unpacked
    WHEEL = "wheel"  # build wheel: an unpacked wheel

    @property
    def flag(self) -> str:
        """The option that named the tree, for messages."""
        return {TreeKind.TREE: "--tree", TreeKind.REPO: "--repo"}.get(self, "--into")


class Outcome(Word):
    """How one target's apply ended."""

    APPLIED = "applied"
    ALREADY = "already"  # the tree carries the series already: nothing changed
    PARTIAL = "partial"  # it carries part of it: left as it is
    FAILED = "failed"  # a patch does not apply: nothing written
    MISMATCH = "mismatch"  # the result (or the carried series) does not match the lock
    DRY_RUN = "dry-run"


@dataclass(frozen=True)
class ApplyRun:
    """One ``patchset apply``: the ledger and the choices every target's apply shares.

    ``strict_base``: refuse a ``--tree`` whose version files name another upstream commit than
    the target's base (else a warning in the report); ``durable``: fsync every step against power
    loss (None: ``$PATCHSET_FSYNC``); ``download_progress``: the ``--from-index`` download's."""

    ledger: Ledger
    fuzz: int = 0
    update_lock: bool = False
    dry_run: bool = False
    skip_applied: bool = False
    remove_empty: bool = False
    durable: bool | None = None
    strict_base: bool = False
    progress: Progress | None = None
    download_progress: Progress | None = None

    def tree_pass(self, root: Path, path_for: Callable[[str], str] | None) -> TreePass:
        """The engine's pass over ``root`` with this run's choices."""
        return TreePass(root, path_for, self.fuzz, self.dry_run, self.remove_empty, self.durable, self.progress)


@dataclass(frozen=True)
class TreeArg:
    """Where one target's series goes (``layout``: the tree's, "" for the target's own)."""

    kind: TreeKind
    path: Path
    spec: str = ""
    layout: str = ""
    branch: str = ""
    platform: str = ""  # --from-index of an installed layout: the wheel's platform ("": native)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", TreeKind(self.kind))

    def layout_of(self, target: Target) -> str:
        return target.layout_or(self.layout)


def parse_tree_args(values: tuple[str, ...], kind: str, targets: list[str]) -> dict[str, str]:
    """``--tree DIR`` (one target) or ``--tree NAME=DIR`` (several)."""
    out: dict[str, str] = {}
    for v in values:
        name, sep, rest = v.partition("=")
        if sep and name in targets and not rest.startswith("="):
            out[name] = rest
        elif len(targets) == 1:
            out[targets[0]] = v
        else:
            raise InputError(
                f"--{kind} {v!r}: which target?",
                hint=f"write --{kind} NAME=VALUE with NAME one of: {', '.join(targets)}",
            )
    return out


@dataclass
class TargetReport:
    """One target's apply: the tree, the outcome and the engine's result."""

    target: str
    tree: str
    kind: TreeKind
    layout: str
    outcome: Outcome
    message: str
    result: SeriesResult | None = None
    state: SeriesState | None = None
    mismatched: list[str] = field(default_factory=list)
    hashes: dict[str, dict[str, str | None]] = field(default_factory=dict)  # mismatched path -> expected, actual
    unlocked: bool = False
    commits: list[str] = field(default_factory=list)
    fuzz: int = 0
    warnings: list[str] = field(default_factory=list)  # e.g. the tree is built from another commit than the base

    @property
    def ok(self) -> bool:
        return self.outcome in (Outcome.APPLIED, Outcome.ALREADY, Outcome.DRY_RUN)

    def to_json(self) -> dict:
        return {
            **json_fields(self, "target tree kind layout outcome ok message fuzz mismatched hashes"),
            "lock_missing": self.unlocked,
            **json_fields(self, "commits warnings result state"),
        }


def refuse_ledger_tree(ledger: Ledger, path: Path, flag: str = "--tree") -> None:
    """A build tree is never the ledger's directory, a directory holding it, or a directory inside
    its ``.patchset/`` (patches would rewrite the ledger, its bodies or patchset's own state)."""
    led = os.path.realpath(ledger.root)
    tree = os.path.realpath(path)
    hint = (
        "apply to a build tree (a checkout, an unpacked release, a copy of site-packages), not the ledger's directory"
    )
    if is_within(led, tree):
        how = "is" if led == tree else "contains"
        raise InputError(f"{flag} {path} {how} the ledger directory {led}: not a build tree", hint=hint)
    rel = os.path.relpath(tree, led).split(os.sep)
    if rel[0] != ".." and rel[0].lower() in STATE_DIRS:
        raise InputError(
            f"{flag} {path} is inside the ledger's state directory {os.path.join(led, rel[0])}: not a build tree",
            hint=hint,
        )


def series_items(ledger: Ledger, target: Target) -> list[SeriesItem]:
    """The active series of a target as engine items; refuses missing or altered bodies."""
    items: list[SeriesItem] = []
    missing: list[str] = []
    changed: list[str] = []
    for p in ledger.series(target.name):
        state, body = body_state(ledger, p)
        if state == BODY_MISSING:
            missing.append(p.id)
            continue
        if state == BODY_MISMATCH:
            changed.append(p.id)
            continue
        assert body is not None
        items.append(SeriesItem(p.id, body, p.strip_on(target)))
    if missing:
        raise InputError(
            f"target {target.name}: body not imported for {len(missing)} patch(es): " + ", ".join(missing),
            hint="bring the bodies in with `patchset fetch` or `patchset import`",
        )
    if changed:
        raise InputError(
            f"target {target.name}: body changed since it was locked: {', '.join(changed)}",
            hint="re-import the body (`patchset import`) so the lock records its new hash",
        )
    if not items:
        raise InputError(f"target {target.name} has no active patches")
    return items


def _series_patches(
    ledger: Ledger, target: Target, skip: set[str] | frozenset[str]
) -> Iterator[tuple[Patch, FilePatch]]:
    """Each file patch of the target's active series (less ``skip``), in order, one body read at a
    time; an unreadable body is left out (validate reports it; it changes nothing here)."""
    for p in ledger.series(target.name):
        if p.id in skip or not ledger.body_file(p).is_file():
            continue
        try:
            fps = parse_patch(ledger.body_file(p).read_bytes(), p.strip_on(target), source=p.body_path)
        except PatchFormatError:
            continue
        for fp in fps:
            yield p, fp


def _applied(p: Patch, fp: FilePatch, data: bytes | None, target: Target, digest_only: bool = False) -> FileOutcome:
    out = apply_file(data, fp, digest_only=digest_only)
    if not out.ok:
        raise InputError(
            f"{fp.path}: patch {p.id} of the {target.name} series does not apply to the base given "
            f"({out.message or 'it does not fit'})",
            hint="the series is on another base: check --base, or rebase the series first",
        )
    return out


def series_files(
    ledger: Ledger, target: Target, read: Callable[[str], bytes | None], skip: set[str] | frozenset[str] = frozenset()
) -> dict[str, bytes | None]:
    """``{path: bytes or None (deleted)}`` for every file the target's active series (less ``skip``)
    changes, applied in order onto the base ``read`` gives.

    An overlay file or a script's result becomes the last patch, so its diff is taken against the
    base with the earlier patches applied. In memory, zero fuzz; a patch that does not apply is an
    error naming it."""
    state: dict[str, bytes | None] = {}
    for p, fp in _series_patches(ledger, target, skip):
        src = fp.path
        out = _applied(p, fp, state[src] if src in state else read(src), target)
        if fp.op in ("rename", "delete"):
            state[src] = None
        state[fp.target or src] = out.new
    return state


def series_hashes(ledger: Ledger, target: Target, read: Callable[[str], bytes | None]) -> dict[str, str | None]:
    """The sha256 of each file ``series_files`` gives (None: deleted), the same checks made. A
    file's bytes are kept only while a later patch reads them; its last result is hashed as it is
    made, so memory stays at one file and one body (the series' bodies are read twice: once to
    find who reads what)."""
    last_read = {fp.path: step for step, (_, fp) in enumerate(_series_patches(ledger, target, frozenset()))}
    state: dict[str, bytes | None] = {}
    hashes: dict[str, str | None] = {}
    for step, (p, fp) in enumerate(_series_patches(ledger, target, frozenset())):
        src, dst = fp.path, fp.target or fp.path
        keep = last_read.get(dst, -1) > step  # a later patch reads the result
        out = _applied(p, fp, state[src] if src in state else read(src), target, digest_only=not keep)
        if fp.op in ("rename", "delete"):
            state[src] = hashes[src] = None
        if keep:
            state[dst] = out.new
            hashes[dst] = sha256_bytes(out.new) if out.new is not None else None
        else:
            state.pop(dst, None)  # no later patch reads it: its bytes go
            hashes[dst] = out.sha256
    return hashes

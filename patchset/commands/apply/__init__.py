"""``patchset apply``: the ledger's series onto a build tree, checked byte for byte against the lock.

Three kinds of tree: a plain directory (``--tree``, located through the target's path map), a
git checkout (``--repo``: one commit per patch with ``Patch-Id:``/``Origin:``/``Upstream-PR:``
trailers) and a release from the package index (``--from-index`` + ``--into``). The engine work
(in-memory application, crash-safe commit) is ``patchset.engine.tree``; the commands decide what to
apply, prove the result against the lock before anything is written, and record the lock.

This module is the command: the checks before anything is read (the ledger is whole, the trees
are not the ledger, ``--fuzz``, the base), the three kinds dispatched, a release fetched for
``--from-index``. A tree is ``apply_tree``, a checkout ``apply_repo``, the lock check
``apply_lock``, the series and the report ``apply_target``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchset.commands.apply.repo import apply_to_repo

# path_mapper and series_items: re-exported (``__all__``) for verify/, which imports them from here
# and is another branch's area; the rest of the code base imports them from apply_target.
from patchset.commands.apply.target import TargetReport, path_mapper, series_items
from patchset.commands.apply.tree import apply_to_tree, refuse_ledger_tree
from patchset.commands.inspection import LOCK_HINT, lock_gap
from patchset.commands.interrupted import LEDGER_EDIT, REBASE, interruptions
from patchset.errors import ApplyFailed, EnvironmentFailure, HashMismatch, InputError
from patchset.ledger import store as ledger_mod
from patchset.ledger.model import Ledger, Target
from patchset.progress import Progress


@dataclass
class TreeArg:
    """Where one target's series goes."""

    kind: str  # tree | repo | index
    path: Path
    spec: str = ""
    layout: str = ""
    branch: str = ""
    platform: str = ""  # --from-index of an installed layout: the wheel's platform ("": native)


def fetch_release_tree(
    spec: str, into: Path, layout: str, progress: Progress | None = None, platform: str | None = None
) -> Path:
    """Download (once, cached) and unpack a release for ``--from-index``: the sdist for a source
    layout, the wheel for an installed one (pure, else ``platform``'s: native by default)."""
    from patchset.upstream.archives import unpack
    from patchset.upstream.releases import download, download_wheel

    if into.exists() and (not into.is_dir() or any(into.iterdir())):
        raise InputError(
            f"--into {into} exists and is not empty",
            hint="choose a new directory; apply --tree DIR patches an existing tree",
        )
    kind = "sdist" if layout == "source" else "wheel"
    if kind == "wheel":
        archive = download_wheel(spec, platform, progress=progress)
    else:
        archive = download(spec, kind, progress=progress)
    unpack(archive, into, strip_top=(kind == "sdist"))
    return into


def apply_to_index(ledger: Ledger, target: Target, spec: str, into: Path, *, layout: str, **kw) -> TargetReport:
    import shutil

    fetch_release_tree(
        spec, into, layout, progress=kw.pop("download_progress", None), platform=kw.pop("platform", None)
    )
    try:
        rep = apply_to_tree(ledger, target, into, layout=layout, kind="index", **kw)
    except BaseException:
        shutil.rmtree(into, ignore_errors=True)
        raise
    if not rep.ok:
        shutil.rmtree(into, ignore_errors=True)
        rep.message += f"; removed {into}"
    return rep


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


def _base_warnings(target: Target, tree: Path, strict: bool) -> list[str]:
    """What the tree's version files say against the target's base (offline: the ledger's base
    only): a warning when they name another commit; with ``strict`` an InputError instead, before
    anything is read or written."""
    from patchset.commands.basedetect import DIFFERENT, INCONSISTENT, tree_base

    check = tree_base(target, tree)
    if check is None or check.verdict not in (DIFFERENT, INCONSISTENT):
        return []
    text = f"--tree {tree}: {check.message}"
    if strict:
        raise InputError(
            text + "; nothing was written (--strict-base)",
            hint=f"apply to a tree of the base, or rebase the series onto the tree's commit "
            f"(`patchset base detect --target {target.name} --tree {tree}` says which); without --strict-base "
            "this is a warning",
        )
    return [text]


def check_fuzz(fuzz: int) -> None:
    if fuzz < 0 or fuzz > 3:
        raise InputError(f"--fuzz {fuzz} is out of range", hint="use 0 (default), 1, 2 or 3")


def run(
    ledger: Ledger,
    trees: dict[str, TreeArg],
    *,
    fuzz: int = 0,
    update_lock: bool = False,
    dry_run: bool = False,
    progress: Progress | None = None,
    download_progress: Progress | None = None,
    skip_applied: bool = False,
    remove_empty: bool = False,
    durable: bool | None = None,
    strict_base: bool = False,
) -> list[TargetReport]:
    """Apply each target's series to its tree. ``strict_base``: refuse a ``--tree`` whose version
    files name another upstream commit than the target's base (else a warning in the report)."""
    check_fuzz(fuzz)
    for arg in trees.values():  # before anything is downloaded or read
        refuse_ledger_tree(ledger, arg.path, {"tree": "--tree", "repo": "--repo"}.get(arg.kind, "--into"))
    alien = ledger_mod.edit_journal(ledger.root).foreign() if ledger_mod.pending_edit(ledger.root) else None
    if alien is not None:  # a cloned ledger's own .patchset/ledger-txn: never replayed
        raise alien
    found = interruptions(ledger.root)
    rebase = next((i for i in found if i.kind == REBASE), None)
    if rebase and rebase.problem:
        raise InputError(rebase.message.split(": run")[0], hint="run `patchset rebase --continue` or `--abort` first")
    edit = next((i for i in found if i.kind == LEDGER_EDIT and i.problem), None)
    if edit:  # the ledger read may be half old, half new: nothing is checked against it
        raise EnvironmentFailure(
            edit.message.split(": run")[0] + "; nothing was written",
            hint="run `patchset recover` to finish it (or `--back` to undo it), then apply again",
        )
    gap = None if update_lock else lock_gap(ledger)
    if gap:  # an emptied lock would turn every check off: refused, not applied unchecked
        raise InputError(gap + "; nothing was written", hint=LOCK_HINT)
    reports = []
    for name, arg in trees.items():
        if name not in ledger.targets:
            raise InputError(f"unknown target {name!r}", hint=f"one of: {', '.join(ledger.targets)}")
        target = ledger.targets[name]
        layout = arg.layout or target.layout
        kw: dict[str, Any] = dict(fuzz=fuzz, update_lock=update_lock, dry_run=dry_run, progress=progress)
        if arg.kind == "tree":
            if not arg.path.is_dir():
                raise InputError(f"--tree {arg.path}: not a directory")
            warnings = _base_warnings(target, arg.path, strict_base)
            reports.append(
                apply_to_tree(
                    ledger,
                    target,
                    arg.path,
                    layout=layout,
                    skip_applied=skip_applied,
                    remove_empty=remove_empty,
                    durable=durable,
                    **kw,
                )
            )
            reports[-1].warnings += warnings
        elif arg.kind == "repo":
            reports.append(apply_to_repo(ledger, target, arg.path, layout=layout, branch=arg.branch, **kw))
        elif arg.kind == "index":
            reports.append(
                apply_to_index(
                    ledger,
                    target,
                    arg.spec,
                    arg.path,
                    layout=layout,
                    platform=arg.platform or None,
                    download_progress=download_progress,
                    remove_empty=remove_empty,
                    durable=durable,
                    **kw,
                )
            )
        else:  # pragma: no cover - the CLI only builds the three kinds
            raise EnvironmentFailure(f"unknown tree kind {arg.kind}")
        ledger = ledger_mod.load_ledger(ledger.path) if update_lock else ledger
    if rebase:  # stopped at a conflict: say which series this was
        for rep in reports:
            rep.message = f"note: {rebase.message}; " + rep.message
    return reports


__all__ = [
    "ApplyFailed",
    "HashMismatch",
    "TargetReport",
    "TreeArg",
    "parse_tree_args",
    "path_mapper",
    "run",
    "series_items",
]

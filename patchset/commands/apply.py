"""``patchset apply``: the ledger's series onto a build tree, checked byte for byte against the lock.

Three kinds of tree: a plain directory (``--tree``, located through the target's path map), a
git checkout (``--repo``: one commit per patch with ``Patch-Id:``/``Origin:``/``Upstream-PR:``
trailers) and a release from the package index (``--from-index`` + ``--into``). The engine work
(in-memory application, crash-safe commit) is ``patchset.engine.tree``; this module decides what to
apply, proves the result against the lock before anything is written, and records the lock.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from patchset import atomic, locking
from patchset.commands.inspection import BODY_MISMATCH, BODY_MISSING, LOCK_HINT, body_state, lock_gap
from patchset.commands.interrupted import APPLYING_DIR, LEDGER_EDIT, REBASE, interrupted_trees, interruptions
from patchset.confine import STATE_DIRS, confine, is_within
from patchset.engine.detect import SeriesState, detect_state
from patchset.engine.results import SeriesItem, SeriesResult
from patchset.engine.tree import apply_series, interrupted_error, pending_apply, recover
from patchset.errors import ApplyFailed, EnvironmentFailure, HashMismatch, InputError, UnsafePathError
from patchset.ledger import store as ledger_mod
from patchset.ledger.lock import sha256_bytes
from patchset.ledger.model import Ledger, Patch, Target
from patchset.progress import Progress


@dataclass
class TreeArg:
    """Where one target's series goes."""

    kind: str  # tree | repo | index
    path: Path
    spec: str = ""
    layout: str = ""
    branch: str = ""


@dataclass
class TargetReport:
    """One target's apply: the tree, the outcome and the engine's result."""

    target: str
    tree: str
    kind: str
    layout: str
    outcome: str  # applied | already | partial | failed | mismatch | dry-run
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
        return self.outcome in ("applied", "already", "dry-run")

    def to_json(self) -> dict:
        return {
            "target": self.target,
            "tree": self.tree,
            "kind": self.kind,
            "layout": self.layout,
            "outcome": self.outcome,
            "ok": self.ok,
            "message": self.message,
            "fuzz": self.fuzz,
            "mismatched": self.mismatched,
            "hashes": self.hashes,
            "lock_missing": self.unlocked,
            "commits": self.commits,
            "warnings": self.warnings,
            "result": self.result.to_json() if self.result else None,
            "state": self.state.to_json() if self.state else None,
        }


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
        items.append(SeriesItem(p.id, body, p.source.strip if p.source.strip is not None else target.strip))
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


def path_mapper(target: Target, layout: str) -> Callable[[str], str] | None:
    return target.path_map.to_installed if layout == "installed" and target.path_map.prefixes else None


def _lock_key(target: Target, layout: str, tree_path: str) -> str:
    return target.lock_key(tree_path)  # the same key space whatever the layout (and wherever it came from)


def _digest(root: Path, target: Target, layout: str, key: str) -> str | None:
    return _file_digest(root / target.tree_path(key, layout))


def _file_digest(f: Path) -> str | None:
    """sha256 of a file as the engine sees it (a symlink: of its target text, as git hashes it)."""
    if f.is_symlink():
        return sha256_bytes(os.fsencode(os.readlink(f)))
    return sha256_bytes(f.read_bytes()) if f.is_file() else None


def _failure_explained(trial: SeriesResult, state: SeriesState) -> bool:
    """Is the trial's failure explained by the tree already carrying the patch that failed?

    Only then is the tree "partly patched": a patch that merely reverse-applies somewhere else in
    the series (an idempotent change, a patch undone by a later one) says nothing about a failure.
    """
    failed = next((p for p in trial.patches if p.patch_id == trial.failed_patch), None)
    if failed is not None and failed.status == "already_applied":
        return True
    return any(p.patch_id == trial.failed_patch and p.state == "applied" for p in state.patches)


def _failed(report: TargetReport, result: SeriesResult) -> TargetReport:
    report.outcome, report.result = "failed", result
    report.message += f"patch {result.failed_patch} does not apply; nothing was written"
    return report


def _compare(expected: dict[str, str | None], got: dict[str, str | None]) -> list[str]:
    bad = [p for p, d in got.items() if p in expected and expected[p] != d]
    bad += [p for p in expected if p not in got]
    return sorted(bad)


def refuse_ledger_tree(ledger: Ledger, path: Path, flag: str = "--tree") -> None:
    """A build tree is never the ledger's directory, a directory holding it, or a directory inside
    its ``.patchset/`` (patches would rewrite the ledger, its bodies or patchset's own state)."""
    led, tree = os.path.realpath(ledger.root), os.path.realpath(path)
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


def apply_to_tree(
    ledger: Ledger,
    target: Target,
    root: Path,
    *,
    layout: str,
    fuzz: int = 0,
    update_lock: bool = False,
    dry_run: bool = False,
    kind: str = "tree",
    progress: Progress | None = None,
    skip_applied: bool = False,
    remove_empty: bool = False,
    durable: bool | None = None,
) -> TargetReport:
    """Apply one target's series to a directory in one pass: in memory, checked against the lock,
    then committed (``durable``: fsynced against power loss too; see ``engine.txn``).

    A tree that carries part of the series is refused (named precisely) unless ``skip_applied``:
    then only the patches it lacks are applied, and the whole result is still checked.

    The tree lock is held from the first read to the last write (a second apply waits, then
    sees this one's result). A dry run writes nothing, not even to finish an interrupted apply.
    """
    refuse_ledger_tree(ledger, root, "--tree" if kind == "tree" else "--repo" if kind == "repo" else "--into")
    with locking.tree_lock(root):
        return _apply_to_tree(
            ledger,
            target,
            root,
            layout,
            fuzz,
            update_lock,
            dry_run,
            kind,
            progress,
            skip_applied,
            remove_empty,
            durable,
        )


def _apply_to_tree(
    ledger: Ledger,
    target: Target,
    root: Path,
    layout: str,
    fuzz: int,
    update_lock: bool,
    dry_run: bool,
    kind: str,
    progress: Progress | None,
    skip_applied: bool,
    remove_empty: bool = False,
    durable: bool | None = None,
) -> TargetReport:
    items = series_items(ledger, target)
    mapper = path_mapper(target, layout)
    report = TargetReport(target.name, str(root), kind, layout, "failed", "", fuzz=fuzz)
    if pending_apply(root):
        if dry_run:
            raise interrupted_error(root)
        report.message = f"finished an interrupted earlier apply ({recover(root)}); "
    locked = ledger.lock.targets.get(target.name)
    expected: dict[str, str | None] | None = dict(locked.files) if locked and locked.files else None
    one = _OnePass(ledger, target, root, layout, report, expected, update_lock, dry_run)
    with one.stack:
        trial = one.run(items, fuzz, mapper, progress, remove_empty, durable)
        if not trial.ok:
            state = detect_state(root, items, expected, path_for=mapper)
            report.state, report.result = state, trial
            if state.matches_expected or (state.all_applied and expected is None):
                report.result = None
                report.outcome = "already"
                report.message += state.summary() + "; nothing changed"
                return report
            if state.all_applied:
                assert expected is not None  # the series is applied and no lock: returned above
                report.result = None
                report.outcome = "mismatch"
                on_disk = {p: _digest(root, target, layout, p) for p in expected}
                report.mismatched = [p for p, d in expected.items() if on_disk[p] != d]
                report.hashes = {p: {"expected": expected[p], "actual": on_disk[p]} for p in report.mismatched}
                report.message += state.summary() + ", but its files do not match the lock; nothing changed"
                return report
            carried = [p.state == "applied" for p in state.patches]
            if not _failure_explained(trial, state):
                # the failing patch is not on the tree: a real failure, whatever else merely reverse-applies
                return _failed(report, trial)
            if any(carried) and skip_applied and all(p.state != "unknown" for p in state.patches):
                items = [i for i, c in zip(items, carried, strict=True) if not c]
                report.message += state.summary() + f"; applying only the {len(items)} missing patch(es); "
                trial = one.run(items, fuzz, mapper, progress, remove_empty, durable)
            elif any(carried):
                report.outcome = "partial"
                report.message += state.summary() + "; the tree was left as it is (--skip-applied applies the rest)"
                return report
            if not trial.ok:
                return _failed(report, trial)
    report.result = trial
    if one.refused:
        return report
    report.unlocked = expected is None
    if dry_run:
        report.outcome = "dry-run"
        report.message += f"{len(items)} patches apply; nothing was written"
        return report
    report.outcome = "applied"
    if update_lock:
        tail = ", lock updated"
    elif report.unlocked:
        tail = " (no lock to check against yet: run with --update-lock to record one)"
    else:
        tail = ", every patched file matches the lock"
    report.message += f"{len(items)} patches applied{tail}"
    return report


class _OnePass:
    """One engine pass that applies in memory, proves the result against the lock and only then
    commits (``apply_series``'s ``before_commit``): the series is read and applied once.

    ``stack`` holds what a commit needs open (the applying note, with ``--update-lock`` the
    ledger edit staged before the tree is touched and published while the tree's old files are
    still kept: a full or read-only ledger directory fails before the tree changes, a failure
    while publishing rolls the tree back, so the tree and the lock never disagree)."""

    def __init__(
        self,
        ledger: Ledger,
        target: Target,
        root: Path,
        layout: str,
        report: TargetReport,
        expected: dict[str, str | None] | None,
        update_lock: bool,
        dry_run: bool,
    ) -> None:
        from contextlib import ExitStack

        self.ledger, self.target, self.root, self.layout = ledger, target, root, layout
        self.report, self.expected, self.update_lock, self.dry_run = report, expected, update_lock, dry_run
        self.stack = ExitStack()
        self.edit: ledger_mod.Edit | None = None
        self.refused = False  # the result did not match the lock: nothing written

    def run(
        self,
        items: list[SeriesItem],
        fuzz: int,
        mapper: Callable[[str], str] | None,
        progress: Progress | None,
        remove_empty: bool,
        durable: bool | None,
    ) -> SeriesResult:
        result = apply_series(
            self.root,
            items,
            fuzz=fuzz,
            path_for=mapper,
            dry_run=self.dry_run,
            progress=progress,
            before_commit=self.check,
            before_finish=self.finish,
            remove_empty=remove_empty,
            durable=durable,
        )
        if self.edit is not None:
            self.edit.cancelled = True  # committed inside the tree's transaction, or not at all
        if self.dry_run and result.ok:
            self.check(result)  # the engine commits nothing in a dry run; the lock is still checked
        return result

    def check(self, result: SeriesResult) -> bool:
        """The whole result, in memory: commit it only if it is what the lock says."""
        target, layout, root, expected, report = self.target, self.layout, self.root, self.expected, self.report
        got = {_lock_key(target, layout, k): v for k, v in result.files.items()}
        if expected:  # files only the already-carried patches touch: as they are on disk
            got.update({k: _digest(root, target, layout, k) for k in expected if k not in got})
        if expected and not self.update_lock:
            bad = _compare(expected, got)
            unlisted = sorted(k for k, v in got.items() if k not in expected and v is not None)
            if bad or unlisted:
                self.refused = True
                report.outcome, report.mismatched = "mismatch", sorted(bad + unlisted)
                report.hashes = {p: {"expected": expected.get(p), "actual": got.get(p)} for p in report.mismatched}
                what = []
                if bad:
                    what.append(f"{len(bad)} patched file(s) would not match the lock")
                if unlisted:
                    what.append(f"{len(unlisted)} patched file(s) are not in the lock: {', '.join(unlisted)}")
                report.message += (
                    "; ".join(what) + "; nothing was written (re-run with --update-lock if the new result is intended)"
                )
                return False
        if self.dry_run:
            return False
        self.stack.enter_context(applying_marker(self.ledger, root))
        if self.update_lock:
            before = {k: _file_digest(root / k) for k in result.files}
            e = self.stack.enter_context(ledger_mod.edit(self.ledger.path))
            fill_lock(
                e,
                self.ledger,
                target,
                {k: v for k, v in got.items() if v is not None},
                {_lock_key(target, layout, k): v for k, v in before.items() if v is not None},
            )
            e.stage()
            self.edit = e
        return True

    def finish(self) -> None:
        """Every file in place: the ledger and lock land, or the tree rolls back."""
        if self.edit is not None:
            self.edit.commit()


@contextmanager
def applying_marker(ledger: Ledger, root: Path) -> Iterator[None]:
    """A note beside the ledger naming the tree while an apply commits to it, so that ``validate``
    can point at a tree an apply was killed in (``commands.interrupted``). Best effort: a
    read-only ledger directory only loses the note, and it is not fsynced (the tree's own
    transaction directory is what recovery reads). A ``.patchset`` that links out of the ledger
    directory (a cloned ledger may carry one) gets no note: nothing is written through it."""
    name = f"{APPLYING_DIR}/{sha256_bytes(str(root).encode())[:16]}.json"
    mark: Path | None = None
    try:
        mark = confine(ledger.root, name, what="the apply note", allow_state=True)
        atomic.write_bytes(mark, json.dumps({"tree": str(root)}).encode(), durable=False)
    except UnsafePathError:
        mark = None
    except OSError:
        assert mark is not None
        for empty in (mark.parent, mark.parent.parent):  # leave no empty directories behind
            try:
                empty.rmdir()
            except OSError:
                break
        mark = None
    try:
        yield
    finally:
        if mark is not None:
            mark.unlink(missing_ok=True)


def fill_lock(
    e: ledger_mod.Edit, ledger: Ledger, target: Target, files: dict[str, str], base_files: dict[str, str]
) -> None:
    tl = e.lock.target(target.name)
    tl.base = target.base
    tl.files = dict(files)
    tl.base_files = dict(base_files)
    for p in ledger.series(target.name):
        data = ledger.body_file(p).read_bytes()
        e.lock.bodies[p.id] = sha256_bytes(data)


def record_lock(ledger: Ledger, target: Target, files: dict[str, str], base_files: dict[str, str]) -> None:
    with ledger_mod.edit(ledger.path) as e:
        fill_lock(e, ledger, target, files, base_files)


def fetch_release_tree(spec: str, into: Path, layout: str, progress: Progress | None = None) -> Path:
    """Download (once, cached) and unpack a release for ``--from-index``."""
    from patchset.upstream.archives import unpack
    from patchset.upstream.releases import download

    if into.exists() and (not into.is_dir() or any(into.iterdir())):
        raise InputError(
            f"--into {into} exists and is not empty",
            hint="choose a new directory; apply --tree DIR patches an existing tree",
        )
    kind = "sdist" if layout == "source" else "wheel"
    archive = download(spec, kind, progress=progress)
    unpack(archive, into, strip_top=(kind == "sdist"))
    return into


def apply_to_index(ledger: Ledger, target: Target, spec: str, into: Path, *, layout: str, **kw) -> TargetReport:
    import shutil

    fetch_release_tree(spec, into, layout, progress=kw.pop("download_progress", None))
    try:
        rep = apply_to_tree(ledger, target, into, layout=layout, kind="index", **kw)
    except BaseException:
        shutil.rmtree(into, ignore_errors=True)
        raise
    if not rep.ok:
        shutil.rmtree(into, ignore_errors=True)
        rep.message += f"; removed {into}"
    return rep


def _commit_message(p: Patch) -> str:
    lines = [p.title, ""]
    if p.description:
        lines += [p.description, ""]
    lines.append(f"Patch-Id: {p.id}")
    lines.append(f"Origin: {p.origin}")
    lines += [f"Upstream-PR: {r}" for r in p.upstream.prs]
    lines += [f"Ports: {r}" for r in p.upstream.ports]
    return "\n".join(lines) + "\n"


def apply_to_repo(
    ledger: Ledger,
    target: Target,
    repo_dir: Path,
    *,
    layout: str,
    branch: str = "",
    fuzz: int = 0,
    update_lock: bool = False,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> TargetReport:
    """One commit per patch on a new branch of a git checkout; nothing changes unless all apply."""
    import git  # GitPython

    try:
        repo = git.Repo(repo_dir)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise InputError(f"{repo_dir} is not a git checkout", hint="use --tree for a plain directory") from None
    branch = branch or f"patchset/{target.name}"
    if branch in [h.name for h in repo.heads]:  # run again: nothing to write, or refused
        return _existing_branch(ledger, target, repo, repo_dir, branch, layout=layout, fuzz=fuzz)
    if repo.is_dirty(untracked_files=False):
        raise InputError(
            f"{repo_dir} has uncommitted changes",
            hint="commit or stash them first: apply --repo starts from a clean HEAD",
        )
    trial = apply_to_tree(
        ledger, target, repo_dir, layout=layout, fuzz=fuzz, dry_run=True, update_lock=update_lock, kind="repo"
    )
    if trial.outcome != "dry-run" or dry_run:
        return trial
    items = series_items(ledger, target)
    mapper = path_mapper(target, layout)
    patches = {p.id: p for p in ledger.series(target.name)}
    start = repo.head.commit
    start_ref = repo.active_branch.name if not repo.head.is_detached else start.hexsha
    repo.git.checkout("-q", "-b", branch)
    report = TargetReport(target.name, str(repo_dir), "repo", layout, "failed", "", fuzz=fuzz)
    got: dict[str, str] = {}
    try:
        for i, item in enumerate(items, 1):
            if progress:
                progress(item.patch_id, i, len(items))
            res = apply_series(repo_dir, [item], fuzz=fuzz, path_for=mapper)
            res.raise_for_failure()
            changed = list(res.files)
            repo.git.add("-A", "--", *changed)
            repo.git.commit("-q", "--no-verify", "-m", _commit_message(patches[item.patch_id]))
            report.commits.append(repo.head.commit.hexsha)
            got.update({_lock_key(target, layout, k): v for k, v in res.files.items() if v is not None})
    except BaseException:
        repo.git.checkout("-q", "-f", start_ref)
        repo.git.branch("-D", branch)
        raise
    report.outcome = "applied"
    report.result = trial.result
    report.message = f"{len(items)} commits on branch {branch}"
    if update_lock:
        base = {}
        for k in got:
            try:
                base[k] = sha256_bytes(start.tree[k].data_stream.read())
            except KeyError:
                pass
        record_lock(ledger, target, got, base)
    return report


_PATCH_ID = re.compile(r"^Patch-Id: (\S+)[ \t]*$", re.MULTILINE)


def _existing_branch(
    ledger: Ledger, target: Target, repo: Any, repo_dir: Path, branch: str, *, layout: str, fuzz: int
) -> TargetReport:
    """``apply --repo`` when the branch exists already (the command run again).

    The branch carries the series when its newest commits are one per patch, in series order
    (their ``Patch-Id:`` trailers), and its files are what the series makes: the tip's version of
    every file those commits change, checked like a ``--tree`` that already carries the series.
    Then the report is that tree's ("already carries the series"; nothing changes, exit 0). Any
    other branch of that name is refused (exit 2) with what to do. Neither the checkout nor its
    refs are touched either way."""
    import tempfile

    want = [item.patch_id for item in series_items(ledger, target)]
    tip = repo.heads[branch].commit
    carried: list[str] = []
    base = tip
    while base is not None and len(carried) <= len(want):
        found = _PATCH_ID.findall(base.message)
        if not found:
            break
        carried.append(found[-1])
        base = base.parents[0] if base.parents else None
    carried.reverse()
    if carried != want:
        why = f"its commits carry {', '.join(carried) or 'no patch'}; the series is {', '.join(want)}"
    else:
        with tempfile.TemporaryDirectory(prefix="patchset-branch-") as tmp:
            _export_changed(repo, base, tip, Path(tmp))
            rep = apply_to_tree(ledger, target, Path(tmp), layout=layout, fuzz=fuzz, dry_run=True, kind="repo")
        if rep.outcome == "already":
            rep.tree, rep.state = str(repo_dir), None
            rep.message = f"branch {branch}: {rep.message}"
            return rep
        why = "its files are not what the series makes (a body or the lock changed since it was made)"
    raise InputError(
        f"branch {branch!r} already exists in {repo_dir} and does not carry exactly this series: {why}",
        hint=f"pass --branch NAME for a new one, or delete the old one (git -C {repo_dir} branch -D {branch})",
    )


def _export_changed(repo: Any, base: Any, tip: Any, dest: Path) -> None:
    """The tip's version of each regular file changed between ``base`` (None: the root) and
    ``tip``, written under ``dest``. Symlinks and submodules are left out (a tree check then finds
    them missing: refused, never followed)."""
    from patchset.confine import confine

    if base is not None:
        names = repo.git.diff("--name-only", "-z", "--no-renames", base.hexsha, tip.hexsha).split("\0")
    else:
        names = repo.git.ls_tree("-r", "-z", "--name-only", tip.hexsha).split("\0")
    for name in filter(None, names):
        try:
            blob = tip.tree / name
        except KeyError:  # deleted on the branch
            continue
        if blob.type != "blob" or blob.mode & 0o170000 != 0o100000:
            continue
        out = confine(dest, name, what=f"file {name!r} of branch commit {tip.hexsha[:12]}")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(blob.data_stream.read())


def recover_trees(trees: list[Path], ledger_path: Path | None, back: bool = False) -> list[dict[str, str]]:
    """``patchset recover``: finish (or ``back``: undo) an interrupted ledger edit and the
    interrupted apply of each tree.

    The ledger edit first (when one is pending beside ``ledger_path``: ``{"ledger", "done"}``).
    Without trees: the trees the ledger's notes name (``commands.interrupted``), else (nothing else
    to do) the current directory. Returns one ``{"tree", "done"}`` per tree, ``done`` being
    ``rolled forward``, ``rolled back``, ``discarded`` (killed while staging: the files were never
    touched) or ``nothing to recover``.
    """
    out = []
    if ledger_path is not None and ledger_mod.pending_edit(ledger_path.parent):
        done = ledger_mod.recover_edit(ledger_path.parent, "back" if back else "auto")
        out.append({"ledger": str(ledger_path), "done": done or "nothing to recover"})
    if not trees:
        found = interrupted_trees(ledger_path.parent) if ledger_path is not None and ledger_path.is_file() else []
        trees = found or ([] if out else [Path.cwd()])
    for tree in trees:
        if not tree.is_dir():
            raise InputError(f"--tree {tree}: not a directory")
        done = recover(tree, "back" if back else "auto")
        out.append({"tree": str(tree), "done": done or "nothing to recover"})
    return out


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


__all__ = ["ApplyFailed", "HashMismatch", "TargetReport", "TreeArg", "parse_tree_args", "run"]

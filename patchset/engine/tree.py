"""Apply a patch series to a directory tree: all patches or none, crash-safe, with hashes.

``apply_series`` parses every patch, checks every path is safe, reads only the touched files,
applies the series in memory with the engine (a file touched by several patches sees them in
order) and, only if every hunk of every patch applied, commits all resulting files at once
through ``patchset.engine.txn`` (journal + staged files + renames; ``recover`` finishes or undoes an
interrupted commit). ``detect_state`` tells which patches of a series a tree already carries.
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from patchset import locking
from patchset.confine import STATE_DIRS, resolve_links
from patchset.engine import txn
from patchset.engine.hunks import FileOutcome, HunkResult, apply_file, reverse_file_patch
from patchset.errors import ApplyFailed, EnvironmentFailure, PatchsetError, UnsafePathError
from patchset.ledger.lock import sha256_bytes
from patchset.patchfmt.diffs import FilePatch, parse_patch
from patchset.progress import Progress

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
        return {
            "path": self.path,
            "patch_path": self.patch_path,
            "op": self.op,
            "old_path": self.old_path,
            "status": self.status,
            "message": self.message,
            "sha256": self.sha256,
            "hunks": [h.to_json() for h in self.hunks],
        }


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
        return {"patch_id": self.patch_id, "status": self.status, "files": [f.to_json() for f in self.files]}

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
        return {
            "root": self.root,
            "ok": self.ok,
            "dry_run": self.dry_run,
            "committed": self.committed,
            "recovered": self.recovered,
            "failed_patch": self.failed_patch,
            "patches": [p.to_json() for p in self.patches],
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


# --------------------------------------------------------------------------- paths


def _metadata(parts: list[str]) -> str | None:
    """The metadata directory a path goes into (``.git`` anywhere, patchset's own state
    directories ``.patchset-txn`` and ``.patchset`` at the top), compared case-insensitively: on
    macOS or Windows ``.GIT`` *is* ``.git``."""
    if parts and parts[0].lower() in STATE_DIRS:
        return parts[0]
    return next((p for p in parts if p.lower() == ".git"), None)


class _Paths:
    """Maps patch paths to safe tree paths: relative, no ``..``, no symlink leaving the tree.

    Links are resolved through the series' in-memory state (:meth:`_State.link_at`): a link an
    earlier hunk or patch made counts exactly as one on disk, so the dry run sees the tree the
    commit would write (``patchset.confine.resolve_links`` does the resolving).
    """

    def __init__(self, root: Path, path_for: Callable[[str], str] | None) -> None:
        self.root = Path(os.path.realpath(root))
        self.path_for = path_for or (lambda p: p)
        self.checked: dict[str, tuple[str, str]] = {}  # patch path -> (normalised mapped path, where)

    def _check(self, patch_path: str, patch_id: str) -> tuple[str, str]:
        """The textual checks (no state needed): the mapped path, normalised, and how to name it."""
        if patch_path in self.checked:
            return self.checked[patch_path]
        mapped = self.path_for(patch_path)
        where = f"patch {patch_id}: path {patch_path!r}"
        if mapped != patch_path:
            where += f" (mapped to {mapped!r})"
        if not mapped or "\0" in mapped:
            raise UnsafePathError(f"{where} is empty or contains NUL")
        if mapped.startswith("/") or os.path.isabs(mapped):
            raise UnsafePathError(f"{where} is absolute", hint="patch paths must be relative")
        parts = [p for p in mapped.split("/") if p not in ("", ".")]
        if not parts or any(p == ".." for p in parts):
            raise UnsafePathError(f"{where} escapes the tree with '..'")
        bad = _metadata(parts)
        if bad:
            raise UnsafePathError(
                f"{where} points into {bad}",
                hint="patches may not touch repository or patchset metadata (in any letter case: "
                "case-insensitive file systems treat .GIT as .git)",
            )
        self.checked[patch_path] = ("/".join(parts), where)
        return self.checked[patch_path]

    def resolve(self, patch_path: str, patch_id: str, state: _State, own_link: bool = False) -> str:
        """The real tree path for ``patch_path`` in the tree as ``state`` has it (links on disk and
        links the series made expanded); ``own_link``: the path of a git symlink itself (its
        directory is resolved, the link is not followed)."""
        if own_link:
            head, _, name = patch_path.rpartition("/")
            parent = self.resolve(head, patch_id, state) if head else ""
            if name in ("", ".", "..") or _metadata([name]):
                raise UnsafePathError(f"patch {patch_id}: path {patch_path!r} is not a valid link name")
            return f"{parent}/{name}" if parent else name
        rel, where = self._check(patch_path, patch_id)
        real = resolve_links(rel, state.link_at, what=where, root=str(self.root))
        if not real or _metadata(real.split("/")):
            raise UnsafePathError(f"{where} resolves to {real or '.'!r}, which patches may not touch")
        return real


# --------------------------------------------------------------------------- state


class _State:
    """The tree as the series sees it in memory: lazily read files, overlaid changes.

    It also knows which paths are directories, so a series that makes ``d`` a file and then
    writes ``d/x`` fails in the dry run exactly as in the real run, and a file may replace a
    directory only once every file in it is deleted (the commit removes the emptied directory).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.disk: dict[str, tuple[bytes | None, int | None]] = {}
        self.now: dict[str, tuple[bytes | None, int | None]] = {}
        self.live: Counter[str] = Counter()  # directory -> present files under it in ``now``
        self.kinds: dict[str, str | None] = {}  # paths probed for file/dir clashes (not read)
        self.links: dict[str, str | None] = {}  # paths probed for links on disk (not read)

    def _load(self, rel: str) -> tuple[bytes | None, int | None]:
        if rel not in self.disk:
            path = self.root / rel
            try:
                st = path.lstat()  # a resolved path has no link in it, unless it is a git symlink's own path
            except (FileNotFoundError, NotADirectoryError):
                self.disk[rel] = (None, None)
            except OSError as exc:
                raise EnvironmentFailure(f"{path}: cannot read: {exc.strerror}") from None
            else:
                if stat.S_ISDIR(st.st_mode):
                    self.disk[rel] = (None, None)
                    return self.disk[rel]
                if stat.S_ISLNK(st.st_mode):
                    self.disk[rel] = (os.fsencode(os.readlink(path)), SYMLINK)
                    return self.disk[rel]
                if not stat.S_ISREG(st.st_mode):
                    raise EnvironmentFailure(
                        f"{path}: not a regular file", hint="patches can only change regular files"
                    )
                try:
                    self.disk[rel] = (path.read_bytes(), st.st_mode & 0o7777)
                except OSError as exc:
                    raise EnvironmentFailure(f"{path}: cannot read: {exc.strerror}") from None
        return self.disk[rel]

    def link_at(self, rel: str) -> str | None:
        """The target of the symlink at ``rel`` as the series has the tree now, or None.

        ``rel`` has no link in its prefixes (callers expand them first). A path under one the
        series changed is not looked up on disk: what is there now will not be after the commit.
        """
        if rel in self.now or rel in self.disk:
            data, mode = self.get(rel)
            return os.fsdecode(data) if mode == SYMLINK and data is not None else None
        if any(parent in self.now for parent in _parents(rel)):
            return None
        if rel not in self.links:
            path = self.root / rel
            try:
                st = path.lstat()
                self.links[rel] = os.readlink(path) if stat.S_ISLNK(st.st_mode) else None
            except (FileNotFoundError, NotADirectoryError):
                self.links[rel] = None
            except OSError as exc:
                raise EnvironmentFailure(f"{path}: cannot read: {exc.strerror}") from None
        return self.links[rel]

    def get(self, rel: str) -> tuple[bytes | None, int | None]:
        if rel in self.now:
            return self.now[rel]
        return self._load(rel)

    def set(self, rel: str, data: bytes | None, mode: int | None) -> None:
        self._load(rel)
        was = self.get(rel)[0] is not None
        self.now[rel] = (data, mode if data is not None else None)
        step = (data is not None) - was
        if step:
            for parent in _parents(rel):
                self.live[parent] += step

    def _disk_kind(self, rel: str) -> str | None:
        """``file``, ``dir`` or ``None`` on disk, without reading (the result is not a touched file)."""
        if rel not in self.kinds:
            try:
                mode = (self.root / rel).lstat().st_mode
            except (FileNotFoundError, NotADirectoryError):
                self.kinds[rel] = None
            except OSError as exc:
                raise EnvironmentFailure(f"{self.root / rel}: cannot read: {exc.strerror}") from None
            else:
                self.kinds[rel] = "dir" if stat.S_ISDIR(mode) else "file"
        return self.kinds[rel]

    def is_file(self, rel: str) -> bool:
        if rel in self.now or rel in self.disk:
            return self.get(rel)[0] is not None
        return self._disk_kind(rel) == "file"

    def is_dir(self, rel: str) -> bool:
        """A directory now: a present file under it, or a directory on disk not emptied by the series."""
        if self.live[rel] > 0:
            return True
        if self._disk_kind(rel) != "dir":
            return False
        for dirpath, subdirs, names in os.walk(self.root / rel):
            if any(os.path.islink(os.path.join(dirpath, d)) for d in subdirs):
                return True  # a link to a directory: not a file the series can delete
            for name in names:
                sub = os.path.relpath(os.path.join(dirpath, name), self.root)
                if self.get(sub)[0] is not None or sub not in self.now:
                    return True  # a file the series keeps (or never touched)
        return False

    def blocker(self, rel: str) -> str | None:
        """Why a file cannot be written at ``rel`` now (a parent is a file, ``rel`` is a directory)."""
        for parent in _parents(rel):
            if self.is_file(parent):
                return f"{parent} is a file, so {rel} cannot be created under it"
        if self.is_dir(rel):
            return f"{rel} is a directory that still holds files, so it cannot become a file"
        return None

    def fork(self) -> _State:
        other = _State(self.root)
        other.disk = self.disk  # shared read cache
        other.kinds = self.kinds
        other.links = self.links
        other.now = dict(self.now)
        other.live = Counter(self.live)
        return other

    def changes(self, digests: dict[str, str | None] | None = None) -> list[txn.Change]:
        """What differs from the disk; ``digests`` (path -> sha256 of the new content, as the
        result already holds them) spare the journal hashing every file again."""
        out = []
        for rel, (data, mode) in self.now.items():
            if (data, mode) != self.disk[rel]:
                out.append(txn.Change(rel, data, mode, (digests or {}).get(rel)))
        return out


def _parents(rel: str) -> list[str]:
    """``a/b/c`` -> ``["a", "a/b"]``."""
    parts = rel.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


SYMLINK = stat.S_IFLNK  # the "mode" of a symbolic link in memory and in txn.Change: data is its target
GIT_SYMLINK, GIT_SUBMODULE = "120000", "160000"


def _git_mode(mode: str | None) -> int | None:
    if not mode:
        return None
    if mode == GIT_SYMLINK:
        return SYMLINK
    bits = int(mode, 8) & 0o7777
    return 0o755 if bits & 0o100 else 0o644


def _check_link(state: _State, rel: str, target: bytes, patch_id: str, root: str) -> None:
    """A git symlink is written as a symlink, but only one that stays inside the tree as the series
    has it now (links made by earlier hunks and patches followed, like links on disk)."""
    text = os.fsdecode(target)
    what = f"patch {patch_id}: symlink {rel} -> {text!r}"
    hint = "patchset writes only relative links that resolve inside the tree"
    if not text or "\0" in text or text.startswith("/"):
        raise UnsafePathError(f"{what} is empty or absolute: refused (outside the tree)", hint=hint)
    head = posixpath.dirname(rel)
    resolve_links(f"{head}/{text}" if head else text, state.link_at, what=what, root=root)


def _check_links(state: _State, root: str) -> None:
    """The tree as the whole series leaves it: every link the series made or changed, and every
    link already on disk that was inside before, must resolve inside it (a later patch can make an
    earlier, harmless link point out: ``x -> sub/l/..`` and then ``sub/l -> ..``; removing a link
    can too: ``x -> sub/l/../../..`` with ``sub/l -> a/b``)."""
    made = sorted(rel for rel, (data, mode) in state.now.items() if mode == SYMLINK and data is not None)
    if not made and not any(state.disk[rel][1] == SYMLINK for rel in state.now):
        return  # no link made, changed or removed: every link resolves as before
    for rel in made:
        resolve_links(rel, state.link_at, what=f"symlink {rel} (as the series leaves the tree)", root=root)
    before = _State(state.root)
    for rel in _disk_links(state.root):
        if rel in state.now or any(parent in state.now for parent in _parents(rel)):
            continue
        try:
            resolve_links(rel, before.link_at, what="", root=root)
        except UnsafePathError:
            continue  # already out before the series: not the series' doing, and not written to
        resolve_links(rel, state.link_at, what=f"symlink {rel} in the tree (after the series)", root=root)


def _disk_links(root: Path) -> list[str]:
    """Every symlink in the tree on disk (not followed; metadata directories skipped)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for d in list(dirnames):
            full = os.path.join(dirpath, d)
            if os.path.islink(full):
                out.append(os.path.relpath(full, root))
                dirnames.remove(d)
            elif _metadata([d]) and (dirpath == str(root) or d.lower() == ".git"):
                dirnames.remove(d)
        out += [
            os.path.relpath(os.path.join(dirpath, f), root)
            for f in filenames
            if os.path.islink(os.path.join(dirpath, f))
        ]
    return sorted(out)


def _apply_one(
    state: _State, fp: FilePatch, paths: _Paths, patch_id: str, fuzz: int, remove_empty: bool = False
) -> FileResult:
    """Apply one file patch to ``state`` (changes it only when the file patch applies)."""
    if GIT_SUBMODULE in (fp.old_mode, fp.new_mode):
        return FileResult(
            path=fp.target or fp.path,
            patch_path=fp.target or fp.path,
            op=fp.op,
            status="failed",
            message=(
                f"{fp.target or fp.path} is a git submodule (mode 160000): a diff records only its commit, "
                "not its files, so it cannot be applied to a directory tree (update the submodule with git)"
            ),
        )
    link = GIT_SYMLINK in (fp.old_mode, fp.new_mode)
    src = paths.resolve(fp.path, patch_id, state, own_link=link)
    dst = paths.resolve(fp.target, patch_id, state, own_link=link) if fp.target is not None else None
    if fp.op == "modify" and not fp.git and fp.new_path and fp.new_path != fp.old_path:
        # plain diff naming two files ("--- x.c.orig" / "+++ x.c"): like GNU patch, patch the
        # one that exists; if both do, the one with fewest components, then shortest name
        names = [n for n in (fp.old_path, fp.new_path) if n is not None]
        existing = [n for n in names if state.get(paths.resolve(n, patch_id, state))[0] is not None]
        if existing:
            best = min(existing, key=lambda n: (n.count("/"), len(n.rsplit("/", 1)[-1]), len(n)))
            src = dst = paths.resolve(best, patch_id, state)
    old, old_mode = state.get(src)
    if fp.op == "create":
        old_mode = None
    res = FileResult(
        path=dst or src,
        patch_path=fp.target or fp.path,
        op=fp.op,
        status="failed",
        old_path=src if fp.op in ("rename", "copy") else None,
    )
    if fp.op in ("rename", "copy") and dst is not None and dst != src:
        if old is None:
            there, _ = state.get(dst)
            if there is not None:
                # the source is gone and the target exists: looks like a done rename
                probe = apply_file(there, _as_modify(fp), fuzz)
                if probe.status == "already_applied" or not fp.hunks:
                    res.status, res.message = (
                        "already_applied",
                        (f"{fp.op} {fp.old_path} -> {fp.new_path}: source missing, target present"),
                    )
                    return res
            res.message = f"{fp.op} source {fp.old_path} does not exist"
            return res
        there = state.get(dst)[0]
        if there is not None:
            probe = apply_file(old, fp, fuzz)
            if fp.op == "copy" and probe.ok and probe.new == there:
                res.status, res.message = (
                    "already_applied",
                    (f"copy {fp.old_path} -> {fp.new_path}: target already has the copied content"),
                )
            else:
                res.message = f"{fp.op} target {fp.new_path} already exists"
            return res
    outcome: FileOutcome = apply_file(old, fp, fuzz)
    res.status, res.hunks, res.message = outcome.status, outcome.hunks, outcome.message
    if not outcome.ok:
        return res
    if fp.op == "delete":
        state.set(src, None, None)
        return res
    assert dst is not None and outcome.new is not None
    mode = _git_mode(fp.new_mode) if fp.new_mode and fp.new_mode != fp.old_mode else None
    if mode is None:
        mode = old_mode if old_mode is not None else (_git_mode(fp.new_mode) or 0o644)
    if fp.op == "rename" and dst != src:
        state.set(src, None, None)
    if mode == SYMLINK:
        _check_link(state, dst, outcome.new, patch_id, str(paths.root))
    why = state.blocker(dst)
    if why:
        res.status, res.hunks, res.message = "failed", [], why
        return res
    if remove_empty and not outcome.new:  # GNU patch -E (dpkg-source applies with it)
        state.set(dst, None, None)
        res.message = "empty after patching: removed (--remove-empty)"
        return res
    state.set(dst, outcome.new, mode)
    res.sha256 = sha256_bytes(outcome.new)
    return res


def _as_modify(fp: FilePatch) -> FilePatch:
    return FilePatch(
        fp.new_path,
        fp.new_path,
        "modify",
        fp.old_mode,
        fp.new_mode,
        fp.hunks,
        fp.binary,
        fp.similarity,
        True,
        fp.line_no,
    )


def _parse_all(items: list[SeriesItem], paths: _Paths, state: _State) -> list[list[FilePatch]]:
    """Every patch parsed and every path checked (against the tree on disk: ``state`` is fresh)
    before anything is read or written; each is resolved again at its turn, through the state."""
    parsed = []
    for item in items:
        fps = parse_patch(item.body, item.strip, source=item.patch_id)
        for fp in fps:
            for p in fp.paths():
                paths.resolve(p, item.patch_id, state)
        parsed.append(fps)
    return parsed


def _apply_patch(
    state: _State, fps: list[FilePatch], item: SeriesItem, paths: _Paths, fuzz: int, remove_empty: bool = False
) -> PatchResult:
    """All file patches of one patch, or none (on failure ``state`` is left unchanged)."""
    trial = state.fork()
    result = PatchResult(item.patch_id, "applied")
    for fp in fps:
        fr = _apply_one(trial, fp, paths, item.patch_id, fuzz, remove_empty)
        result.files.append(fr)
    statuses = {f.status for f in result.files}
    if "failed" in statuses:
        result.status = "failed"
    elif "already_applied" in statuses:
        result.status = "already_applied"
    else:
        state.now = trial.now
    return result


# --------------------------------------------------------------------------- public API


def apply_series(
    root: Path,
    items: list[SeriesItem],
    *,
    fuzz: int = 0,
    path_for: Callable[[str], str] | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
    before_commit: Callable[[SeriesResult], bool] | None = None,
    before_finish: Callable[[], None] | None = None,
    remove_empty: bool = False,
    durable: bool | None = None,
) -> SeriesResult:
    """Apply ``items`` in order to the tree at ``root``, all or nothing.

    ``remove_empty``: like GNU ``patch -E``, a file left empty by a patch is removed.
    ``before_commit`` sees the whole result (applied in memory, nothing written yet) and may veto
    the commit by returning False: one pass checks a result and writes it (apply's lock check).

    Raises ``PatchFormatError`` (a malformed patch), ``UnsafePathError`` (a path escaping the
    tree) before reading or writing anything, ``EnvironmentFailure`` (unreadable tree, another
    apply running, an interrupted apply to recover in dry-run mode). A patch that does not apply
    is *returned*: ``ok=False``, ``committed=False``, the tree untouched; call
    ``raise_for_failure()`` to turn it into ``ApplyFailed``.

    The tree lock (``patchset.locking``) is held from the first read to the last write, so a
    second apply to the same tree waits and then sees this one's result. ``before_finish`` is
    passed to ``txn.commit`` (called with every file in place; raising rolls the tree back), and
    so is ``durable`` (fsync every step against power loss; default ``$PATCHSET_FSYNC``).
    """
    root = Path(root)
    if not root.is_dir():
        raise EnvironmentFailure(f"{root}: not a directory", hint="pass the build tree's root")
    with locking.tree_lock(root):
        return _apply_series(
            root, items, fuzz, path_for, dry_run, progress, before_commit, before_finish, remove_empty, durable
        )


def _apply_series(
    root: Path,
    items: list[SeriesItem],
    fuzz: int,
    path_for: Callable[[str], str] | None,
    dry_run: bool,
    progress: Progress | None,
    before_commit: Callable[[SeriesResult], bool] | None,
    before_finish: Callable[[], None] | None,
    remove_empty: bool = False,
    durable: bool | None = None,
) -> SeriesResult:
    recovered = None
    if txn.pending(root):
        if dry_run:
            raise interrupted_error(root)
        recovered = txn.recover(root)
    paths = _Paths(root, path_for)
    state = _State(paths.root)
    parsed = _parse_all(items, paths, state)
    results: list[PatchResult] = []
    failed: str | None = None
    for i, (item, fps) in enumerate(zip(items, parsed, strict=True), start=1):
        if failed:
            results.append(PatchResult(item.patch_id, "not_reached"))
            continue
        if progress:
            progress(item.patch_id, i, len(items))
        pr = _apply_patch(state, fps, item, paths, fuzz, remove_empty)
        results.append(pr)
        if not pr.ok:
            failed = item.patch_id
    if failed is None:
        _check_links(state, str(paths.root))
    touched = {rel: state.get(rel) for rel in list(state.disk)}
    files = {rel: (sha256_bytes(d) if d is not None else None) for rel, (d, _) in touched.items()}
    modes = {rel: m for rel, (_, m) in touched.items()}
    result = SeriesResult(
        root=str(root),
        ok=failed is None,
        dry_run=dry_run,
        committed=False,
        patches=results,
        files=files,
        modes=modes,
        recovered=recovered,
        failed_patch=failed,
    )
    if result.ok and not dry_run and (before_commit is None or before_commit(result)):
        txn.commit(paths.root, state.changes(files), before_finish, durable)
        result.committed = True
    return result


def recover(root: Path, direction: txn.Direction = "auto") -> str | None:
    """Finish (``auto``/``forward``) or undo (``back``) an interrupted ``apply_series``."""
    with locking.tree_lock(root):
        return txn.recover(Path(os.path.realpath(root)), direction)


def pending_apply(root: Path) -> bool:
    """Did an apply to ``root`` stop half-way (kill -9, power loss)? Reads only."""
    return txn.pending(Path(root))


def interrupted_error(root: Path) -> PatchsetError:
    """The error a read-only command gives on a tree with an interrupted apply (it writes nothing);
    ``ForeignJournal`` when the tree's transaction directory is not this installation's."""
    bad = txn.foreign(Path(root))
    if bad is not None:
        return bad
    return EnvironmentFailure(
        f"{root}: an earlier apply was interrupted ({txn.describe_pending(Path(root))}); nothing was written",
        hint=f"run `patchset recover --tree {root}` to finish it (or `--back` to undo it), or a real apply",
    )


# --------------------------------------------------------------------------- state detection

StateName = Literal["applied", "not_applied", "unknown"]


@dataclass
class PatchState:
    """Whether a tree carries one patch (applied, not applied, unknown) and why."""

    patch_id: str
    state: StateName
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"patch_id": self.patch_id, "state": self.state, "reason": self.reason}


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

    ``expected`` (path -> sha256 after the whole series, ``None`` for an absent file; paths in
    the patches' layout, mapped through ``path_for`` like the patches' own paths, as in the
    lock) short-cuts the answer when every file matches. Otherwise: peel patches off the tree from the last to the
    first (a patch whose reverse applies at its turn is *applied*; the tree is rolled back past
    it in memory), then replay the rest forward from there (a patch that applies is
    *not applied*); a patch that fits neither way is *unknown* (conflict or drift).
    """
    root = Path(root)
    paths = _Paths(root, path_for)
    state = _State(paths.root)
    parsed = _parse_all(items, paths, state)
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
        r = _apply_patch(peel, _reverse(parsed[k]), rev_item, paths, 0)
        if r.ok:
            applied[k] = True
    # replay: the tree with the peeled patches re-applied in order must be the tree itself
    base, replay = peel, peel.fork()
    states: list[PatchState] = []
    for k in range(n):
        item = items[k]
        if applied[k]:
            r = _apply_patch(replay, parsed[k], item, paths, 0)
            if r.ok:
                states.append(PatchState(item.patch_id, "applied", "reverse-applies"))
                continue
            states.append(PatchState(item.patch_id, "unknown", "reverse-applies, but not forward on the peeled tree"))
            continue
        r = _apply_patch(replay, parsed[k], item, paths, 0)
        if r.ok:
            states.append(PatchState(item.patch_id, "not_applied", "applies forward"))
        else:
            why = "; ".join(f"{f.path}: {f.message or f.status}" for f in r.files if f.status != "applied") or r.status
            states.append(PatchState(item.patch_id, "unknown", f"applies neither way: {why}"))
    del base
    return SeriesState(states, matches)

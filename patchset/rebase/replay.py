"""In-memory replay of one patch onto a new base: the git-revise style 3-way merge.

Nothing is checked out. Two trees live in memory as "a commit plus changed files": the *old
world* (old base + every earlier patch, as the series was written) and the *new world* (new base
+ every earlier patch carried so far). For each file a patch touches:

* the patch applied to the old world gives ``theirs`` (it must apply there with zero fuzz, or the
  ledger is broken);
* the path is followed across upstream moves (``renames``) to the new world's ``ours``;
* the patch is applied to ``ours`` with zero fuzz (clean / with offset), and when that fails the
  file is merged 3-way (``git merge-file``: base = old world, ours, theirs), like a cherry-pick.

The result says per file what happened, and the caller decides whether the new world takes it
(a patch found already upstream is not stacked).
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from patchset.engine.hunks import FileOutcome, HunkResult, apply_file
from patchset.errors import EnvironmentFailure
from patchset.patchfmt.filepatch import FilePatch, as_creation, creates_missing
from patchset.rebase.report import How
from patchset.upstream.git import ls_tree_blobs, run_git
from patchset.upstream.repo import GitRepo, RenameCandidate

# how one file replayed, from best to worst


CLEAN, OFFSET, MERGED, ALREADY, CONFLICT, BROKEN, RESOLVED, EDITED = How
_RANK = {ALREADY: 0, CLEAN: 1, OFFSET: 2, MERGED: 3, CONFLICT: 4, BROKEN: 5}


# --------------------------------------------------------------------------- trees in memory


class BlobStore:
    """Reads many files of one commit with two git calls (``ls-tree`` + ``cat-file --batch``)."""

    def __init__(self, repo: GitRepo, commit: str) -> None:
        self.repo, self.commit = repo, commit
        self._files: dict[str, tuple[bytes | None, str | None]] = {}

    def prefetch(self, paths: list[str]) -> None:
        want = sorted({p for p in paths if p and p not in self._files})
        if not want:
            return
        found = ls_tree_blobs(
            self.repo.git(
                "ls-tree", "-r", "-z", "--full-tree", self.commit, "--", *[f":(literal){p}" for p in want]
            ).stdout
        )
        blobs: dict[str, bytes] = {}
        oids = sorted({oid for _, oid in found.values()})
        if oids:
            data = self.repo.git("cat-file", "--batch", input="".join(o + "\n" for o in oids).encode()).stdout
            pos = 0
            while pos < len(data):
                nl = data.index(b"\n", pos)
                raw_oid, _, size = data[pos:nl].split()
                n = int(size)
                blobs[raw_oid.decode()] = data[nl + 1 : nl + 1 + n]
                pos = nl + 1 + n + 1
        for p in want:
            if p in found:
                mode, oid = found[p]
                self._files[p] = (blobs[oid], mode)
            else:
                self._files[p] = (None, None)

    def get(self, path: str) -> tuple[bytes | None, str | None]:
        if path not in self._files:
            self.prefetch([path])
        return self._files[path]


@dataclass
class Tree:
    """A commit plus in-memory changes: ``path -> (bytes or None for deleted, mode)``."""

    store: BlobStore
    changes: dict[str, tuple[bytes | None, str | None]] = field(default_factory=dict)

    def read(self, path: str) -> bytes | None:
        return self.changes[path][0] if path in self.changes else self.store.get(path)[0]

    def mode(self, path: str) -> str | None:
        return self.changes[path][1] if path in self.changes else self.store.get(path)[1]

    def write(self, path: str, data: bytes | None, mode: str | None = None) -> None:
        if data is None:
            self.changes[path] = (None, None)
        else:
            self.changes[path] = (data, mode or self.mode(path) or "100644")

    def copy(self) -> Tree:
        return Tree(self.store, dict(self.changes))


# --------------------------------------------------------------------------- 3-way merge


@dataclass
class MergeResult:
    """A three-way merge of one file: the merged text and its conflicts."""

    data: bytes
    conflicts: int  # number of conflict regions (0 = clean)


class Merger:
    """``git merge-file`` on temporary files, one directory per rebase."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="patchset-merge-")
        self._n = 0

    def close(self) -> None:
        self._dir.cleanup()

    def merge(self, base: bytes, ours: bytes, theirs: bytes, labels: tuple[str, str, str]) -> MergeResult:
        self._n += 1
        d = Path(self._dir.name)
        names = []
        for role, data in (("ours", ours), ("base", base), ("theirs", theirs)):
            p = d / f"{self._n}.{role}"
            p.write_bytes(data)
            names.append(str(p))
        proc = run_git(
            [
                "-c",
                "merge.conflictStyle=merge",
                "merge-file",
                "-p",
                "--marker-size=7",
                "-L",
                labels[0],
                "-L",
                labels[1],
                "-L",
                labels[2],
                *names,
            ],
            check=False,
        )
        for n in names:
            Path(n).unlink(missing_ok=True)
        if proc.returncode < 0 or proc.returncode > 127:
            raise EnvironmentFailure(
                f"git merge-file failed: {proc.stderr.decode(errors='replace').strip()}",
                hint="binary files cannot be merged line by line",
            )
        return MergeResult(proc.stdout, proc.returncode)


# --------------------------------------------------------------------------- replay


@dataclass
class Move:
    """Where an old path lives on the new base."""

    path: str | None  # None: gone upstream
    candidates: list[RenameCandidate] = field(default_factory=list)
    ambiguous: bool = False


@dataclass
class FileReplay:
    """What happened to one file of a patch on the new base."""

    path: str  # the path the patch names (old side; new side for a created file)
    new_path: str | None  # where the result lives on the new base (None: deleted)
    how: How
    result: bytes | None = None  # new content (None: deleted); for a conflict: the text with markers
    mode: str | None = None
    ours: bytes | None = None  # the new world's content before this patch
    base: bytes | None = None  # the old world's content before this patch
    moved_from: str | None = None
    move: Move | None = None
    hunks: Sequence[HunkResult] = field(default_factory=list)  # direct zero-fuzz apply onto ``ours``
    message: str = ""
    delete_path: str | None = None  # a path the patch removes on the new base (rename source)
    ours_mode: str | None = None  # the new world's mode of it before this patch (None: not compared)

    @property
    def changed(self) -> bool:
        """Does the result differ from the new world as it was?"""
        if self.how in (ALREADY, CONFLICT, BROKEN):
            return False
        mode_changed = self.ours_mode is not None and self.mode != self.ours_mode
        return self.result != self.ours or self.delete_path is not None or mode_changed


@dataclass
class PatchReplay:
    """One patch carried onto the new base: merged files, conflicts, new body."""

    files: list[FileReplay]

    @property
    def status(self) -> str:
        """broken | conflict | empty | carried"""
        hows = {f.how for f in self.files}
        if BROKEN in hows:
            return "broken"
        if CONFLICT in hows:
            return "conflict"
        if not any(f.changed for f in self.files):
            return "empty"
        return "carried"

    @property
    def how(self) -> str:
        """For a carried patch: clean | offset | merged (the worst file)."""
        worst = max(
            (f.how for f in self.files if f.how in (CLEAN, OFFSET, MERGED)), key=lambda how: _RANK[how], default=CLEAN
        )
        return worst

    @property
    def moved(self) -> list[FileReplay]:
        return [f for f in self.files if f.moved_from]

    def apply_to(self, tree: Tree) -> None:
        """Stack this replay's results on ``tree`` (the new world)."""
        for f in self.files:
            if f.how in (CONFLICT, BROKEN, ALREADY):
                continue
            if f.delete_path:
                tree.write(f.delete_path, None)
            if f.new_path is not None:
                tree.write(f.new_path, f.result, f.mode)


def _hunk_how(out: FileOutcome) -> How:
    return OFFSET if any(h.offset for h in out.hunks) else CLEAN


def replay_patch(
    files: list[FilePatch], old: Tree, new: Tree, moves: Callable[[str], Move], merger: Merger, labels: tuple[str, str]
) -> PatchReplay:
    """Replay one parsed patch; updates ``old`` (the old world always takes the patch), not ``new``.

    ``labels`` are (upstream label, patch label) for conflict markers.
    """
    onto = _Onto(new, moves, merger, labels)
    out: list[FileReplay] = []
    for fp in files:
        if creates_missing(fp) and old.read(fp.path) is None:
            fp = as_creation(fp)  # ``diff -ruN`` without an Epoch stamp: a new file, as GNU patch reads it
        src = fp.path
        base = old.read(src) if fp.op != "create" else old.read(fp.new_path or src)
        before = apply_file(base, fp)
        if not before.ok:
            out.append(
                FileReplay(
                    src,
                    None,
                    BROKEN,
                    message=(
                        f"does not apply to the old base with zero fuzz: {before.message}; the ledger's body does not "
                        "match its recorded base"
                    ),
                )
            )
            continue
        theirs = before.new
        theirs_mode = before.new_mode or old.mode(src) or "100644"
        if fp.op in ("rename", "delete"):
            old.write(src, None)
        if fp.target is not None:
            old.write(fp.target, theirs, theirs_mode)
        out.append(_replay_file(fp, base, theirs, theirs_mode, onto))
    return PatchReplay(out)


@dataclass(frozen=True)
class _Onto:
    """What every file of a patch is replayed onto: the new base, its moves, the merger, the labels."""

    new: Tree
    moves: Callable[[str], Move]
    merger: Merger
    labels: tuple[str, str]


def _replay_file(fp: FilePatch, base: bytes | None, theirs: bytes | None, theirs_mode: str, onto: _Onto) -> FileReplay:
    """One file: ``base`` its old content, ``theirs`` (``theirs_mode``) it with the patch applied."""
    new, moves, merger, labels = onto.new, onto.moves, onto.merger, onto.labels
    src = fp.path
    if fp.op == "create":
        created = fp.new_path or src
        ours = new.read(created)
        r = FileReplay(src, created, CLEAN, ours=ours, base=None, mode=theirs_mode)
        if ours is None:
            r.result = theirs
        elif ours == theirs or (not fp.hunks and not theirs):
            # the same file; or a creation that carries no content (a data-less "Binary files ...
            # differ" stanza) of a file upstream now has: nothing of the patch's is left to carry
            r.how, r.result = ALREADY, ours
        else:
            _merge_into(r, b"", ours, theirs or b"", merger, labels, "both upstream and the patch create this file")
        return r

    move = Move(src) if new.read(src) is not None else moves(src)
    q = move.path
    ours = new.read(q) if q else None
    moved_from = src if q is not None and q != src else None
    ours_mode = mode = new.mode(q) if q else None
    if fp.new_mode and fp.old_mode != fp.new_mode:
        mode = fp.new_mode
    if fp.op == "delete":
        r = FileReplay(src, None, CLEAN, ours=ours, base=base, moved_from=moved_from, move=move, delete_path=q)
        if ours is None:
            r.how, r.delete_path = ALREADY, None
        elif ours != base:
            r.how, r.result, r.new_path = CONFLICT, ours, q
            r.message = "the patch deletes this file but upstream changed it"
        return r
    dest: str | None = q
    delete_path: str | None = None
    if fp.op == "rename" and fp.new_path:
        dest, delete_path = fp.new_path, q
    r = FileReplay(
        src,
        dest,
        CLEAN,
        ours=ours,
        ours_mode=ours_mode,
        base=base,
        mode=mode or theirs_mode,
        moved_from=moved_from,
        move=move,
        delete_path=delete_path,
    )
    if ours is None:
        r.how = CONFLICT
        r.message = "the file was deleted upstream and no moved copy was found"
        return r
    direct = apply_file(ours, fp)
    r.hunks = direct.hunks
    if direct.ok:
        r.how, r.result = _hunk_how(direct), direct.new
        if r.result == ours and r.mode == ours_mode and fp.op != "rename":
            r.how = ALREADY  # a mode the patch sets that upstream lacks is still to carry
        return r
    _merge_into(r, base or b"", ours, theirs or b"", merger, labels, "")
    if r.how == MERGED and r.result == ours and r.mode == ours_mode and fp.op != "rename":
        r.how = ALREADY
    return r


def _merge_into(
    r: FileReplay, base: bytes, ours: bytes, theirs: bytes, merger: Merger, labels: tuple[str, str], message: str
) -> None:
    if b"\0" in base or b"\0" in ours or b"\0" in theirs:  # git merge-file refuses binary files
        r.how, r.result = CONFLICT, ours
        r.message = (message + "; " if message else "") + "binary content: cannot merge line by line"
        return
    m = merger.merge(base, ours, theirs, (labels[0], "old base", labels[1]))
    r.result = m.data
    if m.conflicts:
        r.how = CONFLICT
        r.message = message or f"{m.conflicts} conflicting region(s)"
    else:
        r.how = MERGED


def blob_sha(data: bytes) -> str:
    """git's blob id of ``data`` (for ``index`` lines)."""
    h = hashlib.sha1(b"blob %d\0" % len(data))
    h.update(data)
    return h.hexdigest()

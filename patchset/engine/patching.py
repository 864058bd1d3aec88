"""One patch applied to the in-memory tree: every file patch of it, or none.

GNU ``patch`` semantics per file (``patchset.engine.hunks``), plus what a tree adds: renames and
copies (and telling a done one from a conflict), modes and git symlinks, a file replacing a
directory, ``-E``. ``parse_all`` parses and checks a whole series before anything is read.
"""

from __future__ import annotations

from patchset.engine.hunks import FileOutcome, apply_file
from patchset.engine.paths import Paths, check_link
from patchset.engine.results import FileResult, PatchResult, SeriesItem
from patchset.engine.treestate import SYMLINK, TreeState
from patchset.ledger.lock import sha256_bytes
from patchset.patchfmt.diffs import parse_patch
from patchset.patchfmt.filepatch import FilePatch

GIT_SYMLINK, GIT_SUBMODULE = "120000", "160000"


def _git_mode(mode: str | None) -> int | None:
    if not mode:
        return None
    if mode == GIT_SYMLINK:
        return SYMLINK
    bits = int(mode, 8) & 0o7777
    return 0o755 if bits & 0o100 else 0o644


def _apply_one(
    state: TreeState, fp: FilePatch, paths: Paths, patch_id: str, fuzz: int, remove_empty: bool = False
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
    if fp.op in ("rename", "copy") and dst is not None and dst != src and _move_settled(state, fp, old, dst, fuzz, res):
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
        check_link(state, dst, outcome.new, patch_id, str(paths.root))
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


def _move_settled(state: TreeState, fp: FilePatch, old: bytes | None, dst: str, fuzz: int, res: FileResult) -> bool:
    """A rename or copy whose source is gone or whose target exists is settled here: ``res`` says
    already applied, or why it fails. False: neither, the move goes ahead."""
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
                return True
        res.message = f"{fp.op} source {fp.old_path} does not exist"
        return True
    there = state.get(dst)[0]
    if there is None:
        return False
    probe = apply_file(old, fp, fuzz)
    if fp.op == "copy" and probe.ok and probe.new == there:
        res.status, res.message = (
            "already_applied",
            (f"copy {fp.old_path} -> {fp.new_path}: target already has the copied content"),
        )
    else:
        res.message = f"{fp.op} target {fp.new_path} already exists"
    return True


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


def parse_all(items: list[SeriesItem], paths: Paths, state: TreeState) -> list[list[FilePatch]]:
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


def apply_patch(
    state: TreeState, fps: list[FilePatch], item: SeriesItem, paths: Paths, fuzz: int, remove_empty: bool = False
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

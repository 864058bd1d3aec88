"""The refreshed series as a patch against this repository, without touching the ledger.

The gate must not rewrite the ledger it judges. It copies the ledger's files (``patches.toml``,
the lock, every body, the scripts its generate commands run, the recorded conflict resolutions) twice into a scratch directory, runs
the real ``patchset rebase`` on one copy, and diffs the two copies with ``git diff --no-index``.
The copies sit under ``a/<prefix>`` and ``b/<prefix>``, where ``<prefix>`` is the ledger's
directory relative to its git work tree, so the diff's paths are the repository's own:
``git apply series.patch`` at the top of a clone gives exactly what ``patchset rebase`` would
have written.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from patchset.errors import EnvironmentFailure
from patchset.ledger.model import Ledger
from patchset.rebase.rerere import RR_CACHE
from patchset.upstream.git import run_git

SCRATCH_STATE = ".patchset"  # what a rebase leaves in its directory (backups): not part of the series


@dataclass
class Workspace:
    """Two copies of the ledger's files: ``pristine`` (as committed) and ``work`` (to be rebased)."""

    root: Path
    prefix: str  # the ledger directory relative to its git work tree ("" at the top, else "dir/sub/")
    pristine: Path  # a/<prefix>
    work: Path  # b/<prefix>
    ledger_name: str

    @property
    def pristine_ledger(self) -> Path:
        return self.pristine / self.ledger_name

    @property
    def work_ledger(self) -> Path:
        return self.work / self.ledger_name


def repo_prefix(directory: Path) -> str:
    """``directory`` relative to the top of its git work tree ("" when it is the top or not in git)."""
    try:
        proc = run_git(["rev-parse", "--show-prefix"], cwd=directory, check=False)
    except EnvironmentFailure:  # git is not installed: not in a work tree as far as we can tell
        return ""
    return proc.stdout.decode().strip() if proc.returncode == 0 else ""


def ledger_files(ledger: Ledger) -> list[str]:
    """Paths (relative to the ledger's directory) a rebase reads or writes: the ledger, its lock,
    every body, the files generate commands run (their scripts) and the recorded resolutions."""
    root = ledger.root.resolve()
    rels = [ledger.path.name, ledger.lock_path.name]
    for p in ledger.patches:
        named = [p.body_path, *(p.generate.ledger_files() if p.generate else [])]
        for f in (ledger.root / rel for rel in named):
            f = f.resolve()
            if f.is_file() and f.is_relative_to(root):
                rels.append(f.relative_to(root).as_posix())
    rr = ledger.root / RR_CACHE
    if rr.is_dir():
        rels += [f.relative_to(ledger.root).as_posix() for f in sorted(rr.rglob("*")) if f.is_file()]
    return list(dict.fromkeys(rels))


def make_workspace(ledger: Ledger, scratch: Path) -> Workspace:
    prefix = repo_prefix(ledger.root)
    ws = Workspace(scratch, prefix, scratch / "a" / prefix, scratch / "b" / prefix, ledger.path.name)
    for rel in ledger_files(ledger):
        src = ledger.root / rel
        if not src.exists():  # an absent lock is fine: rebase writes one
            continue
        for side in (ws.pristine, ws.work):
            dest = side / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)
    return ws


def series_patch(ws: Workspace) -> bytes:
    """What the rebase changed in the copy, as a patch for ``git apply`` at the top of the repository."""
    shutil.rmtree(ws.work / SCRATCH_STATE, ignore_errors=True)
    proc = run_git(
        [
            "diff",
            "--no-index",
            "--no-prefix",
            "--binary",
            "--no-color",
            "--no-ext-diff",
            "--no-renames",
            "a",
            "b",
        ],
        cwd=ws.root,
        check=False,
    )
    if proc.returncode not in (0, 1):
        raise EnvironmentFailure(
            f"git diff --no-index failed in {ws.root}: {proc.stderr.decode(errors='replace').strip()}"
        )
    return proc.stdout


def changed_files(patch: bytes) -> list[str]:
    """The repository paths a ``series_patch`` touches."""
    lines = patch.decode("utf-8", "replace").splitlines()
    return [line.split(" ")[-1].split("/", 1)[1] for line in lines if line.startswith("diff --git ")]

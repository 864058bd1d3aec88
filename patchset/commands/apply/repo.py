"""``apply --repo``: a target's series onto a git checkout, one commit per patch on a new branch.

Each commit carries the patch's ``Patch-Id:``/``Origin:``/``Upstream-PR:`` trailers; nothing
changes unless the whole series applies (a dry run on the checkout first). Run again, an existing
branch that carries exactly the series is reported as such; any other branch of that name is
refused.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from patchset.commands.apply.lock import record_lock
from patchset.commands.apply.target import (
    ApplyRun,
    Outcome,
    TargetReport,
    TreeArg,
    TreeKind,
    series_items,
)
from patchset.commands.apply.tree import apply_to_tree
from patchset.commands.exporter import trailers
from patchset.engine.tree import TreePass
from patchset.errors import InputError
from patchset.ledger.lock import sha256_bytes
from patchset.ledger.model import Patch, Target


def _commit_message(p: Patch) -> str:
    lines = [p.title, ""]
    if p.description:
        lines += [p.description, ""]
    return "\n".join([*lines, *trailers(p)]) + "\n"


def apply_to_repo(job: ApplyRun, target: Target, arg: TreeArg) -> TargetReport:
    """One commit per patch on a new branch of a git checkout; nothing changes unless all apply
    (the whole series is first applied to the checkout as a dry run, checked against the lock)."""
    import git  # GitPython: loads only for --repo

    repo_dir, layout = arg.path, arg.layout_of(target)
    try:
        repo = git.Repo(repo_dir)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise InputError(f"{repo_dir} is not a git checkout", hint="use --tree for a plain directory") from None
    branch = arg.branch or f"patchset/{target.name}"
    if branch in [h.name for h in repo.heads]:  # run again: nothing to write, or refused
        return _existing_branch(job, target, repo, repo_dir, branch, layout)
    if repo.is_dirty(untracked_files=False):
        raise InputError(
            f"{repo_dir} has uncommitted changes",
            hint="commit or stash them first: apply --repo starts from a clean HEAD",
        )
    dry = ApplyRun(job.ledger, fuzz=job.fuzz, update_lock=job.update_lock, dry_run=True)
    trial = apply_to_tree(dry, target, repo_dir, layout, TreeKind.REPO)
    if trial.outcome != Outcome.DRY_RUN or job.dry_run:
        return trial
    report = _commit_each(job, target, repo, repo_dir, branch, layout)
    report.result = trial.result
    return report


def _commit_each(job: ApplyRun, target: Target, repo: Any, repo_dir: Path, branch: str, layout: str) -> TargetReport:
    """The series on the new branch ``branch``, one commit per patch (on any failure the checkout
    goes back to where it was and the branch is deleted); with ``--update-lock`` the lock recorded."""
    items = series_items(job.ledger, target)
    patches = {p.id: p for p in job.ledger.series(target.name)}
    start = repo.head.commit
    start_ref = repo.active_branch.name if not repo.head.is_detached else start.hexsha
    repo.git.checkout("-q", "-b", branch)
    report = TargetReport(target.name, str(repo_dir), TreeKind.REPO, layout, Outcome.FAILED, "", fuzz=job.fuzz)
    got: dict[str, str] = {}
    try:
        with TreePass(repo_dir, target.mapper(layout), job.fuzz) as tree:
            for i, item in enumerate(items, 1):
                if job.progress:
                    job.progress(item.patch_id, i, len(items))
                res = tree.apply([item])
                res.raise_for_failure()
                repo.git.add("-A", "--", *res.files)
                repo.git.commit("-q", "--no-verify", "-m", _commit_message(patches[item.patch_id]))
                report.commits.append(repo.head.commit.hexsha)
                got.update({target.lock_key(k): v for k, v in res.files.items() if v is not None})
    except BaseException:
        repo.git.checkout("-q", "-f", start_ref)
        repo.git.branch("-D", branch)
        raise
    report.outcome = Outcome.APPLIED
    report.message = f"{len(items)} commits on branch {branch}"
    if job.update_lock:
        base = {}
        for k in got:
            try:
                base[k] = sha256_bytes(start.tree[k].data_stream.read())
            except KeyError:
                pass
        record_lock(job.ledger, target, got, base)
    return report


_PATCH_ID = re.compile(r"^Patch-Id: (\S+)[ \t]*$", re.MULTILINE)


def _existing_branch(
    job: ApplyRun, target: Target, repo: Any, repo_dir: Path, branch: str, layout: str
) -> TargetReport:
    """``apply --repo`` when the branch exists already (the command run again).

    It carries the series when its newest commits are one per patch in series order (their
    ``Patch-Id:`` trailers) and its files are what the series makes: then the report is "already
    carries the series" (exit 0). Any other branch of that name is refused (exit 2). Neither the
    checkout nor its refs are touched."""
    import tempfile

    want = [item.patch_id for item in series_items(job.ledger, target)]
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
            dry = ApplyRun(job.ledger, fuzz=job.fuzz, dry_run=True)
            rep = apply_to_tree(dry, target, Path(tmp), layout, TreeKind.REPO)
        if rep.outcome == Outcome.ALREADY:
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

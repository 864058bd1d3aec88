"""``patchset import --fork URL@SHA [--upstream CLONE]``: a fork pinned at a commit, as patches.

Build repositories name a vLLM fork at a commit (``.gitmodules``, ``ARG VLLM_REF``). Its changes
are the commits above its merge base with upstream: both are fetched into a scratch repository
(bounded in time; no hooks run on a fetch), each commit from the merge base to SHA becomes one
``git format-patch`` mail limited to the target's package (``vllm/``), and the mails go in as
``import`` takes mails. What the commits change outside the package (tests, docs, csrc) is said.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from patchset.commands.diffroot import package_roots
from patchset.commands.importer import ImportResult, choose_target, import_sources
from patchset.commands.targets import set_target
from patchset.errors import EnvironmentFailure, InputError
from patchset.ledger import store as ledger_mod
from patchset.ledger.model import Target
from patchset.text import terminal
from patchset.upstream.git import git_env

FETCH_TIMEOUT = 600  # seconds for one fetch (a vLLM fork's history over the network)
MAX_COMMITS = 300  # a fork further above upstream than this is a rebase of its own, not patches
_SHA = re.compile(r"[0-9a-f]{7,40}")


@dataclass
class ForkImport:
    """One ``import --fork``: the fork, where it leaves upstream, and what was written."""

    url: str
    sha: str
    upstream: str
    merge_base: str = ""
    commits: list[str] = field(default_factory=list)  # "sha7 subject", oldest first
    outside: list[str] = field(default_factory=list)  # files the commits change outside the package
    result: ImportResult = field(default_factory=ImportResult)

    def to_json(self) -> dict[str, object]:
        return {**{k: v for k, v in vars(self).items() if k != "result"}, **self.result.to_json()}


def parse_fork(value: str) -> tuple[str, str]:
    """``URL@SHA`` (the last ``@``: ``git@host:x/vllm.git@abc123`` has two)."""
    url, at, sha = value.rpartition("@")
    if not at or not url or not _SHA.fullmatch(sha):
        raise InputError(
            f"--fork {value!r}: not URL@SHA",
            hint="the fork's clone URL (or path) and a commit: --fork https://github.com/me/vllm.git@0f3a9b2c",
        )
    return url, sha


def _git(repo: Path, *args: str, timeout: int = 60, network: bool = False) -> str:
    try:
        proc = subprocess.run(
            ["git", "-C", str(repo), *args],
            capture_output=True,
            timeout=timeout,
            env=git_env(user_config=network),
            check=False,
        )
    except FileNotFoundError:
        raise EnvironmentFailure("git is not installed", hint="install git (apt-get install git)") from None
    except subprocess.TimeoutExpired:
        raise EnvironmentFailure(
            f"git {args[0]} took longer than {timeout} s", hint="try again, or a local clone"
        ) from None
    if proc.returncode != 0:
        err = terminal(proc.stderr.decode("utf-8", "replace").strip()[-2000:])
        raise InputError(f"git {' '.join(args[:2])}: {err}", hint="nothing was imported")
    return proc.stdout.decode("utf-8", "replace")


def _fetch(scratch: Path, url: str, refspec: str, what: str) -> None:
    try:
        _git(scratch, "fetch", "--no-tags", "--quiet", "--", url, refspec, timeout=FETCH_TIMEOUT, network=True)
    except InputError as exc:
        raise InputError(
            f"{what} {terminal(url)} cannot be fetched: {exc.message}", hint="nothing was imported"
        ) from None


def import_fork(
    ledger_path: Path,
    value: str,
    target: str | None,
    upstream: str | None,
    *,
    base: str | None = None,
    base_tree: Path | None = None,
) -> ForkImport:
    """The fork's commits above its merge base with ``upstream`` (default: the target's), as patches."""
    url, sha = parse_fork(value)
    ledger = ledger_mod.load_ledger(ledger_path)
    t = choose_target(ledger, target, "which target is this a fork of?")
    up = upstream or t.upstream
    if not up:
        raise InputError(f"target {t.name} names no upstream to find the fork's merge base in", hint="pass --upstream")
    fi = ForkImport(url, sha, up)
    roots = [r.rstrip("/") for r in package_roots(t)]
    scratch = Path(tempfile.mkdtemp(prefix="patchset-fork-"))
    try:
        _git(scratch, "init", "--quiet", "--bare")
        _fetch(scratch, url, "+refs/heads/*:refs/fork/*", "the fork")
        try:
            full = _git(scratch, "rev-parse", "--verify", "--end-of-options", f"{sha}^{{commit}}").strip()
        except InputError:
            raise InputError(
                f"--fork {terminal(value)}: the fork has no commit {sha} on its branches",
                hint="check the commit (git log in the fork)",
            ) from None
        _fetch(scratch, up, "+HEAD:refs/upstream/HEAD", "the upstream")
        try:
            fi.merge_base = _git(scratch, "merge-base", full, "refs/upstream/HEAD").strip()
        except InputError:
            raise InputError(
                f"--fork {terminal(value)}: the commit shares no history with {terminal(up)}",
                hint="--upstream names the project the fork was made from",
            ) from None
        fi.sha = full
        log = _git(scratch, "log", "--reverse", "--format=%h %s", f"{fi.merge_base}..{full}").splitlines()
        if not log:
            raise InputError(f"--fork {terminal(value)}: the commit is upstream's own (no commit above the merge base)")
        if len(log) > MAX_COMMITS:
            raise InputError(
                f"--fork {terminal(value)}: {len(log)} commits above upstream (more than {MAX_COMMITS})",
                hint="import the fork's own changes as diffs, or rebase the fork first",
            )
        fi.commits = [terminal(line) for line in log]
        changed = _git(scratch, "diff", "--name-only", "-z", fi.merge_base, full).split("\0")
        fi.outside = [terminal(f) for f in changed if f and not any(f.startswith(r + "/") for r in roots)]
        mails = scratch / "mails"
        _git(
            scratch, "format-patch", "--quiet", "--no-stat", "-o", str(mails), f"{fi.merge_base}..{full}", "--", *roots
        )
        files = sorted(mails.glob("*.patch"))
        if not files:
            raise InputError(
                f"--fork {terminal(value)}: its {len(log)} commit(s) change nothing under {', '.join(roots)}/",
                hint="nothing was imported",
            )
        fi.result = import_sources(ledger_path, files, t.name, base=base, base_tree=base_tree)
        _record_base(ledger_path, t, fi, given=base is not None or base_tree is not None)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return fi


def _record_base(ledger_path: Path, t: Target, fi: ForkImport, given: bool) -> None:
    """The merge base becomes the target's base when it has none and nothing else was given: the
    mails were made from it, so the series applies there. Only when the commit is the target's
    upstream's (a commit of another ``--upstream`` would name nothing the target can fetch)."""
    if given or t.base or (t.upstream and fi.upstream != t.upstream):
        return
    values = {"base": fi.merge_base, "upstream": None if t.upstream else fi.upstream}
    if set_target(ledger_path, t.name, values, {}):
        fi.result.recorded_base = fi.merge_base

"""``patchset base detect`` and apply's base check: is this tree (or image) the target's base?

A vLLM nightly tree names its commit only as a prefix in its version (``…+g7f1a539``); an image
names it in its tag (``nightly-<commit>``) or its label. ``patchset.upstream.nightly`` reads and
resolves those clues; this module compares them with the ledger's ``base`` and says what to do:
the same commit (exit 0), another one (exit 1: rebase onto it, or record it as the base), or
nothing to compare (exit 0, with the reason). ``apply --tree`` runs the offline part of the same
check (the ledger's base only, no clone, no docker) and warns, or with ``--strict-base`` refuses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from patchset.errors import InputError
from patchset.ledger.model import Target
from patchset.text import Word, json_fields
from patchset.upstream.bases import version_like
from patchset.upstream.clone import UpstreamClone
from patchset.upstream.nightly import (
    Clue,
    Detected,
    Resolved,
    combine,
    image_tag_clue,
    inspect_image,
    public_version,
    resolve_prefix,
    tree_clues,
)
from patchset.upstream.releases import is_spec_like, parse_spec
from patchset.upstream.repo import GitRepo


class BaseVerdict(Word):
    """A tree's commit against the recorded base."""

    SAME = "same"
    DIFFERENT = "different"
    UNKNOWN = "unknown"
    INCONSISTENT = "inconsistent"


SAME, DIFFERENT, UNKNOWN, INCONSISTENT = BaseVerdict


@dataclass
class BaseCheck:
    """A tree's (or an image's) commit against the target's recorded base."""

    target: str
    base: str
    base_version: str
    where: str  # what was read: the tree's path, the image reference
    detected: Detected
    resolved: Resolved
    verdict: BaseVerdict
    message: str
    base_commit: str = ""  # the base as a full commit, when it is one or a clone resolved it
    suggest: list[str] = field(default_factory=list)  # what to run next, one command or edit per line

    @property
    def exit_code(self) -> int:
        return 1 if self.verdict in (DIFFERENT, INCONSISTENT) else 0

    @property
    def commit(self) -> str:
        """The full commit when it is known, else the prefix the clues name."""
        return self.resolved.commit or self.detected.commit

    def to_json(self) -> dict[str, Any]:
        return {
            **json_fields(self, "target base base_version base_commit where verdict message"),
            "version": self.detected.version,
            "prefix": self.detected.commit,
            "commit": self.resolved.commit,
            **json_fields(self, "resolved detected suggest exit_code"),
        }


def _base_version(target: Target) -> str:
    """The version the target's base is, when the ledger says: a release label (``vllm==0.30.0``,
    ``0.30.0``, ``v0.30.0``), else ``base_version``."""
    base = target.base.strip()
    if is_spec_like(base):
        return parse_spec(base).version
    return version_like(base) or target.base_version


def _same_version(a: str, b: str) -> bool:
    try:
        return Version(public_version(a)) == Version(public_version(b))
    except InvalidVersion:
        return public_version(a) == public_version(b)


def _full(text: str) -> str:
    t = text.strip().lower()
    return t if len(t) == 40 and all(c in "0123456789abcdef" for c in t) else ""


def compare(target: Target, detected: Detected, resolved: Resolved, base_commit: str = "") -> tuple[BaseVerdict, str]:
    """``(verdict, message)`` for what the clues say against the target's base."""
    if detected.disagree:
        return INCONSISTENT, (
            f"its version files disagree on the commit: {detected.commit}, but " + "; ".join(detected.disagree)
        )
    base = target.base.strip()
    base_commit = base_commit or _full(base)
    shown_base = base_commit[:12] if base_commit else base
    if detected.commit:
        named = resolved.commit or detected.commit
        what = f"commit {named[:12]}" + ("" if resolved.commit else " (a prefix: not resolved to a full commit)")
        if base_commit:
            if base_commit.startswith(detected.commit) and (not resolved.commit or resolved.commit == base_commit):
                return SAME, f"built from {base_commit[:12]}, the target's base"
            return DIFFERENT, f"built from {what}, not from the target's base {shown_base}"
        if not base:
            return UNKNOWN, f"built from {what}; target {target.name!r} records no base to compare it with"
        if is_spec_like(base) or version_like(base):  # a +g version is a build between tags, never a release
            return DIFFERENT, f"built from {what}, a build between releases, not the target's base {base}"
        return UNKNOWN, f"built from {what}; the base {base!r} is not a commit (pass --upstream to resolve it)"
    if detected.version:
        want = _base_version(target)
        if not want:
            return UNKNOWN, f"version {detected.version} names no commit, and the target's base {base!r} no version"
        if _same_version(detected.version, want):
            if base_commit:
                return UNKNOWN, (
                    f"version {detected.version} is the base's version, but it names no commit (the base is "
                    f"{shown_base}: a release or another build of that version cannot be told apart)"
                )
            return SAME, f"version {detected.version}, the target's base {base}"
        return DIFFERENT, f"version {detected.version}, not the target's base {base} ({want})"
    return UNKNOWN, "no version or commit found"


def _suggest(target: Target, check: BaseCheck, ledger_name: str) -> list[str]:
    if check.verdict != DIFFERENT:
        return []
    full = check.resolved.commit
    if not full:
        return [
            f"resolve the prefix {check.detected.commit} with a clone of the upstream: "
            f"patchset base detect --target {target.name} --upstream PATH|URL …"
        ]
    version = public_version(check.detected.version) if check.detected.version else ""
    record = f"patchset target set {target.name} --base {full}" + (f" --base-version {version}" if version else "")
    return [
        f"move the series to it: patchset rebase --target {target.name} --onto {full}",
        f"or, when the series is already validated on it, record it in {ledger_name}: {record}",
    ]


def _open_repo(upstream: str | None, root: Path) -> GitRepo | None:
    """A git repository for ``--upstream`` (as the gate takes it): a local clone as it is, a URL
    cloned or fetched into the cache (``UpstreamClone``); None without ``--upstream``."""
    if not upstream:
        return None
    from patchset.upstream.bases import local_repo

    local = local_repo(upstream) or local_repo(root / upstream)
    if local is not None:
        return GitRepo(local.resolve())
    if "://" in upstream or upstream.startswith("git@"):
        return UpstreamClone(upstream)
    raise InputError(f"--upstream {upstream}: not a git repository nor a URL")


def detect(
    target: Target,
    ledger_path: Path,
    *,
    tree: Path | None = None,
    image: str | None = None,
    upstream: str | None = None,
) -> BaseCheck:
    """Read the clues of ``tree`` and/or ``image``, resolve the commit (``upstream``: a clone to
    resolve it in; else only the ledger's base), and compare it with the target's base (of the
    ledger at ``ledger_path``, whose name the suggested commands use)."""
    if tree is None and not image:
        raise InputError("name what to detect: --tree DIR (a build tree) or --image REF (an image)")
    clues: list[Clue] = []
    where = []
    if tree is not None:
        if not tree.is_dir():
            raise InputError(f"--tree {tree}: not a directory")
        clues += tree_clues(tree, target.package or target.name, target.name)
        where.append(str(tree))
    if image:
        tag = image_tag_clue(image)
        clues += ([tag] if tag else []) + inspect_image(image)
        where.append(image)
    detected = combine(clues)
    if not detected.found:
        looked = ", ".join(c.source + (f" ({c.note})" if c.note else "") for c in clues) or (
            "<package>/_version.py, <package>-*.dist-info/METADATA and direct_url.json, PKG-INFO: none there"
        )
        raise InputError(
            f"{' and '.join(where)} names no version and no commit (looked at: {looked})",
            hint="point --tree at the top of the tree (the directory holding the package), or pass --image",
        )
    repo = _open_repo(upstream, ledger_path.parent)
    try:
        if isinstance(repo, UpstreamClone) and not repo.cloned:
            repo.sync()
        resolved = resolve_prefix(detected.commit, base=target.base, repo=repo) if detected.commit else Resolved()
        if isinstance(repo, UpstreamClone) and detected.commit and not resolved.commit and not resolved.candidates:
            repo.sync()  # a commit newer than the clone: fetch once, then ask again
            resolved = resolve_prefix(detected.commit, base=target.base, repo=repo)
        base_commit = _full(target.base)
        if not base_commit and repo is not None and target.base:
            base_commit = repo.rev(target.base) or ""
    finally:
        if repo is not None:
            repo.close()
    verdict, message = compare(target, detected, resolved, base_commit)
    check = BaseCheck(
        target.name,
        target.base,
        target.base_version,
        " and ".join(where),
        detected,
        resolved,
        verdict,
        message,
        base_commit=base_commit,
    )
    check.suggest = _suggest(target, check, ledger_path.name)
    return check


def tree_base(target: Target, tree: Path) -> BaseCheck | None:
    """The offline check ``apply --tree`` runs: the tree's clues against the ledger's base only (no
    clone, no docker). None when the tree names no version (nothing to say)."""
    clues = tree_clues(tree, target.package or target.name, target.name)
    detected = combine(clues)
    if not detected.found:
        return None
    resolved = resolve_prefix(detected.commit, base=target.base) if detected.commit else Resolved()
    verdict, message = compare(target, detected, resolved)
    return BaseCheck(target.name, target.base, target.base_version, str(tree), detected, resolved, verdict, message)


def render(term: Any, check: BaseCheck) -> None:
    """The verdict, every clue read (and why one was not used), the commit and what to do."""
    from patchset.commands.table import Styled

    style = {SAME: "green", DIFFERENT: "yellow", INCONSISTENT: "red"}.get(check.verdict, "")
    term.line(Styled(f"{check.target}: {check.verdict}", style), f": {check.where}: {check.message}")
    for clue in check.detected.clues:
        said = ", ".join(
            x for x in (clue.version and f"version {clue.version}", clue.commit and f"commit {clue.commit}") if x
        )
        term.line(f"{clue.source}: {said or '-'}" + (f" ({clue.note})" if clue.note else ""), indent="  ")
    if check.resolved.commit:
        term.line(f"commit: {check.resolved.commit} ({check.resolved.how})", indent="  ")
    elif check.detected.commit:
        term.line(f"commit prefix: {check.detected.commit} ({check.resolved.how})", indent="  ")
    for sha in check.resolved.candidates:
        term.line(f"candidate: {sha}", indent="    ")
    base = check.base or "(none)"
    term.line(f"target base: {base}" + (f" ({check.base_version})" if check.base_version else ""), indent="  ")
    for s in check.suggest:
        term.line(s, indent="  ")

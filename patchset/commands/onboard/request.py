"""One ``patchset import``: which kind of import its options ask for (checked once, here), and
the run that makes it. The CLI parses the options into an ``ImportRequest`` and prints the report."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from patchset.errors import InputError


class Mode(Enum):
    UPSTREAM = "--pr / --revert"
    OVERLAY = "--overlay"
    SCRIPT = "--script"
    FORK = "--fork"
    REPOSITORY = "a repository"
    BUILD = "a build repository"
    SOURCES = "patch files"


@dataclass
class ImportRequest:
    """The sources and options of one ``patchset import``, as given."""

    sources: tuple[Path, ...] = ()
    target: str | None = None
    patch_id: str | None = None
    overlay: Path | None = None
    base: str | None = None
    base_tree: Path | None = None
    manifest: Path | None = None
    script: str | None = None
    bind: str | None = None
    keep_diff: bool = False
    strip: int | None = None
    root: str | None = None
    prs: tuple[str, ...] = ()
    revert: str | None = None
    fork: str | None = None
    upstream: str | None = None
    group: str = "file"
    dry_run: bool = False
    folders: dict[str, Path] | None = field(default=None, init=False)  # a build repository's target folders

    def mode(self, ledger_path: Path) -> Mode:
        """The import the options ask for; a combination that makes no sense is refused before
        anything is read."""
        given = (
            ("--overlay", self.overlay),
            ("--script", self.script),
            ("--pr", self.prs),
            ("--revert", self.revert),
            ("--fork", self.fork),
        )
        modes = [m for m, v in given if v]
        if len(modes) > 1:
            raise InputError(f"give one of {', '.join(modes)} per import")
        if self.upstream is not None and self.revert is None and self.fork is None:
            raise InputError("--upstream goes with --revert or --fork")
        if self.fork is not None:
            if self.sources or self.patch_id or self.manifest or self.bind or self.keep_diff or self.dry_run:
                raise InputError("--fork takes --target, --upstream and --base (or --base-tree)")
            return Mode.FORK
        naming = self.strip is not None or self.root is not None
        if self.prs or self.revert:
            if self.sources or self.patch_id or self.base or self.base_tree or self.manifest or self.bind or naming:
                raise InputError(f"{modes[0]} takes only --target (and --upstream for --revert)")
            return Mode.UPSTREAM
        if naming and (self.overlay is not None or self.script is not None):
            raise InputError("--strip and --root read the names of imported diffs: not with --overlay or --script")
        if (self.bind is not None or self.keep_diff) and self.script is None:
            raise InputError(f"{'--bind' if self.bind is not None else '--keep-diff'} goes with --script")
        if self.overlay is not None:
            if self.sources:
                raise InputError("--overlay imports a directory of overlay files; pass patch files in another import")
            return Mode.OVERLAY
        if self.script is not None:
            if self.sources or self.manifest is not None:
                raise InputError("--script runs one command; pass patch files or --manifest in another import")
            return Mode.SCRIPT
        if self.manifest is not None:
            raise InputError("--manifest goes with --overlay")
        if self.group != "file":
            raise InputError("--group goes with --overlay")
        if not self.sources:
            raise InputError(
                "nothing to import",
                hint="pass patch files, a quilt directory or a build repository; or --overlay DIR",
            )
        return self._directory_mode(ledger_path)

    def _directory_mode(self, ledger_path: Path) -> Mode:
        from patchset.commands.importer import build_folders, is_repository
        from patchset.ledger.store import load_ledger

        src, one = self.sources[0], len(self.sources) == 1
        as_named = self.patch_id is None and self.strip is None and not self.root  # no id, no reading given
        if one and self.target is None and as_named and self.base is None and self.base_tree is None:
            self.folders = build_folders(src)
        if (
            one
            and src.is_dir()
            and as_named
            and (self.dry_run or is_repository(src, self.folders, set(load_ledger(ledger_path).targets)))
        ):
            return Mode.REPOSITORY
        if self.dry_run:
            raise InputError("--dry-run surveys a repository: pass one directory")
        return Mode.BUILD if self.folders else Mode.SOURCES


@dataclass
class BuildOnly:
    """A build repository of preset-named folders: the folders' import, and what it holds beside
    them that was not surveyed (said, so nothing is skipped without a word)."""

    report: Any  # patchset.commands.importer.BuildImport
    not_surveyed: list[str]

    def to_json(self) -> dict[str, Any]:
        return {**self.report.to_json(), "not_surveyed": self.not_surveyed}


def run(ledger_path: Path, req: ImportRequest, mode: Mode) -> Any:
    """Make the import ``mode`` says; the report it returns has ``to_json``."""
    from patchset.commands import importer, overlay_import, upstream_import
    from patchset.commands.onboard import land
    from patchset.ledger.store import load_ledger

    if mode is Mode.UPSTREAM:
        if req.revert is not None:
            upstream = Path(req.upstream) if req.upstream is not None else None
            return upstream_import.import_revert(ledger_path, req.revert, req.target, upstream)
        return upstream_import.import_prs(ledger_path, list(req.prs), req.target)
    if mode is Mode.OVERLAY:
        assert req.overlay is not None
        t = importer.choose_target(load_ledger(ledger_path), req.target, "which target do these overlays belong to?")
        return overlay_import.import_overlay(
            ledger_path,
            req.overlay,
            t.name,
            base=req.base,
            base_tree=req.base_tree,
            manifest=req.manifest,
            group=req.group,
        )
    if mode is Mode.FORK:
        from patchset.commands.onboard.fork import import_fork

        assert req.fork is not None
        return import_fork(ledger_path, req.fork, req.target, req.upstream, base=req.base, base_tree=req.base_tree)
    if mode is Mode.SCRIPT:
        assert req.script is not None
        from patchset.commands.onboard.script import import_real_script

        opts: dict[str, Any] = {"base": req.base, "base_tree": req.base_tree, "keep_diff": req.keep_diff}
        return import_real_script(ledger_path, req.script, req.patch_id, req.target, bind=req.bind, **opts)
    if mode is Mode.REPOSITORY:
        return land.run(land.Onboarding(ledger_path, req.sources[0], req.target, req.base, req.base_tree, req.dry_run))
    if mode is Mode.BUILD:
        from patchset.commands.onboard.survey import beside_folders

        assert req.folders is not None
        rep = importer.import_build(ledger_path, req.sources[0], req.folders)
        return BuildOnly(rep, beside_folders(req.sources[0], req.folders))
    naming = importer.Naming(req.strip, req.root)
    return importer.import_sources(
        ledger_path, list(req.sources), req.target, req.patch_id, base=req.base, base_tree=req.base_tree, naming=naming
    )

"""CLI commands: ledger set-up: init, target add, import, export, audit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from patchset.cli import Ctx, SuggestingGroup, emit_json, guarded, out
from patchset.clicmds import options as opt


@click.command()
@click.option("--title", default="", metavar="TEXT", help="A title for the ledger.")
@opt.target("add (repeatable)", "vllm, flashinfer and nccl come with presets; any other name is generic", multiple=True)
@opt.json
@click.pass_obj
@guarded
def init(c: Ctx, title: str, targets: tuple[str, ...], as_json: bool) -> int:
    """Create a new ledger (patches.toml, patches.lock) and the series directory."""
    from patchset.commands.targets import init as do_init
    from patchset.ledger.presets import describe

    added = do_init(c.ledger_path, title, list(targets))
    if as_json:
        emit_json({"ledger": str(c.ledger_path), "targets": added})
    else:
        out.line(f"created {c.ledger_path} and {c.ledger_path.parent / 'patchset' / 'series'}/")
        for name, values in added.items():
            out.line(f"target {name}: {describe(values)}", indent="  ")
    return 0


@click.group(cls=SuggestingGroup)
def target() -> None:
    """Targets (the upstreams the series patches) without editing the ledger by hand."""


@target.command("add")
@click.argument("name")
@click.option(
    "--upstream",
    default=None,
    metavar="PATH|URL",
    help="Its upstream repository, a URL or a local clone (recorded; rebase and gate read a local one).",
)
@click.option("--github", default=None, metavar="OWNER/REPO", help="Its GitHub name (for status and fetch).")
@opt.package
@opt.layout("The layout build trees use.")
@opt.path_map("A path prefix in the patches and where it lives in an installed tree (repeatable).")
@opt.base("The upstream base the series applies to.")
@click.option("--no-preset", is_flag=True, help="Ignore the preset of a known name (vllm, flashinfer, nccl).")
@opt.json
@click.pass_obj
@guarded
def target_add(c: Ctx, name, upstream, github, package, layout, maps, base, no_preset, as_json) -> int:
    """Add [targets.NAME] to the ledger: a preset for vllm, flashinfer, nccl, else a generic target."""
    from patchset.commands.targets import add_targets, parse_maps
    from patchset.ledger.presets import describe, target_values

    given = {"upstream": upstream, "github": github, "package": package, "layout": layout, "base": base}
    values = target_values(name, {**given, "path_map": parse_maps(maps)}, preset=not no_preset)
    add_targets(c.ledger_path, {name: values})
    if as_json:
        emit_json({"target": name, "values": values})
    else:
        out.line(f"added target {name}: {describe(values)}")
    return 0


@target.command("set")
@click.argument("name")
@opt.base("The upstream base the series applies to (a spec, commit, dir).")
@click.option("--base-version", default=None, metavar="VERSION", help="The base's version (informational).")
@click.option(
    "--installed-root",
    default=None,
    metavar="PATH",
    help="Where the package is installed in the image (site-packages).",
)
@click.option("--base-image", default=None, metavar="IMAGE", help="The stock image the installed layout comes from.")
@opt.package
@opt.layout("The layout build trees use.")
@opt.path_map("Add or replace a path-map prefix (repeatable).")
@opt.json
@click.pass_obj
@guarded
def target_set(c: Ctx, name, base, base_version, installed_root, base_image, package, layout, maps, as_json) -> int:
    """Change [targets.NAME] without editing the ledger: base, installed root, base image, package, layout, map."""
    from patchset.commands.targets import parse_maps, set_target

    values = {
        "base": base,
        "base_version": base_version,
        "installed_root": installed_root,
        "base_image": base_image,
        "package": package,
        "layout": layout,
    }
    changed = set_target(c.ledger_path, name, values, parse_maps(maps))
    if as_json:
        emit_json({"target": name, "changed": changed})
    elif not changed:
        out.line(f"target {name}: nothing to change")
    else:
        for key, (old, new) in changed.items():
            out.line(f"target {name}: {key} = {new!r}" + (f" (was {old!r})" if old is not None else ""))
    return 0


@click.command("import")
@click.argument("sources", nargs=-1, type=click.Path(path_type=Path))
@opt.target("import into", "default: the only target; a build repository's folders name theirs")
@click.option(
    "--id",
    "patch_id",
    default=None,
    metavar="ID",
    help="The id of the one patch imported (default: from its file name).",
)
@opt.path(
    "--overlay",
    "Whole-file overlays mirrored at their site-packages paths: one patch per file (or per set).",
    metavar="DIR",
)
@opt.base(
    "The base overlays, scripts and diff names are read against (vllm==0.30.0); recorded when the target has none. "
    "A repository: `auto` records the newest release its diffs fit (`base find`)."
)
@opt.path("--base-tree", "The base as a directory (an unpacked release, a site-packages copy).", metavar="DIR")
@opt.path(
    "--manifest",
    "The overlay kit's MANIFEST.json (targets, checksums, sets, provenance, base_image).",
    metavar="FILE",
)
@click.option(
    "--script",
    default=None,
    metavar="'CMD … {root}/…'",
    help="An edit script as a generated patch (needs --id): run on a private copy of the base ({root}), its diff kept.",
)
@click.option(
    "--bind",
    default=None,
    metavar="PATH",
    help="--script: also mount the copy at PATH (for a script that hard-codes an install path).",
)
@click.option(
    "--strip",
    type=int,
    default=None,
    metavar="N",
    help="Read the diffs' file names with -pN (default: the reading that fits the base or the package).",
)
@click.option(
    "--root",
    default=None,
    metavar="DIR",
    help="The package directory the diffs' names start inside (b/v1/x.py for vllm/v1/x.py: --root vllm).",
)
@click.option(
    "--pr",
    "prs",
    multiple=True,
    metavar="N|OWNER/REPO#N|URL|FILE",
    help="An upstream PR to carry (repeatable, or a file listing them): recorded now, fetched by `patchset fetch`.",
)
@click.option("--revert", default=None, metavar="SHA", help="The reverse of an upstream commit, as a patch.")
@opt.upstream("--revert: the target's upstream when it is a local clone, else its release history")
@click.option(
    "--group",
    type=click.Choice(["file", "set"]),
    default="file",
    show_default=True,
    help="Overlays: one patch per file, or one per manifest set.",
)
@opt.dry_run("A repository: print the inventory of what it carries and what each becomes; write nothing.")
@opt.json
@click.pass_obj
@guarded
def import_(
    c: Ctx,
    sources: tuple[Path, ...],
    target: str | None,
    patch_id: str | None,
    overlay: Path | None,
    base: str | None,
    base_tree: Path | None,
    manifest: Path | None,
    script: str | None,
    bind: str | None,
    strip: int | None,
    root: str | None,
    prs: tuple[str, ...],
    revert: str | None,
    upstream: str | None,
    group: str,
    dry_run: bool,
    as_json: bool,
) -> int:
    """Import a quilt directory, patch files / format-patch mails, EXPECTED.sha256 files, or overlays.

    \b
    A build repository (per-target folders such as patches/vllm/*.patch, patches/flashinfer/*.patch,
    and an EXPECTED.sha256) is imported whole: missing targets are created (presets for vllm,
    flashinfer, nccl), each folder becomes that target's series in file order, and the expected
    hashes go into the lock under the target whose patches touch each file.

    \b
    Any other repository is surveyed first (bounded; .git, docs and images left out): every diff,
    recipe (a script applying diffs beside it), overlay candidate, edit script, PR list,
    submodule and fork is listed with what it becomes (a patch of target T) or why it is not
    imported, then its diffs are imported in one edit; --dry-run prints the inventory alone.

    \b
    --overlay DIR --target T (--base SPEC | --base-tree DIR) [--manifest FILE] [--group file|set]:
    each overlay file becomes the byte-exact diff from the base's stock file (a new-file patch
    where the base has none); the lock holds each overlay file's sha256.

    \b
    --script 'CMD … {root}/…' --id ID --target T --base SPEC: an anchored edit script run on a
    private copy of the base ({root}; {ledger} is the ledger directory); the files it changes
    become the body, the command is kept in [patch.generate] and run again by rebase.

    \b
    --pr N [--pr M …] (or --pr FILE): upstream PRs, recorded as not fetched (`patchset fetch`
    pins each to its head); --revert SHA [--upstream DIR]: the reverse of an upstream commit.
    """
    from patchset import errors
    from patchset.commands.importer import Naming, build_folders, import_build, import_sources, is_repository
    from patchset.commands.onboard.land import Onboarding

    modes = [m for m, v in (("--overlay", overlay), ("--script", script), ("--pr", prs), ("--revert", revert)) if v]
    if len(modes) > 1:
        raise errors.InputError(f"give one of {', '.join(modes)} per import")
    if upstream is not None and revert is None:
        raise errors.InputError("--upstream goes with --revert")
    if prs or revert:
        if sources or patch_id or base or base_tree or manifest or bind or strip is not None or root:
            raise errors.InputError(f"{modes[0]} takes only --target (and --upstream for --revert)")
        return _import_upstream(c, prs, revert, upstream, target, as_json)
    if (strip is not None or root is not None) and (overlay is not None or script is not None):
        raise errors.InputError("--strip and --root read the names of imported diffs: not with --overlay or --script")
    if overlay is not None:
        if bind is not None:
            raise errors.InputError("--bind goes with --script")
        return _import_overlay(c, sources, target, overlay, base, base_tree, manifest, group, as_json)
    if script is not None:
        if sources or manifest is not None:
            raise errors.InputError("--script runs one command; pass patch files or --manifest in another import")
        return _import_script(c, script, patch_id, target, base, base_tree, bind, as_json)
    if bind is not None:
        raise errors.InputError("--bind goes with --script")
    if manifest is not None:
        raise errors.InputError("--manifest goes with --overlay")
    if group != "file":
        raise errors.InputError("--group goes with --overlay")
    if not sources:
        raise errors.InputError(
            "nothing to import",
            hint="pass patch files, a quilt directory or a build repository; or --overlay DIR",
        )

    plain = patch_id is None and base is None and base_tree is None and strip is None and root is None
    folders = build_folders(sources[0]) if len(sources) == 1 and target is None and plain else None
    one_dir = len(sources) == 1 and sources[0].is_dir() and patch_id is None and strip is None and not root
    if one_dir and (dry_run or is_repository(sources[0], folders, set(c.load().targets))):
        ob = Onboarding(c.ledger_path, sources[0], target, base, base_tree, dry_run)
        return _import_repository(ob, as_json)
    if dry_run:
        raise errors.InputError("--dry-run surveys a repository: pass one directory")
    if folders:
        rep = import_build(c.ledger_path, sources[0], folders)
        if as_json:
            emit_json(rep.to_json())
        else:
            _print_build_import(rep)
        return 0
    res = import_sources(
        c.ledger_path, list(sources), target, patch_id, base=base, base_tree=base_tree, naming=Naming(strip, root)
    )
    if as_json:
        emit_json(res.to_json())
    else:
        out.line(f"added {len(res.added)}, updated {len(res.updated)}, unchanged {len(res.unchanged)}")
        for pid, how in res.inferred.items():
            out.line(f"{pid}: file names read as {how}", indent="  ")
        if res.recorded_base:
            out.line(f"target base recorded: {res.recorded_base}", indent="  ")
        for f, n in res.expected.items():
            out.line(f"expected hashes: {n} from {f}")
    return 0


def _import_repository(ob: Any, as_json: bool) -> int:  # ob: patchset.commands.onboard.land.Onboarding
    from patchset.commands.onboard.bases import fitting
    from patchset.commands.onboard.land import run

    run(ob)
    s = ob.survey
    if as_json:
        done = {**ob.result.to_json(), "overlays": [o.to_json() for o in ob.overlays], "base": ob.recorded_base}
        if ob.base_search is not None:
            done["base_search"] = ob.base_search.to_json()
        emit_json({**s.to_json(), "dry_run": ob.dry_run, **({} if ob.dry_run else done)})
        return 0
    out.line(
        f"repository {ob.repo}: {len(s.findings)} thing(s) found"
        + (" (dry run: nothing written)" if ob.dry_run else "")
    )
    for f in s.findings:
        out.line(f"{f.kind} {f.path}: {f.becomes()}", indent="  ")
        if f.note:
            out.line(f.note, indent="      ")
    if s.unread:
        out.line(f"{s.unread} file(s) past the survey's bounds were not read", indent="  ")
    for name in s.created:
        out.line(f"target {name}: {'would be ' if ob.dry_run else ''}created from its preset")
    counts = f"{len(s.imported)} patch(es), {len(s.overlays)} overlay folder(s), {len(s.refused)} file(s) refused"
    if ob.dry_run:
        out.line(f"would import {counts}")
        if not s.imported:
            out.line("no changes to vllm (or any target) found")
        return 0
    r = ob.result
    out.line(f"added {len(r.added)}, updated {len(r.updated)}, unchanged {len(r.unchanged)}; {counts}")
    if ob.base_search is not None:
        f = ob.base_search
        fit = ", ".join(fitting(f)) or "none"
        out.line(f"--base auto: checked {len(f.verdicts)} of {len(f.versions)} release(s); the series fits {fit}")
    if ob.recorded_base:
        out.line(f"target base recorded: {ob.recorded_base}", indent="  ")
    for rep in ob.overlays:
        _print_overlay_import(rep)
    return 0


def _import_overlay(
    c: Ctx,
    sources: tuple[Path, ...],
    target: str | None,
    overlay: Path,
    base: str | None,
    base_tree: Path | None,
    manifest: Path | None,
    group: str,
    as_json: bool,
) -> int:
    from patchset import errors
    from patchset.commands.overlay_import import import_overlay

    if sources:
        raise errors.InputError("--overlay imports a directory of overlay files; pass patch files in another import")
    if target is None:
        led = c.load()
        if len(led.targets) != 1:
            raise errors.InputError(
                "which target do these overlays belong to?",
                hint=f"pass --target NAME (one of: {', '.join(led.targets) or 'none: add one with `patchset target add`'})",
            )
        target = next(iter(led.targets))
    rep = import_overlay(c.ledger_path, overlay, target, base=base, base_tree=base_tree, manifest=manifest, group=group)
    if as_json:
        emit_json(rep.to_json())
        return 0
    _print_overlay_import(rep)
    return 0


def _import_upstream(
    c: Ctx, prs: tuple[str, ...], revert: str | None, upstream: str | None, target: str | None, as_json: bool
) -> int:
    from patchset.clicmds.rebasing import upstream_clone
    from patchset.commands.upstream_import import import_prs, import_revert

    if revert is not None:
        clone = upstream_clone(upstream, revert) if upstream is not None else None
        rep = import_revert(c.ledger_path, revert, target, Path(clone) if clone is not None else None)
        if as_json:
            emit_json(rep)
        else:
            out.line(
                f"{rep['id']} ({rep['target']}, {rep['outcome']}): the reverse of {rep['commit'][:12]} {rep['subject']}"
            )
            for f in rep["files"]:
                out.line(f"changes {f}", indent="  ")
        return 0
    res = import_prs(c.ledger_path, list(prs), target)
    if as_json:
        emit_json(res)
    else:
        out.line(f"target {res['target']}: added {len(res['added'])}, unchanged {len(res['unchanged'])}")
        for pid in res["not_fetched"]:
            out.line(f"{pid}: recorded, not fetched yet", indent="  ")
        if res["not_fetched"]:
            out.line("next: patchset fetch (pins each to its PR's head; needs GitHub)")
    return 0


def _import_script(
    c: Ctx,
    script: str,
    patch_id: str | None,
    target: str | None,
    base: str | None,
    base_tree: Path | None,
    bind: str | None,
    as_json: bool,
) -> int:
    import shlex

    from patchset.commands.script_import import import_script

    rep = import_script(c.ledger_path, script, patch_id, target, base=base, base_tree=base_tree, bind=bind)
    if as_json:
        emit_json(rep.to_json())
        return 0
    out.line(f"{rep.id} ({rep.target}, {rep.outcome}): generated on {rep.base} by {shlex.join(rep.command)}")
    if rep.recorded_base:
        out.line(f"target {rep.target}: recorded base = {rep.recorded_base}", indent="  ")
    if rep.script:
        out.line(f"script {rep.script} (sha256 {rep.script_sha256[:12]}… in the lock)", indent="  ")
    for f in rep.files:
        how = " (new file)" if f in rep.new_files else " (deleted)" if f in rep.deleted else ""
        out.line(f"changes {f}{how}", indent="  ")
    if rep.ignored:
        out.line(f"left out of the diff: {len(rep.ignored)} bytecode file(s)", indent="  ")
    for n in rep.notes:
        out.line(f"note: {n}", indent="  ")
    return 0


def _print_overlay_import(rep: Any) -> None:  # rep: patchset.commands.overlay_import.OverlayReport
    out.line(
        f"overlay {rep.overlay}: {rep.files} file(s) in {len(rep.patches)} patch(es)"
        + (f", against {', '.join(f'{t} {b}' for t, b in rep.base.items())}" if rep.base else "")
    )
    for t, values in rep.recorded.items():
        out.line(f"target {t}: recorded " + ", ".join(f"{k} = {v}" for k, v in values.items()), indent="  ")
    for pid, files in rep.patches.items():
        how = "added" if pid in rep.added else "updated" if pid in rep.updated else "unchanged"
        new = [f for f in files if f in rep.new_files]
        out.line(
            f"{pid} ({rep.targets[pid]}, {how}): {', '.join(files)}"
            + (f"; new file(s): {', '.join(new)}" if new else ""),
            indent="  ",
        )
    out.line(f"added {len(rep.added)}, updated {len(rep.updated)}, unchanged {len(rep.unchanged)}")
    for f in rep.identical:
        out.line(f"identical to the base, nothing to carry: {f}", indent="  ")
    for m in rep.checksums:
        out.line(
            f"checksum mismatch: {m['file']}: the manifest's {m['algorithm']} is {m['manifest']}, the file's is "
            f"{m['actual']} (the file was imported)",
            indent="  ",
        )
    for s in rep.skipped:
        out.line(f"skipped {s['file']}: {s['reason']}", indent="  ")
    for m in rep.missing:
        out.line(f"in the manifest ({m['entry']}) but not in the overlay: {m['file']}", indent="  ")
    for f in rep.not_in_manifest:
        out.line(f"not in the manifest (imported by its path in the overlay): {f}", indent="  ")
    for n in rep.notes:
        out.line(f"note: {n}", indent="  ")
    if rep.patches:
        out.line("next: patchset apply --from-index SPEC --into DIR (reproduces every overlay file), or rebase --onto")


def _print_build_import(rep: Any) -> None:  # rep: patchset.commands.importer.BuildImport
    from patchset.ledger.presets import describe

    out.line(f"build repository {rep.source}: {len(rep.folders)} target folder(s)")
    for name, folder in rep.folders.items():
        how = (
            ("created from its preset" if name in rep.preset else "created (generic)")
            if name in rep.created
            else "already in the ledger"
        )
        out.line(
            f"target {name} ({folder}): {how}" + (f": {describe(rep.created[name])}" if name in rep.created else "")
        )
        ids = rep.patches.get(name, [])
        out.line(f"{len(ids)} patch(es) in file order: {', '.join(ids)}", indent="  ")
    r = rep.result
    out.line(f"added {len(r.added)}, updated {len(r.updated)}, unchanged {len(r.unchanged)}")
    for pid, how in r.inferred.items():
        out.line(f"{pid}: file names read as {how}", indent="  ")
    for f, counts in rep.expected.items():
        per = ", ".join(f"{n} for {t}" for t, n in counts.items()) or "none matched"
        out.line(f"expected hashes from {f}: {per}")
        for p in rep.unmatched.get(f, []):
            out.line(f"not touched by any patch (left out of the lock): {p}", indent="  ")
    out.line("next: patchset apply --from-index PROJECT==VERSION [--from-index …] --into DIR (or --tree NAME=DIR)")


@click.command()
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["quilt", "mbox", "expected"]),
    required=True,
    help="quilt (series + patches), mbox (for git am) or expected (EXPECTED.sha256).",
)
@opt.target("export", "default: every target")
@click.argument("dest", type=click.Path(file_okay=False, path_type=Path))
@opt.json
@click.pass_obj
@guarded
def export(c: Ctx, fmt: str, target: str | None, dest: Path, as_json: bool) -> int:
    """Export the active series as quilt (series + patches), an mbox for git am, or EXPECTED.sha256."""
    from patchset.commands.exporter import export as do_export

    written = do_export(c.load(), fmt, dest, target)
    if as_json:
        emit_json({"dest": str(dest), "format": fmt, "written": written})
    else:
        for t, names in written.items():
            out.line(f"{t}: {len(names)} entries written to {dest}")
    return 0


@click.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@opt.target("audit", "default: every target")
@opt.json
@click.pass_obj
@guarded
def audit(c: Ctx, directory: Path, target: str | None, as_json: bool) -> int:
    """Hold the ledger against a directory of real bodies, series and EXPECTED.sha256 files (reads only); exit 1 on a disagreement."""
    from patchset.commands.audit import audit as do_audit

    rep = do_audit(c.load(), directory, target)
    if as_json:
        emit_json(rep.to_json())
    else:
        for line in rep.lines():
            out.line(line)
        out.line(f"{len(rep.matched)} bodies matched, {len(rep.findings)} finding(s)")
    return 0 if rep.ok else 1

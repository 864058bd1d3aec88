"""CLI commands: ledger set-up: init, target add, import, export, audit."""

from __future__ import annotations

from collections.abc import Callable
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
@opt.value(
    "--upstream",
    "PATH|URL",
    "Its upstream repository, a URL or a local clone (recorded; rebase and gate read a local one).",
)
@opt.value("--github", "OWNER/REPO", "Its GitHub name (for status and fetch).")
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
@opt.value("--base-version", "VERSION", "The base's version (informational).")
@opt.value("--installed-root", "PATH", "Where the package is installed in the image (site-packages).")
@opt.value("--base-image", "IMAGE", "The stock image the installed layout comes from.")
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
@opt.value("--id", "ID", "The id of the one patch imported (default: from its file name).", dest="patch_id")
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
@opt.value(
    "--script",
    "'CMD … {root}/…'",
    "An edit script as a generated patch (needs --id): run on a private copy of the base ({root}), its diff kept.",
)
@opt.value("--bind", "PATH", "--script: also mount the copy at PATH (for a script that hard-codes an install path).")
@click.option(
    "--keep-diff",
    is_flag=True,
    help="--script: keep the diff when the command fails after its edit (a smoke test, an install).",
)
@opt.value(
    "--strip",
    "N",
    "Read the diffs' file names with -pN (default: the reading that fits the base or the package).",
    type=int,
)
@opt.value(
    "--root", "DIR", "The package directory the diffs' names start inside (b/v1/x.py for vllm/v1/x.py: --root vllm)."
)
@click.option(
    "--pr",
    "prs",
    multiple=True,
    metavar="N|OWNER/REPO#N|URL|FILE",
    help="An upstream PR to carry (repeatable, or a file listing them): recorded now, fetched by `patchset fetch`.",
)
@opt.value("--revert", "SHA", "The reverse of an upstream commit, as a patch.")
@opt.value(
    "--fork",
    "URL@SHA",
    "A fork at a commit: its commits above the merge base with --upstream (default: the target's) as patches.",
)
@opt.upstream(
    "--revert: the target's upstream when it is a local clone, else its release history; --fork: the target's"
)
@opt.choice("--group", ["file", "set"], "Overlays: one patch per file, or one per manifest set.", default="file")
@opt.dry_run("A repository: print the inventory of what it carries and what each becomes; write nothing.")
@opt.json
@click.pass_obj
@guarded
def import_(c: Ctx, as_json: bool, **given: Any) -> int:
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
    --fork URL@SHA [--upstream CLONE]: a fork at a commit, its commits above the merge base with
    upstream as patches (one per commit, limited to the target's package).

    \b
    --pr N [--pr M …] (or --pr FILE): upstream PRs, recorded as not fetched (`patchset fetch`
    pins each to its head); --revert SHA [--upstream DIR]: the reverse of an upstream commit.
    """
    from patchset.clicmds.rebasing import upstream_clone
    from patchset.commands.onboard.request import ImportRequest, Mode, run

    req = ImportRequest(**given)
    mode = req.mode(c.ledger_path)
    if mode is Mode.UPSTREAM and req.revert is not None and req.upstream is not None:
        req.upstream = str(upstream_clone(req.upstream, req.revert))
    rep = run(c.ledger_path, req, mode)
    if as_json:
        emit_json(rep if isinstance(rep, dict) else rep.to_json())
    else:
        PRINTERS[mode.name](rep)
    return 0


def _print_repository(ob: Any) -> None:  # ob: patchset.commands.onboard.land.Onboarding
    from patchset.commands.onboard.bases import fitting

    s = ob.survey
    dry = " (dry run: nothing written)" if ob.dry_run else ""
    out.line(f"repository {ob.repo}: {len(s.findings)} thing(s) found{dry}")
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
        return
    out.line(f"{_counts(ob.result)}; {counts}")
    if ob.base_search is not None:
        f = ob.base_search
        fit = ", ".join(fitting(f)) or "none"
        out.line(f"--base auto: checked {len(f.verdicts)} of {len(f.versions)} release(s); the series fits {fit}")
    if ob.recorded_base:
        out.line(f"target base recorded: {ob.recorded_base}", indent="  ")
    for rep in ob.overlays:
        _print_overlay(rep)


def _counts(rep: Any) -> str:
    return f"added {len(rep.added)}, updated {len(rep.updated)}, unchanged {len(rep.unchanged)}"


def _print_sources(res: Any) -> None:  # res: patchset.commands.importer.ImportResult
    out.line(_counts(res))
    for pid, how in res.inferred.items():
        out.line(f"{pid}: file names read as {how}", indent="  ")
    if res.recorded_base:
        out.line(f"target base recorded: {res.recorded_base}", indent="  ")
    for f, n in res.expected.items():
        out.line(f"expected hashes: {n} from {f}")


def _print_upstream(rep: dict[str, Any]) -> None:
    if "commit" in rep:  # a revert
        out.line(
            f"{rep['id']} ({rep['target']}, {rep['outcome']}): the reverse of {rep['commit'][:12]} {rep['subject']}"
        )
        for f in rep["files"]:
            out.line(f"changes {f}", indent="  ")
        return
    out.line(f"target {rep['target']}: added {len(rep['added'])}, unchanged {len(rep['unchanged'])}")
    for pid in rep["not_fetched"]:
        out.line(f"{pid}: recorded, not fetched yet", indent="  ")
    if rep["not_fetched"]:
        out.line("next: patchset fetch (pins each to its PR's head; needs GitHub)")


def _print_fork(fi: Any) -> None:  # fi: patchset.commands.onboard.fork.ForkImport
    out.line(f"fork {fi.url} at {fi.sha[:12]}: {len(fi.commits)} commit(s) above {fi.merge_base[:12]} of {fi.upstream}")
    for c in fi.commits:
        out.line(c, indent="  ")
    _print_sources(fi.result)
    if fi.outside:
        shown = ", ".join(fi.outside[:5]) + (", …" if len(fi.outside) > 5 else "")
        out.line(f"not in the package, not imported: {len(fi.outside)} file(s) ({shown})", indent="  ")
    if not fi.result.recorded_base:
        out.line("next: patchset base find (the releases the imported series fits)")


def _print_script(rep: Any) -> None:  # rep: patchset.commands.script_import.ScriptReport
    import shlex

    out.line(f"{rep.id} ({rep.target}, {rep.outcome}): generated on {rep.base} by {shlex.join(rep.command)}")
    if rep.recorded_base:
        out.line(f"target {rep.target}: recorded base = {rep.recorded_base}", indent="  ")
    if rep.script:
        out.line(f"script {rep.script} (sha256 {rep.script_sha256[:12]}… in the lock)", indent="  ")
    for f in rep.files:
        how = " (new file)" if f in rep.new_files else " (deleted)" if f in rep.deleted else ""
        out.line(f"changes {f}{how}", indent="  ")
    if rep.ignored:
        out.line(f"left out of the diff: {len(rep.ignored)} bytecode or .orig backup file(s)", indent="  ")
    for n in rep.notes:
        out.line(f"note: {n}", indent="  ")


def _print_overlay(rep: Any) -> None:  # rep: patchset.commands.overlay_import.OverlayReport
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
    out.line(_counts(rep))
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


def _print_build(built: Any) -> None:  # built: patchset.commands.onboard.request.BuildOnly
    from patchset.ledger.presets import describe

    rep = built.report

    out.line(f"build repository {rep.source}: {len(rep.folders)} target folder(s)")
    for name, folder in rep.folders.items():
        how = "already in the ledger"
        if name in rep.created:
            how = "created from its preset" if name in rep.preset else "created (generic)"
            how += f": {describe(rep.created[name])}"
        out.line(f"target {name} ({folder}): {how}")
        ids = rep.patches.get(name, [])
        out.line(f"{len(ids)} patch(es) in file order: {', '.join(ids)}", indent="  ")
    _print_sources(rep.result)  # (its own expected hashes are the build's, below)
    for f, counts in rep.expected.items():
        per = ", ".join(f"{n} for {t}" for t, n in counts.items()) or "none matched"
        out.line(f"expected hashes from {f}: {per}")
        for p in rep.unmatched.get(f, []):
            out.line(f"not touched by any patch (left out of the lock): {p}", indent="  ")
    if built.not_surveyed:
        shown = ", ".join(built.not_surveyed[:4]) + (", …" if len(built.not_surveyed) > 4 else "")
        out.line(
            f"not surveyed: {len(built.not_surveyed)} file(s) beside the target folders ({shown}): the folders "
            f"name what this repository carries; `patchset import {rep.source} --dry-run` lists what the rest holds"
        )
    out.line("next: patchset apply --from-index PROJECT==VERSION [--from-index …] --into DIR (or --tree NAME=DIR)")


PRINTERS: dict[str, Callable[[Any], None]] = {  # by the name of the import's mode (onboard.request.Mode)
    "UPSTREAM": _print_upstream,
    "OVERLAY": _print_overlay,
    "SCRIPT": _print_script,
    "FORK": _print_fork,
    "REPOSITORY": _print_repository,
    "BUILD": _print_build,
    "SOURCES": _print_sources,
}


@click.command()
@opt.choice(
    "--format",
    ["quilt", "mbox", "expected"],
    "quilt (series + patches), mbox (for git am) or expected (EXPECTED.sha256).",
    dest="fmt",
    required=True,
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

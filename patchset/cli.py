"""patchset's command line: parse arguments, call the packages, print the result.

Exit codes (every command): 0 ok; 1 a finding (a patch that fails, a check that fails, a hash
mismatch, a regression); 2 bad input or environment (malformed ledger, missing file, network).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from patchset import __version__, errors
from patchset.commands.table import Styled, Term
from patchset.text import split_list

out = Term()  # replaced at each invocation (main), so it sees the stdout of that run


@dataclass
class Ctx:
    directory: Path
    ledger_arg: Path | None

    @property
    def ledger_path(self) -> Path:
        from patchset.ledger import store as ledger_mod

        return ledger_mod.find_ledger(self.directory, self.ledger_arg)

    def load(self):  # -> Ledger
        from patchset.ledger import store as ledger_mod

        return ledger_mod.load_ledger(self.ledger_path)


def _one_of(names: Any) -> str:
    names = list(names)
    return f"one of: {', '.join(names)}" if names else "the ledger has no targets yet (`patchset target add NAME`)"


def emit_json(data: Any) -> None:
    import json

    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


def guarded(fn: Callable[..., int | None]) -> Callable[..., None]:
    """Run a command body; map domain errors to their exit codes, never a traceback."""

    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            code = fn(*args, **kwargs) or 0
        except errors.PatchsetError as exc:
            click.echo(f"error: {exc.render()}", err=True)
            code = exc.exit_code
        except BrokenPipeError:  # `patchset list | head`: the reader left; say nothing
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            code = 0
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            code = 130
        except OSError as exc:
            click.echo(f"error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), err=True)
            code = errors.EXIT_INPUT
        except Exception as exc:
            if os.environ.get("PATCHSET_DEBUG"):
                raise
            click.echo(
                f"error: internal error: {type(exc).__name__}: {exc} (set PATCHSET_DEBUG=1 for a traceback)", err=True
            )
            code = errors.EXIT_INPUT
        sys.exit(code)

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


json_opt = click.option("--json", "as_json", is_flag=True, help="Machine-readable output on stdout.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "-C",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Run as if started in DIR (the ledger is DIR/patches.toml).",
)
@click.option(
    "--ledger",
    "ledger_arg",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The ledger file (default: patches.toml in the current directory).",
)
@click.version_option(version=__version__, package_name="patchset")
@click.pass_context
def main(ctx: click.Context, directory: Path | None, ledger_arg: Path | None) -> None:
    """patchset: a ledger, apply engine, rebaser and CI gate for downstream patch series.

    \b
    Exit codes: 0 ok, 1 a finding (failed patch/check, hash mismatch), 2 bad input or environment.
    """
    global out
    out = Term()
    if directory is not None:
        try:
            os.chdir(directory)  # "as if started in DIR": relative paths on the command line resolve there
        except OSError as exc:
            raise click.BadParameter(f"cannot enter {directory}: {exc.strerror}", param_hint="-C") from None
    ctx.obj = Ctx(directory=Path.cwd(), ledger_arg=ledger_arg)


# --------------------------------------------------------------------------- init / import / export


@main.command()
@click.option("--title", default="", help="A title for the ledger.")
@click.option(
    "--target",
    "targets",
    multiple=True,
    metavar="NAME",
    help="Add a target (repeatable): vllm, flashinfer and nccl come with presets; any other name is generic.",
)
@json_opt
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


@main.group()
def target() -> None:
    """Targets (the upstreams the series patches) without editing the ledger by hand."""


@target.command("add")
@click.argument("name")
@click.option("--upstream", default=None, metavar="URL", help="The upstream repository URL.")
@click.option("--github", default=None, metavar="OWNER/REPO", help="Its GitHub name (for status and fetch).")
@click.option("--package", default=None, metavar="P", help="Its name on the package index (for --from-index).")
@click.option("--layout", type=click.Choice(["source", "installed"]), default=None, help="The layout build trees use.")
@click.option(
    "--map",
    "maps",
    multiple=True,
    metavar="SRC=DST",
    help="A path prefix in the patches and where it lives in an installed tree (repeatable).",
)
@click.option("--base", default=None, metavar="B", help="The upstream base the series applies to.")
@click.option("--no-preset", is_flag=True, help="Ignore the preset of a known name (vllm, flashinfer, nccl).")
@json_opt
@click.pass_obj
@guarded
def target_add(c: Ctx, name, upstream, github, package, layout, maps, base, no_preset, as_json) -> int:
    """Add [targets.NAME] to the ledger: a preset for vllm, flashinfer, nccl, else a generic target."""
    from patchset.commands.targets import add_targets, parse_maps
    from patchset.ledger.presets import describe, target_values

    values = target_values(
        name,
        upstream=upstream,
        github=github,
        package=package,
        layout=layout,
        maps=parse_maps(maps),
        base=base,
        preset=not no_preset,
    )
    add_targets(c.ledger_path, {name: values})
    if as_json:
        emit_json({"target": name, "values": values})
    else:
        out.line(f"added target {name}: {describe(values)}")
    return 0


@main.command("import")
@click.argument("sources", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--target", default=None, help="The target these patches belong to.")
@json_opt
@click.pass_obj
@guarded
def import_(c: Ctx, sources: tuple[Path, ...], target: str | None, as_json: bool) -> int:
    """Import a quilt directory, patch files / format-patch mails, or EXPECTED.sha256 files.

    \b
    A build repository (per-target folders such as patches/vllm/*.patch, patches/flashinfer/*.patch,
    and an EXPECTED.sha256) is imported whole: missing targets are created (presets for vllm,
    flashinfer, nccl), each folder becomes that target's series in file order, and the expected
    hashes go into the lock under the target whose patches touch each file.
    """
    from patchset.commands.importer import build_folders, import_build, import_sources

    folders = build_folders(sources[0]) if len(sources) == 1 and target is None else None
    if folders:
        rep = import_build(c.ledger_path, sources[0], folders)
        if as_json:
            emit_json(rep.to_json())
        else:
            _print_build_import(rep)
        return 0
    res = import_sources(c.ledger_path, list(sources), target)
    if as_json:
        emit_json(res.to_json())
    else:
        out.line(f"added {len(res.added)}, updated {len(res.updated)}, unchanged {len(res.unchanged)}")
        for f, n in res.expected.items():
            out.line(f"expected hashes: {n} from {f}")
    return 0


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
    for f, counts in rep.expected.items():
        per = ", ".join(f"{n} for {t}" for t, n in counts.items()) or "none matched"
        out.line(f"expected hashes from {f}: {per}")
        for p in rep.unmatched.get(f, []):
            out.line(f"not touched by any patch (left out of the lock): {p}", indent="  ")
    out.line("next: patchset apply --from-index PROJECT==VERSION [--from-index …] --into DIR (or --tree NAME=DIR)")


@main.command()
@click.option("--format", "fmt", type=click.Choice(["quilt", "mbox", "expected"]), required=True)
@click.option("--target", default=None, help="Export one target only.")
@click.argument("dest", type=click.Path(file_okay=False, path_type=Path))
@json_opt
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


# --------------------------------------------------------------------------- inspection


@main.command()
@json_opt
@click.pass_obj
@guarded
def validate(c: Ctx, as_json: bool) -> int:
    """Check the ledger against its bodies and lock; exit 1 on a problem."""
    from patchset.commands.inspection import validate as do_validate

    rep = do_validate(c.load())
    if as_json:
        emit_json(rep.to_json())
        return 0 if rep.ok else 1
    from patchset.commands.views import render_validate

    render_validate(out, rep)
    return 0 if rep.ok else 1


@main.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--target", default=None, help="Audit one target only.")
@json_opt
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


@main.command("list")
@click.option("--target", default=None)
@click.option("--state", "states", multiple=True, type=click.Choice(["active", "held", "dropped"]))
@json_opt
@click.pass_obj
@guarded
def list_(c: Ctx, target: str | None, states: tuple[str, ...], as_json: bool) -> int:
    """The series as a table: order, id, target, origin, PR and state, files."""
    from patchset.commands.inspection import list_rows

    rows = list_rows(c.load(), target, states or None)
    if as_json:
        emit_json(rows)
        return 0
    from patchset.commands.views import render_list

    render_list(out, rows)
    return 0


@main.command()
@click.argument("patch_id")
@json_opt
@click.pass_obj
@guarded
def show(c: Ctx, patch_id: str, as_json: bool) -> int:
    """Everything about one patch, with its diffstat."""
    from patchset.commands.inspection import show as do_show

    data = do_show(c.load(), patch_id)
    if as_json:
        emit_json(data)
        return 0
    from patchset.commands.views import render_show

    render_show(out, data)
    return 0


# --------------------------------------------------------------------------- apply


def _progress_bar():  # -> patchset.commands.progressbar.Bars
    """Bars on stderr when it is a terminal (``bars.callback(label)`` is the one adapter from the
    packages' ``progress(what, done, total)``); otherwise no bar, and rich is never imported."""
    from patchset.commands.progressbar import Bars

    return Bars()


def deprecated_alias(old: str, new: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A callback for a hidden option kept under its old name: warns, then stands for ``new``."""

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value not in (None, (), False):
            click.echo(f"warning: {old} is deprecated; use {new}", err=True)
        return value

    return callback


@main.command()
@click.option(
    "--tree",
    "trees",
    multiple=True,
    metavar="[NAME=]DIR",
    help="A plain directory (e.g. a site-packages copy), located through the target's path map.",
)
@click.option(
    "--repo", "repos", multiple=True, metavar="[NAME=]DIR", help="A git checkout: one commit per patch on a new branch."
)
@click.option(
    "--from-index",
    "specs",
    multiple=True,
    metavar="[NAME=]SPEC",
    help="A release from the package index, e.g. vllm==0.30.0 (downloaded once, cached).",
)
@click.option("--into", "intos", multiple=True, metavar="[NAME=]DIR", help="Where --from-index unpacks the tree.")
@click.option("--target", default=None, help="Restrict the run to one target.")
@click.option(
    "--layout",
    type=click.Choice(["source", "installed"]),
    default=None,
    help="Layout of the tree (default: the target's ledger entry).",
)
@click.option("--branch", default="", help="Branch for --repo (default patchset/<target>).")
@click.option("--fuzz", type=int, default=0, show_default=True, help="Allow fuzz (recorded in the report).")
@click.option("--update-lock", is_flag=True, help="Record the resulting file hashes in the lock.")
@click.option("--dry-run", is_flag=True, help="Check that everything applies and matches; write nothing.")
@click.option(
    "--skip-applied", is_flag=True, help="On a --tree that carries part of the series, apply only the missing patches."
)
@click.option(
    "--remove-empty",
    is_flag=True,
    help="Remove files a patch leaves empty (GNU patch -E, as dpkg-source applies); --tree and --from-index.",
)
@click.option(
    "--durable",
    is_flag=True,
    default=None,
    help="fsync every step so the apply also survives a power cut (default: $PATCHSET_FSYNC; "
    "a kill or Ctrl-C is always safe).",
)
@json_opt
@click.pass_obj
@guarded
def apply(
    c: Ctx,
    trees,
    repos,
    specs,
    intos,
    target,
    layout,
    branch,
    fuzz,
    update_lock,
    dry_run,
    skip_applied,
    remove_empty,
    durable,
    as_json,
) -> int:
    """Apply the series to build trees: zero fuzz, atomic, byte-checked against the lock.

    \b
    Exit 0: applied (or the tree already carries the series); 1: a patch fails, the tree carries
    part of the series, or a file would not match the lock (nothing is written in each case);
    2: bad input or environment.
    """
    from patchset.commands.apply import TreeArg, parse_tree_args
    from patchset.commands.apply import run as run_apply

    led = c.load()
    names = [target] if target else [t for t in led.targets if led.series(t)]
    if target and target not in led.targets:
        raise errors.InputError(f"unknown target {target!r}", hint=_one_of(led.targets))
    if not names:
        raise errors.InputError(
            f"{c.ledger_path} has no active patches to apply",
            hint="bring patches in with `patchset import DIR` (a folder of .patch files, a quilt series)",
        )
    chosen: dict[str, TreeArg] = {}
    for kind, values in (("tree", trees), ("repo", repos)):
        for name, value in parse_tree_args(values, kind, names).items():
            path = Path(value).resolve()
            if not path.is_dir():
                raise errors.InputError(
                    f"--{kind} {value}: {path} is not a directory",
                    hint=f"relative paths are taken from {Path.cwd()}" if not Path(value).is_absolute() else "",
                )
            chosen[name] = TreeArg(kind, path, layout=layout or "", branch=branch)
    spec_map = parse_tree_args(_name_specs(specs, led, names), "from-index", names)
    if len(intos) == 1 and len(spec_map) > 1 and intos[0].partition("=")[0] not in names:
        into_map = {name: str(Path(intos[0]) / name) for name in spec_map}  # one --into: DIR/<target> each
    else:
        into_map = parse_tree_args(intos, "into", names)
    for name, spec in spec_map.items():
        if name not in into_map:
            raise errors.InputError(f"--from-index {spec} needs --into DIR (where the patched tree goes)")
        chosen[name] = TreeArg("index", Path(into_map[name]).resolve(), spec=spec, layout=layout or "")
    if not chosen:
        raise errors.InputError(
            "no build tree given", hint="pass --tree DIR, --repo DIR or --from-index SPEC --into DIR"
        )
    with _progress_bar() as bar:
        progress = bar.callback("apply")
        reports = run_apply(
            led,
            chosen,
            fuzz=fuzz,
            update_lock=update_lock,
            dry_run=dry_run,
            progress=progress,
            download_progress=bar.callback("", unit="bytes"),
            skip_applied=skip_applied,
            remove_empty=remove_empty,
            durable=durable or None,
        )
    if as_json:
        emit_json({"ok": all(r.ok for r in reports), "targets": [r.to_json() for r in reports]})
    else:
        from patchset.commands.views import render_apply

        render_apply(out, reports)
    return 0 if all(r.ok for r in reports) else 1


@main.command()
@click.option(
    "--tree",
    "trees",
    multiple=True,
    metavar="DIR",
    type=click.Path(file_okay=False, path_type=Path),
    help="A tree an apply was interrupted in (default: the trees the ledger names, else the current directory).",
)
@click.option(
    "--back", is_flag=True, help="Undo the interrupted apply (put the old files back) instead of finishing it."
)
@json_opt
@click.pass_obj
@guarded
def recover(c: Ctx, trees: tuple[Path, ...], back: bool, as_json: bool) -> int:
    """Finish (or with --back undo) an apply that was interrupted (kill -9, power loss)."""
    from patchset.commands.apply import recover_trees

    done = recover_trees([t.resolve() for t in trees], c.ledger_path, back=back)
    if as_json:
        emit_json(done)
    else:
        for d in done:
            out.line(f"{d['tree']}: {d['done']}")
    return 0


# --------------------------------------------------------------------------- rebase


@main.command()
@click.option(
    "--onto", default=None, metavar="REF", help="A commit, tag, branch (main), a release (vllm==0.31.0) or a directory."
)
@click.option("--target", default=None, help="The target to rebase (needed when several have patches).")
@click.option(
    "--upstream",
    "upstream",
    type=click.Path(path_type=Path),
    default=None,
    metavar="PATH",
    help="A local upstream clone holding both bases (default: the cached release history).",
)
@click.option(
    "--repo",
    "old_repo",
    type=click.Path(path_type=Path),
    default=None,
    hidden=True,
    callback=deprecated_alias("rebase --repo", "--upstream (--repo names a build checkout in apply)"),
)
@click.option("--interactive", is_flag=True, help="Stop at a conflict with the conflicted files written out.")
@click.option("--dry-run", is_flag=True, help="Classify every patch; write nothing.")
@click.option("--continue", "cont", is_flag=True, help="Resume after resolving a conflict.")
@click.option("--skip", "skip_", is_flag=True, help="Set the conflicting patch aside (held) and go on.")
@click.option("--abort", "abort_", is_flag=True, help="Restore the ledger, series and lock byte for byte.")
@click.option("--no-range-diff", is_flag=True, help="Do not print per-patch range-diffs.")
@json_opt
@click.pass_obj
@guarded
def rebase(
    c: Ctx, onto, target, upstream, old_repo, interactive, dry_run, cont, skip_, abort_, no_range_diff, as_json
) -> int:
    """Carry the series onto a newer upstream: in-memory 3-way replay, drops what landed upstream.

    \b
    Every patch is classified: carried (clean / offset / merged / moved), already upstream,
    superseded (a port whose PR merged), or conflict (files, hunks, and the upstream commits that
    changed those lines). Without --interactive a conflict is reported and nothing is written.
    Exit 0 done or a clean dry run; 1 conflicts or stopped at a conflict; 2 bad input.
    """
    from patchset.rebase import session as rb

    modes = sum(bool(x) for x in (onto, cont, skip_, abort_))
    if modes != 1:
        raise errors.InputError("give exactly one of --onto REF, --continue, --skip, --abort")
    if abort_:
        res = rb.abort(c.ledger_path)
        if as_json:
            emit_json(res.to_json())
        else:
            out.line("rebase aborted: ledger, series and lock restored" if res.restored else "nothing to abort")
        return 0
    with _progress_bar() as bar:
        progress = bar.callback("rebase")
        if cont:
            report = rb.continue_rebase(c.ledger_path, progress=progress)
        elif skip_:
            report = rb.skip(c.ledger_path, progress=progress)
        else:
            report = rb.rebase(
                c.ledger_path,
                onto,
                target=target,
                repo=upstream or old_repo,
                interactive=interactive,
                dry_run=dry_run,
                progress=progress,
                download_progress=bar.callback("", unit="bytes"),
            )
    if as_json:
        emit_json(report.to_json())
    else:
        from patchset.commands.rebase_view import render_rebase

        render_rebase(out, report, range_diffs=not no_range_diff)
    return 0 if report.ok else 1


# --------------------------------------------------------------------------- status / fetch


@main.command()
@click.option("--refresh", is_flag=True, help="Ask GitHub now and record the new states in the ledger.")
@click.option("--offline", is_flag=True, help="Never touch the network; say how old the data is.")
@click.option("--markdown", is_flag=True, help="A markdown table (to paste in a README or an issue).")
@click.option(
    "--html",
    "html_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write one static, sortable HTML page.",
)
@json_opt
@click.pass_obj
@guarded
def status(c: Ctx, refresh: bool, offline: bool, markdown: bool, html_file: Path | None, as_json: bool) -> int:
    """The dashboard of upstream merges: PR state per patch and what to do about it.

    \b
    Without --refresh it shows the cached or recorded state (no network). A token comes from
    GITHUB_TOKEN or `gh auth token`; the API from PATCHSET_GITHUB_API (default api.github.com).
    Exit 0; 2 when some rows could not be read (they are still shown, marked).
    """
    from patchset.tracker.status import make_client
    from patchset.tracker.status import status as do_status

    client = make_client(offline) if refresh else None
    report = do_status(c.ledger_path, refresh=refresh, offline=offline, client=client)
    if html_file is not None:
        from patchset.tracker.html import write_html

        write_html(report, html_file)
        if not as_json and not markdown:
            out.line(f"wrote {html_file}")
    if as_json:
        emit_json(report.to_json())
    elif markdown:
        from patchset.tracker.views import to_markdown

        click.echo(to_markdown(report))
    elif html_file is None:
        from patchset.tracker.views import render_status

        render_status(out, report)
    return report.exit_code


@main.command()
@click.argument("ids", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="Every patch with a source.")
@click.option("--check", is_flag=True, help="Has upstream moved since each body was pinned? (writes nothing)")
@click.option("--update", "update_id", default=None, metavar="ID", help="Take the new upstream revision of ID.")
@click.option("--offline", is_flag=True, help="Use only what is stored.")
@json_opt
@click.pass_obj
@guarded
def fetch(
    c: Ctx, ids: tuple[str, ...], all_: bool, check: bool, update_id: str | None, offline: bool, as_json: bool
) -> int:
    """Download patch bodies from their pinned sources (PRs, commits, files, URLs) into the series.

    \b
    Exit 0 ok; 1 a source changed or a download was refused (nothing stored); 2 a source could not
    be reached (nothing stored).
    """
    from patchset.commands import fetch as fetch_mod
    from patchset.tracker import views
    from patchset.tracker.status import make_client

    rep: fetch_mod.CheckReport | fetch_mod.FetchReport
    if check:
        rep = fetch_mod.check(c.ledger_path, ids, offline=offline, connect=make_client)
        render = views.render_check
    elif update_id:
        rep = fetch_mod.update(c.ledger_path, update_id, connect=make_client)
        render = views.render_fetch
    else:
        rep = fetch_mod.fetch(c.ledger_path, ids, all_=all_, offline=offline, connect=make_client)
        render = views.render_fetch
    if as_json:
        emit_json(rep.to_json())
    else:
        render(out, rep)
    return rep.exit_code


# --------------------------------------------------------------------------- verify


@main.command()
@click.option("--tags", "tags", multiple=True, metavar="TAG[,TAG]", help="Run only tests carrying one of these tags.")
@click.option(
    "--tree",
    "tree_arg",
    default=None,
    metavar="[NAME=]DIR",
    help="A pristine build tree, as in apply (verify works on private copies; never modified).",
)
@click.option(
    "--from-index",
    "spec_arg",
    default=None,
    metavar="[NAME=]SPEC",
    help="A release from the package index, as in apply, e.g. vllm==0.30.0 (default: the target's base).",
)
@click.option("--target", default=None, help="The target whose patches to verify.")
@click.option("--jobs", "-j", type=int, default=os.cpu_count() or 1, show_default=True)
@click.option("--timeout", type=int, default=None, help="Seconds per test run, overriding the ledger's.")
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write JUnit XML here.")
@click.option("--keep-trees", is_flag=True, help="Keep the build trees and full logs (path in the report).")
@json_opt
@click.pass_obj
@guarded
def verify(c: Ctx, tags, tree_arg, spec_arg, target, jobs, timeout, junit, keep_trees, as_json) -> int:
    """Run each patch's tests with the series and without that patch.

    \b
    Classes: proven (fails without, passes with), not needed (passes without: the patch may be
    upstream or dead), broken (fails with), error (could not run).
    Exit 0 every patch proven; 1 a patch broken or not needed; 2 a test could not run / bad input.
    """
    from patchset.verify.pertest import run_verify

    tree, from_index = None, None
    if tree_arg or spec_arg:
        target, value = _one_target_arg(c, "tree" if tree_arg else "from-index", tree_arg or spec_arg, target)
        tree, from_index = (Path(value).resolve(), None) if tree_arg else (None, value)
        if tree is not None and not tree.is_dir():
            raise errors.InputError(f"--tree {tree_arg}: {tree} is not a directory")
    with _progress_bar() as bar:
        progress = bar.callback("verify")
        rep = run_verify(
            c.ledger_path,
            tree,
            from_index=from_index,
            tags=list(tags),
            jobs=jobs,
            timeout=timeout,
            junit=junit,
            progress=progress,
            target=target,
            keep_trees=keep_trees,
            download_progress=bar.callback("", unit="bytes"),
        )
    if as_json:
        emit_json(rep.to_json())
    else:
        from patchset.verify.pertest_view import render_verify

        render_verify(out, rep)
    return rep.exit_code


def _name_specs(specs: tuple[str, ...], led: Any, names: list[str]) -> tuple[str, ...]:
    """``--from-index vllm==0.30.0`` names its target by the project: the target whose package
    (or name) is ``vllm``. Values that already say ``NAME=`` are kept."""
    import re

    out = []
    for v in specs:
        name, sep, rest = v.partition("=")
        if len(names) > 1 and not (sep and name in names and not rest.startswith("=")):
            project = re.split(r"[=<>!~\s\[]", v, maxsplit=1)[0]
            match = [t for t in names if project in (led.targets[t].package, t)]
            if len(match) == 1:
                v = f"{match[0]}={v}"
        out.append(v)
    return tuple(out)


def _one_target_arg(c: Ctx, kind: str, value: str, target: str | None) -> tuple[str | None, str]:
    """``--tree DIR`` or ``--tree NAME=DIR`` for a command that works on one target."""
    from patchset.commands.apply import parse_tree_args

    led = c.load()
    names = [target] if target else [t for t in led.targets if led.series(t)]
    if len(names) != 1:  # NAME= picks the target
        name, sep, rest = value.partition("=")
        if sep and name in led.targets:
            return name, rest
        if not names:
            raise errors.InputError(f"{c.ledger_path} has no active patches to verify")
    ((name, v),) = parse_tree_args((value,), kind, names).items()
    return name, v


# --------------------------------------------------------------------------- check


@main.group()
def check() -> None:
    """Checks against a running server (long-context correctness past 2,048 tokens)."""


@check.command("longctx")
@click.option("--url", required=True, help="Base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000.")
@click.option("--model", default=None, help="Model name (default: the server's first model).")
@click.option(
    "--checks",
    "checks",
    multiple=True,
    metavar="NAME[,NAME]",
    help="causality, resume, cached, rescore, reference, copy (default: the first four).",
)
@click.option(
    "--mode",
    type=click.Choice(["fixed", "control"]),
    default="fixed",
    show_default=True,
    help="fixed bars (deterministic engines) or a multiple of a measured control (GPU clusters).",
)
@click.option(
    "--baseline",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Recorded cached-token baseline (JSON) for the `cached` check.",
)
@click.option(
    "--reference-model",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Model directory for the transformers reference forward pass (`reference` check).",
)
@click.option("--timeout", type=float, default=600.0, show_default=True, help="Seconds per request.")
@json_opt
@guarded
def check_longctx(url, model, checks, mode, baseline, reference_model, timeout, as_json) -> int:
    """Long-context checks with token-id prompts on both sides of 2,048 tokens.

    \b
    Exit 0 every check passes; 1 a check fails (a server that rejects a long prompt is a failure);
    2 the server cannot be reached or the input is bad.
    """
    from patchset.verify.longctx import run_checks

    names = split_list(checks) or None
    report = run_checks(
        url, model, names, mode=mode, baseline=baseline, reference_model=reference_model, timeout=timeout
    )
    if as_json:
        click.echo(report.to_json())
    else:
        from patchset.verify.longctx_view import render_longctx

        render_longctx(out, report)
    return report.exit_code


# --------------------------------------------------------------------------- build


@main.group()
def build() -> None:
    """What gets deployed: a patched wheel, or an overlay over a stock image."""


@build.command("wheel")
@click.option("--target", default=None, help="The target whose series to apply (default: the only one).")
@click.option(
    "--from-index",
    "spec",
    default=None,
    metavar="SPEC",
    help="A wheel from the package index, e.g. flashinfer-python==0.6.18.post1.",
)
@click.option(
    "--wheel", "wheel_file", type=click.Path(dir_okay=False, path_type=Path), default=None, help="A wheel file."
)
@click.option(
    "--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), required=True, help="Directory for the wheel."
)
@json_opt
@click.pass_obj
@guarded
def build_wheel(c: Ctx, target, spec, wheel_file, out_dir, as_json) -> int:
    """A wheel with the series applied: version VERSION+ps.<hash of the lock>, RECORD rewritten.

    \b
    Exit 0 written; 1 the series does not apply or a file would not match the lock (nothing is
    written); 2 bad input or environment.
    """
    from patchset.build.series import pick_target
    from patchset.build.wheel import build_wheel as do_build
    from patchset.build.wheel import fetch_wheel

    if (spec is None) == (wheel_file is None):
        raise errors.InputError("give one of --from-index SPEC or --wheel FILE")
    led = c.load()
    tgt = pick_target(led, target)
    with _progress_bar() as bar:
        path = wheel_file.resolve() if wheel_file else fetch_wheel(spec, progress=bar.callback("", unit="bytes"))
        rep = do_build(led, tgt, path, out_dir.resolve(), progress=bar.callback("build wheel"))
    if as_json:
        emit_json(rep.to_json())
    elif rep.ok:
        out.line(Styled("built", "green"), f" {rep.message}")
        out.line(str(rep.wheel), indent="  ")
    else:
        out.line(Styled(rep.outcome, "red"), f" {rep.message}")
        for p in rep.mismatched:
            out.line(f"does not match the lock: {p}", indent="  ")
    return 0 if rep.ok else 1


@build.command("overlay")
@click.option("--target", default=None, help="The target whose series the tree carries (default: the only one).")
@click.option("--tree", type=click.Path(file_okay=False, path_type=Path), required=True, help="The patched build tree.")
@click.option(
    "--layout",
    type=click.Choice(["source", "installed"]),
    default=None,
    help="Layout of the tree (default: the target's).",
)
@click.option(
    "--base-image", default=None, metavar="IMAGE", help="FROM of the Dockerfile (default: the target's base_image)."
)
@click.option(
    "--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), required=True, help="A new directory."
)
@json_opt
@click.pass_obj
@guarded
def build_overlay(c: Ctx, target, tree, layout, base_image, out_dir, as_json) -> int:
    """The patched files in the installed layout, EXPECTED.sha256, a Dockerfile and build.sh.

    \b
    Exit 0 written; 1 a patched file of the tree does not match the lock (nothing is written);
    2 bad input (no installed_root or base image, --out not empty).
    """
    from patchset.build.overlay import build_overlay as do_build
    from patchset.build.series import pick_target

    led = c.load()
    tgt = pick_target(led, target)
    rep = do_build(led, tgt, tree.resolve(), out_dir.resolve(), layout=layout, base_image=base_image)
    if as_json:
        emit_json(rep.to_json())
    elif rep.ok:
        out.line(Styled("built", "green"), f" {rep.message}")
        for w in rep.written:
            out.line(str(w), indent="  ")
    else:
        out.line(Styled(rep.outcome, "red"), f" {rep.message}")
        for p in rep.mismatched + rep.missing:
            out.line(str(p), indent="  ")
    return 0 if rep.ok else 1


# --------------------------------------------------------------------------- gate


@main.command()
@click.option("--onto", default=None, metavar="REF", help="Judge the series against this upstream ref.")
@click.option("--latest", is_flag=True, help="Judge against the newest upstream (fetched).")
@click.option(
    "--artifacts",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("gate-artifacts"),
    show_default=True,
    help="report.md, report.json, junit.xml, series.patch, logs/.",
)
@click.option("--tags", multiple=True, help="Verify tiers to run (repeatable or comma-separated), e.g. cpu.")
@click.option(
    "--state-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where the last judged upstream commit is kept (default .patchset/gate-state.json).",
)
@click.option("--target", default=None, help="The target to gate.")
@click.option("--upstream", default=None, metavar="PATH|URL", help="An upstream clone (default: release history).")
@click.option("--patch", "patches", multiple=True, metavar="ID", help="Only these patches' tests (matrix jobs).")
@click.option("--force", is_flag=True, help="Judge even when upstream has not moved.")
@click.option("--refresh-status", is_flag=True, help="Refresh the upstream PR status (network).")
@click.option(
    "--build",
    "builds",
    multiple=True,
    type=click.Choice(["wheel", "overlay"]),
    help="Also build the patched wheel (dist/) or the image overlay (overlay/) into the artifacts.",
)
@json_opt
@click.pass_obj
@guarded
def gate(
    c: Ctx, onto, latest, artifacts, tags, state_file, target, upstream, patches, force, refresh_status, builds, as_json
) -> int:
    """The CI gate: rebase (dry run) onto a new upstream, apply, verify, report.

    \b
    Does nothing (exit 0, well under a second) when upstream has not moved since the last run.
    When a patch newly breaks, bisects upstream history in memory and names the first bad commit.
    Exit codes: 0 green (or nothing new), 1 regression (conflict, broken test, failed check),
    2 infrastructure failure (network, disk, tool crash).
    """
    from patchset.ci.gate import run_gate, split_tags
    from patchset.ci.report import render

    with _progress_bar() as bar:
        progress = bar.callback("gate")
        report = run_gate(
            c.ledger_path,
            onto=onto,
            latest=latest,
            artifacts=artifacts.resolve(),
            tags=split_tags(list(tags)),
            state_file=state_file,
            progress=progress,
            target=target,
            upstream=upstream,
            patches=list(patches) or None,
            force=force,
            refresh_status=refresh_status,
            build=list(builds),
        )
    if as_json:
        emit_json(report.to_json())
    else:
        render(report, out)
    return report.exit_code


if __name__ == "__main__":
    main()

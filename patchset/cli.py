"""patchset's command line: parse arguments, call the packages, print the result.

Exit codes (every command): 0 ok; 1 a finding (a patch that fails, a check that fails, a hash
mismatch, a regression); 2 bad input or environment (malformed ledger, missing file, network).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from patchset import errors
from patchset.ledger import store as ledger_mod

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


@dataclass
class Ctx:
    directory: Path
    ledger_arg: Path | None

    @property
    def ledger_path(self) -> Path:
        return ledger_mod.find_ledger(self.directory, self.ledger_arg)

    def load(self):  # -> Ledger
        return ledger_mod.load_ledger(self.ledger_path)


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


def guarded(fn: Callable[..., int | None]) -> Callable[..., None]:
    """Run a command body; map domain errors to their exit codes, never a traceback."""

    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            code = fn(*args, **kwargs) or 0
        except errors.PatchsetError as exc:
            click.echo(f"error: {exc.render()}", err=True)
            code = exc.exit_code
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
@click.version_option(package_name="patchset")
@click.pass_context
def main(ctx: click.Context, directory: Path | None, ledger_arg: Path | None) -> None:
    """patchset: a ledger, apply engine, rebaser and CI gate for downstream patch series.

    \b
    Exit codes: 0 ok, 1 a finding (failed patch/check, hash mismatch), 2 bad input or environment.
    """
    if directory is not None:
        try:
            os.chdir(directory)  # "as if started in DIR": relative paths on the command line resolve there
        except OSError as exc:
            raise click.BadParameter(f"cannot enter {directory}: {exc.strerror}", param_hint="-C") from None
    ctx.obj = Ctx(directory=Path.cwd(), ledger_arg=ledger_arg)


# --------------------------------------------------------------------------- init / import / export


@main.command()
@click.option("--title", default="", help="A title for the ledger.")
@json_opt
@click.pass_obj
@guarded
def init(c: Ctx, title: str, as_json: bool) -> int:
    """Create a new, empty ledger (patches.toml, patches.lock) and the series directory."""
    ledger_mod.init_ledger(c.ledger_path, title)
    if as_json:
        emit_json({"ledger": str(c.ledger_path)})
    else:
        out.print(f"created {c.ledger_path} and {c.ledger_path.parent / 'patchset' / 'series'}/")
    return 0


@main.command("import")
@click.argument("sources", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--target", default=None, help="The target these patches belong to.")
@json_opt
@click.pass_obj
@guarded
def import_(c: Ctx, sources: tuple[Path, ...], target: str | None, as_json: bool) -> int:
    """Import a quilt directory, patch files / format-patch mails, or EXPECTED.sha256 files."""
    from patchset.commands.importer import import_sources

    res = import_sources(c.ledger_path, list(sources), target)
    if as_json:
        emit_json(res.to_json())
    else:
        out.print(f"added {len(res.added)}, updated {len(res.updated)}, unchanged {len(res.unchanged)}")
        for f, n in res.expected.items():
            out.print(f"expected hashes: {n} from {f}")
    return 0


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
            out.print(f"{t}: {len(names)} entries written to {dest}")
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


def _progress_bar():
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    )


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
        raise errors.InputError(f"unknown target {target!r}", hint=f"one of: {', '.join(led.targets)}")
    chosen: dict[str, TreeArg] = {}
    for kind, values in (("tree", trees), ("repo", repos)):
        for name, value in parse_tree_args(values, kind, names).items():
            chosen[name] = TreeArg(kind, Path(value).resolve(), layout=layout or "", branch=branch)
    spec_map = parse_tree_args(specs, "from-index", names)
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
        task = bar.add_task("apply", total=None)

        def progress(pid: str, i: int, n: int) -> None:
            bar.update(task, description=f"apply {pid}", completed=i, total=n)

        reports = run_apply(
            led,
            chosen,
            fuzz=fuzz,
            update_lock=update_lock,
            dry_run=dry_run,
            progress=progress,
            download_progress=bar,
            skip_applied=skip_applied,
            remove_empty=remove_empty,
        )
    if as_json:
        emit_json({"ok": all(r.ok for r in reports), "targets": [r.to_json() for r in reports]})
    else:
        from patchset.commands.views import render_apply

        render_apply(out, reports)
    return 0 if all(r.ok for r in reports) else 1


# --------------------------------------------------------------------------- rebase


@main.command()
@click.option(
    "--onto", default=None, metavar="REF", help="A commit, tag, branch (main), a release (vllm==0.31.0) or a directory."
)
@click.option("--target", default=None, help="The target to rebase (needed when several have patches).")
@click.option(
    "--repo",
    "repo",
    type=click.Path(path_type=Path),
    default=None,
    help="A local upstream clone holding both bases (default: the cached release history).",
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
def rebase(c: Ctx, onto, target, repo, interactive, dry_run, cont, skip_, abort_, no_range_diff, as_json) -> int:
    """Carry the series onto a newer upstream: in-memory 3-way replay, drops what landed upstream.

    \b
    Every patch is classified: carried (clean / offset / merged / moved), already upstream,
    superseded (a port whose PR merged), or conflict (files, hunks, and the upstream commits that
    changed those lines). Without --interactive a conflict is reported and nothing is written.
    Exit 0 done or a clean dry run; 1 conflicts or stopped at a conflict; 2 bad input.
    """
    from patchset.rebase import session as rb
    from patchset.rebase.report import render

    modes = sum(bool(x) for x in (onto, cont, skip_, abort_))
    if modes != 1:
        raise errors.InputError("give exactly one of --onto REF, --continue, --skip, --abort")
    if abort_:
        res = rb.abort(c.ledger_path)
        if as_json:
            emit_json(res.to_json())
        else:
            out.print("rebase aborted: ledger, series and lock restored" if res.restored else "nothing to abort")
        return 0
    with _progress_bar() as bar:
        task = bar.add_task("rebase", total=None)

        def progress(i: int, n: int, pid: str) -> None:
            bar.update(task, description=f"rebase {pid}", completed=i, total=n)

        if cont:
            report = rb.continue_rebase(c.ledger_path, progress=progress)
        elif skip_:
            report = rb.skip(c.ledger_path, progress=progress)
        else:
            report = rb.rebase(
                c.ledger_path,
                onto,
                target=target,
                repo=repo,
                interactive=interactive,
                dry_run=dry_run,
                progress=progress,
            )
    if as_json:
        emit_json(report.to_json())
    else:
        render(report, out, range_diffs=not no_range_diff)
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
            out.print(f"wrote {html_file}")
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

    if check:
        rep = fetch_mod.check(c.ledger_path, ids, offline=offline)
        render = views.render_check
    elif update_id:
        rep = fetch_mod.update(c.ledger_path, update_id)
        render = views.render_fetch
    else:
        rep = fetch_mod.fetch(c.ledger_path, ids, all_=all_, offline=offline)
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
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="A pristine build tree (verify works on private copies; never modified).",
)
@click.option(
    "--from-index",
    "from_index",
    default=None,
    metavar="SPEC",
    help="A release from the package index, e.g. vllm==0.30.0 (default: the target's base).",
)
@click.option("--target", default=None, help="The target whose patches to verify.")
@click.option("--jobs", "-j", type=int, default=os.cpu_count() or 1, show_default=True)
@click.option("--timeout", type=int, default=None, help="Seconds per test run, overriding the ledger's.")
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write JUnit XML here.")
@click.option("--keep-trees", is_flag=True, help="Keep the build trees and full logs (path in the report).")
@json_opt
@click.pass_obj
@guarded
def verify(c: Ctx, tags, tree, from_index, target, jobs, timeout, junit, keep_trees, as_json) -> int:
    """Run each patch's tests with the series and without that patch.

    \b
    Classes: proven (fails without, passes with), not needed (passes without: the patch may be
    upstream or dead), broken (fails with), error (could not run).
    Exit 0 every patch proven; 1 a patch broken or not needed; 2 a test could not run / bad input.
    """
    from patchset.verify.pertest import run_verify

    with _progress_bar() as bar:
        task = bar.add_task("verify", total=None)

        def progress(what: str, done: int, total: int) -> None:
            bar.update(task, description=what, completed=done, total=total)

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
            download_progress=bar,
        )
    if as_json:
        emit_json(rep.to_json())
    else:
        from patchset.verify.pertest_view import render_verify

        render_verify(out, rep)
    return rep.exit_code


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

    names = [n for item in checks for n in item.split(",") if n] or None
    report = run_checks(
        url, model, names, mode=mode, baseline=baseline, reference_model=reference_model, timeout=timeout
    )
    if as_json:
        click.echo(report.to_json())
    else:
        report.render(out)
    return report.exit_code


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
@json_opt
@click.pass_obj
@guarded
def gate(
    c: Ctx, onto, latest, artifacts, tags, state_file, target, upstream, patches, force, refresh_status, as_json
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
        task = bar.add_task("gate", total=None)

        def progress(stage: str, detail: str) -> None:
            bar.update(task, description=f"{stage}: {detail}"[:70])

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
        )
    if as_json:
        emit_json(report.to_json())
    else:
        render(report, out)
    return report.exit_code


if __name__ == "__main__":
    main()

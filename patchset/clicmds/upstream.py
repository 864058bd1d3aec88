"""CLI commands: upstream state: status and fetch."""

from __future__ import annotations

from pathlib import Path

import click

from patchset.cli import Ctx, emit_json, guarded, out
from patchset.clicmds import options as opt


@click.command()
@click.option("--refresh", is_flag=True, help="Ask GitHub now and record the new states in the ledger.")
@click.option("--offline", is_flag=True, help="Never touch the network; say how old the data is.")
@click.option("--markdown", is_flag=True, help="A markdown table (to paste in a README or an issue).")
@opt.path("--html", "Write one static, sortable HTML page.", dest="html_file", dir_okay=False)
@opt.timeout
@opt.json
@click.pass_obj
@guarded
def status(
    c: Ctx, refresh: bool, offline: bool, markdown: bool, html_file: Path | None, timeout: float | None, as_json: bool
) -> int:
    """The dashboard of upstream merges: PR state per patch and what to do about it.

    \b
    Without --refresh it shows the cached or recorded state (no network). A token comes from
    GITHUB_TOKEN or `gh auth token`; the API from PATCHSET_GITHUB_API (default api.github.com).
    An apply, rebase or ledger edit left half-done is named at the top (as validate does).
    Exit 0; 1 when such an interruption is found; 2 when some rows could not be read (still shown).
    """
    from patchset.tracker.status import make_client
    from patchset.tracker.status import status as do_status

    opt.apply_timeout(timeout)
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


@click.command()
@click.argument("old_ids", metavar="", nargs=-1, shell_complete=opt.complete_patch_ids)
@opt.only("fetch (or --check) its body")
@click.option("--all", "all_", is_flag=True, help="Every patch with a source.")
@click.option("--check", is_flag=True, help="Has upstream moved since each body was pinned? (writes nothing)")
@click.option(
    "--update",
    "update_id",
    default=None,
    metavar="ID",
    help="Take the new upstream revision of the patch ID.",
    shell_complete=opt.complete_patch_ids,
)
@click.option("--offline", is_flag=True, help="Use only what is stored.")
@opt.timeout
@opt.json
@click.pass_obj
@guarded
def fetch(
    c: Ctx,
    old_ids: tuple[str, ...],
    only: tuple[str, ...],
    all_: bool,
    check: bool,
    update_id: str | None,
    offline: bool,
    timeout: float | None,
    as_json: bool,
) -> int:
    """Download patch bodies from their pinned sources (PRs, commits, files, URLs) into the series.

    \b
    Exit 0 ok; 1 a source changed or a download was refused (nothing stored); 2 a source could not
    be reached (nothing stored).
    """
    from patchset.commands import fetch as fetch_mod
    from patchset.tracker import views
    from patchset.tracker.status import make_client

    opt.apply_timeout(timeout)
    if old_ids:  # the positional spelling of --only, kept for scripts
        click.echo("warning: fetch ID... is deprecated; use --only ID (as gate --only)", err=True)
    ids = (*only, *old_ids)
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

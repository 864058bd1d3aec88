"""CLI commands: rebase."""

from __future__ import annotations

from pathlib import Path

import click

from patchset import errors
from patchset.cli import Ctx, emit_json, guarded, out, progress_bar
from patchset.clicmds import options as opt


@click.command()
@click.option(
    "--onto", default=None, metavar="REF", help="A commit, tag, branch (main), a release (vllm==0.31.0) or a directory."
)
@opt.target("rebase", "default: the one --onto names, else the only target with active patches")
@opt.upstream("the target's upstream when it is a local clone, else its release history")
@opt.deprecated("--repo", "old_repo", "rebase --repo", "--upstream (--repo names a build checkout in apply)")
@click.option("--interactive", is_flag=True, help="Stop at a conflict with the conflicted files written out.")
@opt.dry_run("Classify every patch; write nothing.")
@click.option("--continue", "cont", is_flag=True, help="Resume after resolving a conflict.")
@click.option("--skip", "skip_", is_flag=True, help="Set the conflicting patch aside (held) and go on.")
@click.option("--abort", "abort_", is_flag=True, help="Restore the ledger, series and lock byte for byte.")
@click.option("--no-range-diff", is_flag=True, help="Do not print per-patch range-diffs.")
@opt.json
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
    from patchset.ledger import consent

    consent.require_at(c.ledger_path, [consent.Kind.GENERATE])  # the edit scripts it runs again, --dry-run too
    with progress_bar() as bar:
        progress = bar.callback("rebase")
        if cont:
            report = rb.continue_rebase(c.ledger_path, progress=progress)
        elif skip_:
            report = rb.skip(c.ledger_path, progress=progress)
        else:
            report = rb.rebase(
                rb.RebaseRun(
                    c.ledger_path,
                    onto,
                    target=target,
                    repo=upstream_clone(upstream or old_repo, onto),
                    interactive=interactive,
                    dry_run=dry_run,
                    progress=progress,
                    download_progress=bar.callback("", unit="bytes"),
                )
            )
    if as_json:
        emit_json(report.to_json())
    else:
        from patchset.commands.rebase_view import render_rebase

        render_rebase(out, report, range_diffs=not no_range_diff)
    return 0 if report.ok else 1


def upstream_clone(value: str | Path | None, onto: str) -> str | Path | None:
    """``--upstream`` as the gate takes it: a URL (``scheme://``, ``git@``; the gate's test in
    ``ci/upstream.open_upstream``) is cloned into the cache, blobless, and fetched when it lacks
    ``--onto``; the rebase then reads that clone. A path is passed on as it is."""
    text = str(value) if value is not None else ""
    if "://" not in text and not text.startswith("git@"):
        return value
    from patchset.upstream.clone import UpstreamClone

    clone = UpstreamClone(text)
    try:
        if not clone.cloned or clone.rev(onto) is None:
            clone.sync()
    finally:
        clone.close()
    return str(clone.git_dir)

"""CLI commands: the CI gate."""

from __future__ import annotations

from pathlib import Path

import click

from patchset.cli import Ctx, emit_json, guarded, out, progress_bar
from patchset.clicmds import options as opt


@click.command()
@opt.value("--onto", "REF", "Judge the series against this upstream ref.")
@click.option("--latest", is_flag=True, help="Judge against the newest upstream (fetched).")
@click.option(
    "--artifacts",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("gate-artifacts"),
    show_default=True,
    help="report.md, report.json, junit.xml, series.patch, logs/ (a new or empty directory, or one the gate wrote).",
)
@opt.tags
@opt.path(
    "--state-file", "Where the last judged upstream commit is kept (default .patchset/gate-state.json).", dir_okay=False
)
@opt.target("gate", "default: the one --onto names, else the only target with active patches")
@opt.upstream("the target's upstream when it is a local clone, else its release history")
@opt.only("run only its tests (matrix jobs)")
@opt.deprecated("--patch", "old_patches", "gate --patch", "--only ID (the same as fetch --only)", multiple=True)
@click.option("--force", is_flag=True, help="Judge even when upstream has not moved.")
@click.option("--refresh-status", is_flag=True, help="Refresh the upstream PR status (network).")
@opt.choice(
    "--build",
    ["wheel", "overlay"],
    "Also build the patched wheel (dist/) or the image overlay (overlay/) into the artifacts.",
    dest="builds",
    multiple=True,
)
@opt.engine("[engines.NAME]")
@opt.reuse
@opt.json
@click.pass_obj
@guarded
def gate(
    c: Ctx,
    onto,
    latest,
    artifacts,
    tags,
    state_file,
    target,
    upstream,
    only,
    old_patches,
    force,
    refresh_status,
    builds,
    engine,
    as_json,
    **reused,
) -> int:
    """The CI gate: rebase (dry run) onto a new upstream, apply, verify, report.

    \b
    Does nothing (exit 0, well under a second) when upstream has not moved since the last run.
    When a patch newly breaks, bisects upstream history in memory and names the first bad commit.
    Long-context tests follow the verify plan: a patch whose watched files, body and tests did not
    move since the night that proved it carries that verdict; --plan prints the plan and its engine
    starts and starts nothing (--onto/--latest optional then).
    Exit codes: 0 green (or nothing new), 1 regression (conflict, broken test, failed check),
    2 infrastructure failure (network, disk, tool crash).
    """
    from patchset.ci.gate import GateRun, run_gate
    from patchset.ci.report import render
    from patchset.ledger import consent
    from patchset.text import split_list

    if not reused["plan_only"]:  # its replay runs the edit scripts; --tags runs the tests and their engines
        consent.require_at(c.ledger_path, [consent.Kind.GENERATE, *(consent.TESTS if split_list(tags) else ())])
    with progress_bar() as bar:
        job = GateRun(
            c.ledger_path,
            onto=onto,
            latest=latest,
            artifacts=artifacts.resolve(),
            tags=split_list(tags),
            state_file=state_file,
            target=target,
            upstream=upstream,
            patches=[*only, *old_patches] or None,
            force=force,
            refresh_status=refresh_status,
            build=list(builds),
            engine=engine,
            **opt.reused_args(reused),
            progress=bar.callback("gate"),
        )
        report = run_gate(job)
    if as_json:
        emit_json(report.to_json())
    else:
        render(report, out)
    return report.exit_code

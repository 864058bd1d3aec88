"""CLI commands: reading the ledger: validate, list, show (the commands that must start fastest)."""

from __future__ import annotations

import click

from patchset.cli import Ctx, emit_json, guarded, out
from patchset.clicmds import options as opt


@click.command()
@opt.json
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


@click.command("list")
@opt.target("list", "default: every target")
@opt.choice(
    "--state", ["active", "held", "dropped"], "Only patches in this state (repeatable).", dest="states", multiple=True
)
@click.option(
    "--header", is_flag=True, help="Piped output starts with the column names (a terminal always shows them)."
)
@opt.json
@click.pass_obj
@guarded
def list_(c: Ctx, target: str | None, states: tuple[str, ...], header: bool, as_json: bool) -> int:
    """The series as a table: order, id, target, origin, PR and state, files."""
    from patchset.commands.inspection import list_rows

    rows = list_rows(c.load(), target, states or None)
    if as_json:
        emit_json(rows)
        return 0
    from patchset.commands.views import render_list

    render_list(out, rows, header=header)
    return 0


@click.command()
@click.argument("patch_id", metavar="ID", shell_complete=opt.complete_patch_ids)
@opt.json
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

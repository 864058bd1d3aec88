"""CLI command: allow (consent for the commands a ledger carries, ``patchset.ledger.consent``)."""

from __future__ import annotations

import sys

import click

from patchset import errors
from patchset.cli import Ctx, emit_json, guarded, out
from patchset.clicmds import options as opt


@click.command()
@click.option("--yes", is_flag=True, help="Allow without asking (scripts, CI on your own branch).")
@click.option("--list", "list_", is_flag=True, help="List every ledger whose commands are allowed on this machine.")
@click.option("--revoke", is_flag=True, help="Forget what was allowed for this ledger.")
@opt.json
@click.pass_obj
@guarded
def allow(c: Ctx, yes: bool, list_: bool, revoke: bool, as_json: bool) -> int:
    """Allow the commands this ledger carries (edit scripts, engine launchers, test commands).

    \b
    Shows each command, whether it is new or what changed since it was allowed, and asks; the
    digests of the commands and of the files under the ledger they name are recorded in your
    state directory, never in the repository. rebase, gate and verify refuse (exit 2) a command
    that is not allowed as it is now. Exit 0 recorded (or nothing to do); 2 refused or bad input.
    """
    from patchset.ledger import consent

    if list_ and revoke:
        raise errors.InputError("give one of --list or --revoke")
    if list_:
        rows = consent.records()
        if as_json:
            emit_json(rows)
        elif not rows:
            out.line("no ledger's commands are allowed on this machine")
        for r in [] if as_json else rows:
            if "problem" in r:
                out.line(f"{r['record']}: {r['problem']}")
                continue
            out.line(f"{r['ledger']} (allowed {r['at'][:19]}): {len(r['allowed'])} command(s)")
            for key, rec in sorted(r["allowed"].items()):
                out.line(f"{key}: {rec.get('shown', '')}", indent="  ")
        return 0
    path = c.ledger_path
    if revoke:
        done = consent.revoke(path)
        if as_json:
            emit_json({"ledger": str(path.resolve()), "revoked": done})
        else:
            out.line(f"{path}: allowed commands forgotten" if done else f"{path}: nothing was allowed")
        return 0
    ledger = c.load()
    commands = consent.ledger_commands(ledger)
    pending = {v.command.key: v for v in consent.compare(ledger)}
    if not as_json:
        if not commands:
            out.line(f"{path}: the ledger carries no commands; nothing to allow")
        for cmd in commands:
            v = pending.get(cmd.key)
            state = "allowed" if v is None else ("new" if v.new else "changed: " + ", ".join(v.changed))
            out.line(f"{cmd.key} [{state}]")
            out.line(cmd.shown, indent="    ")
            for rel, digest in sorted(cmd.files.items()):
                out.line(f"{rel}  sha256 {digest[:16]}", indent="    file ")
            for note in cmd.notes:
                out.line(note, indent="    note: ")
    if not pending:
        if as_json:
            emit_json(_json(path, commands, pending))
        elif commands:
            out.line("every command is allowed as it is now")
        return 0
    if not yes:
        if as_json or not sys.stdin.isatty():
            raise errors.InputError(
                "allowing a ledger's commands needs a confirmation", hint="pass --yes (after reading them)"
            )
        if not click.confirm(f"Allow these {len(commands)} command(s) of {path} to run on this machine?"):
            out.line("nothing allowed")
            return 2
    consent.allow(ledger)
    if as_json:
        emit_json(_json(path, commands, pending))
    else:
        out.line(f"allowed {len(commands)} command(s) of {path}")
    return 0


def _json(path, commands, pending) -> dict:
    return {
        "ledger": str(path.resolve()),
        "allowed": True,  # said after the commands are allowed (or were already)
        "commands": [
            {
                "key": c.key,
                "kind": c.kind.value,
                "command": c.shown,
                "sha256": c.digest,
                "files": c.files,
                "notes": list(c.notes),
                "was": "allowed"
                if c.key not in pending
                else ("new" if pending[c.key].new else "changed: " + ", ".join(pending[c.key].changed)),
            }
            for c in commands
        ],
    }

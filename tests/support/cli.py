"""The patchset CLI run in-process, as the tests' ``run`` fixture does (module-scoped worlds use it directly)."""

from __future__ import annotations

import os
from pathlib import Path

import click
from click.testing import CliRunner

from patchset import cli


class Result:
    def __init__(self, code: int, stdout: str, stderr: str) -> None:
        self.code, self.stdout, self.stderr = code, stdout, stderr

    def __repr__(self) -> str:
        return f"<exit {self.code}\nstdout: {self.stdout[-2000:]}\nstderr: {self.stderr[-2000:]}>"


def invoke(*args: str | Path, cwd: Path | None = None) -> Result:
    """Invoke the patchset CLI in-process; returns exit code, stdout, stderr."""
    runner = CliRunner()
    argv = [str(a) for a in args]
    if cwd is not None:
        argv = ["-C", str(cwd), *argv]
    here = os.getcwd()
    try:
        r = runner.invoke(cli.main, argv, catch_exceptions=False)
    finally:
        os.chdir(here)
    return Result(r.exit_code, r.stdout, r.stderr)


def leaf_commands() -> dict[str, click.Command]:
    """Every command click can run, by its full name (``target add``), from the top-level group."""
    found: dict[str, click.Command] = {}

    def walk(group: click.Group, prefix: str) -> None:
        ctx = click.Context(group)
        for name in group.list_commands(ctx):
            cmd = group.get_command(ctx, name)
            assert cmd is not None
            if isinstance(cmd, click.Group):
                walk(cmd, f"{prefix}{name} ")
            else:
                found[prefix + name] = cmd

    walk(cli.main, "")
    return found

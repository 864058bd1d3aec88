"""patchset's command line: parse arguments, call the packages, print the result.

This module is the plumbing every command shares (the ledger context, error mapping, JSON, the
one ``Term``, progress bars) and the top-level group; the commands live in ``patchset.clicmds``
and load only when they run (``COMMANDS``), so ``patchset list`` pays for no other command.

Exit codes (every command): 0 ok; 1 a finding (a patch that fails, a check that fails, a hash
mismatch, a regression); 2 bad input or environment (malformed ledger, missing file, network).
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from patchset import __version__, errors
from patchset.commands.table import Term
from patchset.records import record
from patchset.text import terminal

out = Term()  # re-read at each invocation (main), so it sees the stdout of that run


@record
class Ctx:
    """Where a command runs: its directory and the ledger named on the command line."""

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
        _collect_from_here()
        try:
            code = fn(*args, **kwargs) or 0
        except errors.PatchsetError as exc:
            click.echo(f"error: {terminal(exc.render(), block=True)}", err=True)  # messages quote data
            code = exc.exit_code
        except BrokenPipeError:  # `patchset list | head`: the reader left; say nothing
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            code = 0
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            code = 130
        except OSError as exc:
            click.echo(terminal(f"error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": ")), err=True)
            code = errors.EXIT_INPUT
        except Exception as exc:
            if isinstance(exc.__cause__, KeyboardInterrupt):  # Ctrl-C while a class was defined (3.11 wraps it)
                click.echo("interrupted", err=True)
                sys.exit(130)
            if os.environ.get("PATCHSET_DEBUG"):
                raise
            click.echo(
                terminal(f"error: internal error: {type(exc).__name__}: {exc} (set PATCHSET_DEBUG=1 for a traceback)"),
                err=True,
            )
            code = errors.EXIT_INPUT
        sys.exit(code)

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


json_opt = click.option("--json", "as_json", is_flag=True, help="Machine-readable output on stdout.")


# command name -> "module:function" in patchset.clicmds (loaded when the command runs, or for --help)
COMMANDS: dict[str, str] = {
    "apply": "patchset.clicmds.applying:apply",
    "audit": "patchset.clicmds.onboard:audit",
    "build": "patchset.clicmds.building:build",
    "check": "patchset.clicmds.checks:check",
    "export": "patchset.clicmds.onboard:export",
    "fetch": "patchset.clicmds.upstream:fetch",
    "gate": "patchset.clicmds.gating:gate",
    "import": "patchset.clicmds.onboard:import_",
    "init": "patchset.clicmds.onboard:init",
    "list": "patchset.clicmds.query:list_",
    "rebase": "patchset.clicmds.rebasing:rebase",
    "recover": "patchset.clicmds.applying:recover",
    "show": "patchset.clicmds.query:show",
    "status": "patchset.clicmds.upstream:status",
    "target": "patchset.clicmds.onboard:target",
    "validate": "patchset.clicmds.query:validate",
    "verify": "patchset.clicmds.checks:verify",
}


_gc_held = False


def _collect_from_here() -> None:
    """The command's work starts: what was loaded so far lives until exit, so it moves out of the
    collector's sight (``gc.freeze``) and collection resumes for the work itself."""
    global _gc_held
    if _gc_held:
        _gc_held = False
        gc.freeze()
        gc.enable()


class LazyGroup(click.Group):
    """click's documented lazy-loading group: a command's module is imported only when it is used."""

    def main(self, args: Any = None, *rest: Any, **kwargs: Any) -> Any:
        """A process of its own (the console script: no ``args``, and click exits at the end): no
        garbage collection while modules load (nothing loaded is garbage), and none at exit, where
        the interpreter's final collections would walk every object only to free the process.
        Measured with ``bench/cli.py``: about 13 ms of a 90 ms ``list`` on this project's CI machine.
        Click's test runner (``args``) and callers that go on (``standalone_mode=False``) keep
        their collector as it is."""
        global _gc_held
        if args is not None or not kwargs.get("standalone_mode", True):
            return super().main(args, *rest, **kwargs)
        gc.disable()
        _gc_held = True
        try:
            return super().main(args, *rest, **kwargs)
        finally:
            _gc_held = False
            gc.freeze()  # the process ends here: whether collection is on no longer matters

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS:
            module, _, attr = COMMANDS[cmd_name].partition(":")
            cmd = getattr(importlib.import_module(module), attr)
            assert isinstance(cmd, click.Command), COMMANDS[cmd_name]
            return cmd
        return super().get_command(ctx, cmd_name)

    # Ctrl-C while click parses or dispatches (outside ``guarded``) exits 130 "interrupted" too,
    # not click's "Aborted!" with exit 1 (1 means a finding)
    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
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
    out.reopen()
    if directory is not None:
        try:
            os.chdir(directory)  # "as if started in DIR": relative paths on the command line resolve there
        except OSError as exc:
            raise click.BadParameter(f"cannot enter {directory}: {exc.strerror}", param_hint="-C") from None
    ctx.obj = Ctx(directory=Path.cwd(), ledger_arg=ledger_arg)


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


# --------------------------------------------------------------------------- rebase


# --------------------------------------------------------------------------- status / fetch


# --------------------------------------------------------------------------- verify


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


if __name__ == "__main__":
    main()

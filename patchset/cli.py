"""patchset's command line: parse arguments, call the packages, print the result.

The plumbing every command shares (the ledger context, error mapping, JSON, the one ``Term``,
progress bars) and the top-level group; commands live in ``patchset.clicmds`` and load only when
they run (``COMMANDS``), their shared options in ``patchset.clicmds.options``. Exit codes: 0 ok;
1 a finding; 2 bad input or environment; 130 interrupted. Under ``--json`` an error is also
``{"error": {"kind", "message", "hint", "exit"}}`` on stdout.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import click

from patchset import __version__, errors
from patchset.commands.table import Term
from patchset.text import terminal

out = Term()  # re-read at each invocation (main), so it sees the stdout of that run


@dataclass
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


def emit_json(data: Any) -> None:
    import json

    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


def progress_bar():  # -> patchset.commands.progressbar.Bars
    """Bars on stderr when it is a terminal (``bars.callback(label)`` is the one adapter from the
    packages' ``progress(what, done, total)``); otherwise no bar, and rich is never imported."""
    from patchset.commands.progressbar import Bars

    return Bars()


def error_kind(exc: BaseException) -> str:
    """The ``kind`` of a ``--json`` error: the exception class in snake case (``input_error``,
    ``ledger_error``, ``hash_mismatch``, ``os_error``)."""
    import re

    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", type(exc).__name__)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()


def report_error(kind: str, message: str, hint: str | None, code: int, as_json: bool) -> None:
    """Say what failed: ``error: MESSAGE`` (and its hint) on stderr, and under ``--json`` also
    ``{"error": {"kind", "message", "hint", "exit"}}`` on stdout, so a script reads a failure the
    way it reads a result."""
    text = f"error: {message}" + (f"\n  hint: {hint}" if hint else "")
    click.echo(terminal(text, block=True), err=True)  # messages quote data: controls shown, never sent
    if as_json:
        emit_json({"error": {"kind": kind, "message": message, "hint": hint or None, "exit": code}})


def guarded(fn: Callable[..., int | None]) -> Callable[..., None]:
    """Run a command body; map domain errors to their exit codes, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        as_json = bool(kwargs.get("as_json"))
        try:
            from patchset.upstream.net import command_budget

            with command_budget() as budget:  # every request of the command shares it ($PATCHSET_NET_COMMAND_DEADLINE)
                notice = NetNotice()
                budget.notice = notice if notice.enabled else None
                try:
                    code = fn(*args, **kwargs) or 0
                finally:
                    notice.done()
        except errors.PatchsetError as exc:
            code = exc.exit_code
            report_error(error_kind(exc), exc.message, exc.hint, code, as_json)
        except BrokenPipeError:  # `patchset list | head`: the reader left; say nothing
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            code = 0
        except KeyboardInterrupt:
            _interrupted(as_json)
        except OSError as exc:
            code = errors.EXIT_INPUT
            message = f"{exc.strerror or exc}: {exc.filename or ''}".rstrip(": ")
            report_error(error_kind(exc), message, None, code, as_json)
        except Exception as exc:
            if isinstance(exc.__cause__, KeyboardInterrupt):  # Ctrl-C while a class was defined (3.11 wraps it)
                _interrupted(as_json)
            if os.environ.get("PATCHSET_DEBUG"):
                raise
            code = errors.EXIT_INPUT
            message = f"internal error: {type(exc).__name__}: {exc}"
            report_error("internal", message, "set PATCHSET_DEBUG=1 for a traceback", code, as_json)
        sys.exit(code)

    return wrapper


class NetNotice:
    """The progress line of network work that runs longer than 2 s (``net.budget.SLOW_S``), on stderr:
    one line redrawn in place on a terminal, plain lines with ``PATCHSET_PROGRESS=1`` (a CI log);
    nothing otherwise, and never on stdout (``--json`` stays clean)."""

    def __init__(self) -> None:
        forced = os.environ.get("PATCHSET_PROGRESS", "")
        try:
            tty = sys.stderr.isatty()
        except (AttributeError, ValueError):
            tty = False
        self.enabled = forced == "1" or (tty and forced != "0")
        self.inline = tty and forced != "1"
        self.shown = False

    def __call__(self, text: str) -> None:
        line = terminal(text)[:200]
        if self.inline:
            sys.stderr.write("\r" + line + "\x1b[K")
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()
        self.shown = True

    def done(self) -> None:
        if self.shown and self.inline:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


def _interrupted(as_json: bool) -> NoReturn:
    """Ctrl-C: exit 130 (1 means a finding), whatever was running."""
    click.echo("interrupted", err=True)
    if as_json:
        emit_json({"error": {"kind": "interrupted", "message": "interrupted", "hint": None, "exit": 130}})
    sys.exit(130)


def _wants_json(args: Any) -> bool:
    """``--json`` among the words of the command line (before a ``--``)."""
    words = [str(a) for a in (args or ())]
    return "--json" in (words[: words.index("--")] if "--" in words else words)


# command name -> "module:function" in patchset.clicmds (loaded when the command runs, or for --help)
COMMANDS: dict[str, str] = {
    "allow": "patchset.clicmds.allowing:allow",
    "apply": "patchset.clicmds.applying:apply",
    "audit": "patchset.clicmds.onboard:audit",
    "base": "patchset.clicmds.bases:base",
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


class SuggestingGroup(click.Group):
    """A group whose "No such command" names the closest commands (difflib over every name,
    the lazily loaded ones included)."""

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        import difflib

        name = args[0] if args else ""
        if args and not ctx.resilient_parsing and not name.startswith("-") and self.get_command(ctx, name) is None:
            close = difflib.get_close_matches(name, self.list_commands(ctx))
            guess = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise click.UsageError(f"No such command {name!r}.{guess}", ctx)
        return super().resolve_command(ctx, args)


class LazyGroup(SuggestingGroup):
    """click's documented lazy-loading group: a command's module is imported only when it is used.

    Usage errors (a bad option, a missing argument, an unknown command) keep click's message and
    exit 2; with ``--json`` on the command line they are also a JSON error on stdout."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        # one name and one completion variable, however the process was started (the console
        # script, `python cli.py`, `python -c ...`)
        kwargs.setdefault("prog_name", "patchset")
        kwargs.setdefault("complete_var", "_PATCHSET_COMPLETE")
        return super().main(*args, **kwargs)

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
    def make_context(self, info_name: str | None, args: list[str], *rest: Any, **kwargs: Any) -> click.Context:
        try:
            ctx = super().make_context(info_name, args, *rest, **kwargs)
        except KeyboardInterrupt:
            _interrupted(_wants_json(args))
        except click.UsageError as exc:
            self._usage_error(exc, _wants_json(args))
        ctx.meta["patchset.json"] = _wants_json(args)
        return ctx

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            _interrupted(ctx.meta.get("patchset.json", False))
        except click.UsageError as exc:
            self._usage_error(exc, ctx.meta.get("patchset.json", False))

    @staticmethod
    def _usage_error(exc: click.UsageError, as_json: bool) -> NoReturn:
        if not as_json:
            raise exc
        exc.show()
        hint = f"try '{exc.ctx.command_path} --help'" if exc.ctx is not None else None
        emit_json({"error": {"kind": "usage", "message": exc.format_message(), "hint": hint, "exit": exc.exit_code}})
        sys.exit(exc.exit_code)


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
@click.version_option(__version__, "-V", "--version", package_name="patchset")
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


if __name__ == "__main__":
    main()

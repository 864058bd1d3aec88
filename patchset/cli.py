"""patchset's command line: parse arguments, call the packages, print the result.

This module is the plumbing every command shares (the ledger context, error mapping, JSON, the
one ``Term``, progress bars) and the top-level group; the commands live in ``patchset.clicmds``
and load only when they run (``COMMANDS``), so ``patchset list`` pays for no other command.

Exit codes (every command): 0 ok; 1 a finding (a patch that fails, a check that fails, a hash
mismatch, a regression); 2 bad input or environment (malformed ledger, missing file, network, a
usage error); 130 interrupted. Under ``--json`` an error is also ``{"error": {"kind", "message",
"hint", "exit"}}`` on stdout. Shell completion is click's (``_PATCHSET_COMPLETE``); patch ids and
target names complete from the ledger.
"""

from __future__ import annotations

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


def _one_of(names: Any) -> str:
    names = list(names)
    return f"one of: {', '.join(names)}" if names else "the ledger has no targets yet (`patchset target add NAME`)"


def emit_json(data: Any) -> None:
    import json

    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


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

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
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
        from patchset.text import terminal

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


json_opt = click.option(
    "--json", "as_json", is_flag=True, help='Machine-readable output on stdout (an error too: {"error": {...}}).'
)


# --------------------------------------------------------------------------- shared options
# One meaning per option name across commands: each of these is made here, once, so its metavar,
# its help's shape and its completion are the same wherever it appears.


def _quiet_ledger(ctx: click.Context) -> Any:
    """The ledger a command line being completed names (``-C``, ``--ledger``, else the current
    directory's), or None when there is none or it does not load: completion never fails and
    prints nothing of its own."""
    import contextlib
    import io
    import warnings

    params = ctx.find_root().params
    directory, ledger_arg = params.get("directory"), params.get("ledger_arg")
    try:
        quiet = io.StringIO()
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from patchset.ledger import store

            base = Path.cwd() / directory if directory is not None else Path.cwd()
            return store.load_ledger(store.find_ledger(base, Path(ledger_arg) if ledger_arg else None))
    except Exception:
        return None


def _word(value: str) -> bool:
    """A value the shell's completion protocol can carry as it is (no space, no control character)."""
    return bool(value) and value.isprintable() and not any(ch.isspace() for ch in value)


def complete_patch_ids(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    from click.shell_completion import CompletionItem

    led = _quiet_ledger(ctx)
    if led is None:
        return []
    items = []
    for p in led.patches:
        if p.id.startswith(incomplete) and _word(p.id):
            title = "".join(ch for ch in " ".join(str(p.title).split()) if ch.isprintable())[:100]
            items.append(CompletionItem(p.id, help=title or None))
    return items


def complete_targets(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    from click.shell_completion import CompletionItem

    led = _quiet_ledger(ctx)
    if led is None:
        return []
    return [CompletionItem(name) for name in led.targets if name.startswith(incomplete) and _word(name)]


def target_option(what: str, default: str, *, multiple: bool = False) -> Callable[[Any], Any]:
    """``--target NAME``: the ledger's target NAME, in every command ("The target NAME to WHAT
    (DEFAULT)."); completes from the ledger."""
    return click.option(
        "--target",
        "targets" if multiple else "target",
        multiple=multiple,
        default=None,
        metavar="NAME",
        help=f"The target NAME to {what} ({default}).",
        shell_complete=complete_targets,
    )


def tree_option(
    what: str, *, dest: str = "trees", multiple: bool = False, required: bool = False
) -> Callable[[Any], Any]:
    """``--tree [NAME=]DIR``: a build tree that is a plain directory (``NAME=`` names its target,
    needed only when several targets have patches), in every command that takes one."""
    return click.option(
        "--tree",
        dest,
        multiple=multiple,
        required=required,
        default=None,
        metavar="[NAME=]DIR",
        help=f"A build tree, a plain directory (NAME=: of target NAME); {what}.",
    )


def only_option(what: str, *, dest: str = "only") -> Callable[[Any], Any]:
    """``--only ID`` (repeatable): restrict a command to these patches; completes from the ledger."""
    return click.option(
        "--only",
        dest,
        multiple=True,
        metavar="ID",
        help=f"Only the patch ID (repeatable): {what}.",
        shell_complete=complete_patch_ids,
    )


def plan_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--plan``, ``--all``, ``--full-every N``: the verify plan (``patchset.verify.plan``), in
    ``verify`` and ``gate`` alike."""
    fn = click.option(
        "--full-every",
        "full_every",
        type=click.IntRange(min=0),
        default=7,
        show_default=True,
        metavar="N",
        help="Re-prove a patch whose proof is N runs old, whatever moved (the gate: N nights; 0: never by age).",
    )(fn)
    fn = click.option("--all", "all_", is_flag=True, help="Every patch: re-prove each one, carry no earlier verdict.")(
        fn
    )
    return click.option(
        "--plan",
        "plan_only",
        is_flag=True,
        help="Print the plan (what runs, what is carried and why, the engine starts) and start nothing.",
    )(fn)


def upstream_option(default: str) -> Callable[[Any], Any]:
    """``--upstream PATH|URL``: an upstream repository, a local clone or a URL to clone and fetch."""
    return click.option(
        "--upstream",
        "upstream",
        default=None,
        metavar="PATH|URL",
        help=f"An upstream clone: a local git repository, or a URL cloned and fetched into the cache (default: {default}).",
    )


def _positive_seconds(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    if value is not None and not value > 0:
        raise click.BadParameter(f"{value:g} is not a positive number of seconds")
    return value


def timeout_option() -> Callable[[Any], Any]:
    """``--timeout SECONDS``: the network time the whole command may spend (its requests together;
    each one also keeps its own limits). Default ``$PATCHSET_NET_COMMAND_DEADLINE``."""
    return click.option(
        "--timeout",
        "timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        callback=_positive_seconds,
        help="Spend at most SECONDS on the network in all (default $PATCHSET_NET_COMMAND_DEADLINE, 7200).",
    )


def apply_timeout(seconds: float | None) -> None:
    """Narrow the running command's network budget to ``seconds`` (``--timeout``)."""
    if seconds is None:
        return
    from patchset.upstream.net import current_budget

    budget = current_budget()
    if budget is not None:
        budget.limit(seconds)


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
    """``--tree DIR`` or ``--tree NAME=DIR`` (as in apply) for a command that works on one target:
    ``(target, DIR)``; ``NAME=`` picks the target when ``--target`` does not."""
    from patchset.commands.apply.target import parse_tree_args

    led = c.load()
    names = [target] if target else [t for t in led.targets if led.series(t)]
    if len(names) != 1:  # NAME= picks the target
        name, sep, rest = value.partition("=")
        if sep and name in led.targets and not rest.startswith("="):  # not PROJECT==VERSION
            return name, rest
        if not names:
            raise errors.InputError(f"{c.ledger_path} has no active patches")
    ((name, v),) = parse_tree_args((value,), kind, names).items()
    return name, v


def tree_dir(value: str, shown: str, kind: str = "tree") -> Path:
    """The directory of ``--tree`` (relative to the current directory, i.e. to ``-C``); InputError
    naming the path tried when it is not a directory."""
    path = Path(value).resolve()
    if not path.is_dir():
        raise errors.InputError(
            f"--{kind} {shown}: {path} is not a directory",
            hint=f"relative paths are taken from {Path.cwd()}" if not Path(value).is_absolute() else "",
        )
    return path


if __name__ == "__main__":
    main()

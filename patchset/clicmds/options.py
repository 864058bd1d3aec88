"""The options the commands share, each declared once, and the readers of their values.

One meaning per option name across commands: each decorator here gives its option the same
name, metavar, type, completion and shape of help wherever it appears; a command passes only
what differs (what it does with the option, its default). Commands use them as ``opt.NAME``
(``from patchset.clicmds import options as opt``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from patchset import errors
from patchset.cli import Ctx

Decorator = Callable[[Any], Any]


def stack(*decorators: Decorator) -> Decorator:
    """Several options as one decorator; ``--help`` lists them in the order given."""

    def apply(fn: Any) -> Any:
        for decorator in reversed(decorators):
            fn = decorator(fn)
        return fn

    return apply


# --------------------------------------------------------------------------- completion


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


# --------------------------------------------------------------------------- every command

json = click.option(
    "--json", "as_json", is_flag=True, help='Machine-readable output on stdout (an error too: {"error": {...}}).'
)


def dry_run(help: str) -> Decorator:
    """``--dry-run``: say what would be done, write nothing."""
    return click.option("--dry-run", is_flag=True, help=help)


def target(what: str, default: str, *, multiple: bool = False) -> Decorator:
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


def target_hint(names: Any) -> str:
    """The hint of an error about ``--target``: the names it may take."""
    names = list(names)
    return f"one of: {', '.join(names)}" if names else "the ledger has no targets yet (`patchset target add NAME`)"


def only(what: str) -> Decorator:
    """``--only ID`` (repeatable): restrict a command to these patches; completes from the ledger."""
    return click.option(
        "--only",
        multiple=True,
        metavar="ID",
        help=f"Only the patch ID (repeatable): {what}.",
        shell_complete=complete_patch_ids,
    )


def path(name: str, help: str, *, dest: str | None = None, metavar: str | None = None, **kind: bool) -> Decorator:
    """``--NAME PATH``: a path (a ``Path``; none by default); ``kind`` narrows it as
    ``click.Path`` does (``dir_okay=False``: not a directory)."""
    names = [name, dest] if dest else [name]
    return click.option(*names, type=click.Path(path_type=Path, **kind), default=None, metavar=metavar, help=help)


def value(name: str, metavar: str, help: str, *, dest: str | None = None, **how: Any) -> Decorator:
    """``--NAME METAVAR``: a value taken as given (none by default); ``how``: click's ``type``."""
    names = [name, dest] if dest else [name]
    return click.option(*names, default=None, metavar=metavar, help=help, **how)


def choice(name: str, words: list[str], help: str, *, dest: str | None = None, **how: Any) -> Decorator:
    """``--NAME WORD``: one of ``words``; ``how``: click's ``default`` (shown in ``--help``),
    ``multiple``, ``required``."""
    names = [name, dest] if dest else [name]
    return click.option(*names, type=click.Choice(words), show_default="default" in how, help=help, **how)


def out_dir(help: str) -> Decorator:
    """``--out DIR``: where a command writes what it builds (required)."""
    return click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), required=True, help=help)


def deprecated(name: str, dest: str, old: str, new: str, *, multiple: bool = False) -> Decorator:
    """A hidden option kept under its old name ``old``: warns, then stands for ``new``."""

    def warn(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value not in (None, (), False):
            click.echo(f"warning: {old} is deprecated; use {new}", err=True)
        return value

    value = {"multiple": True} if multiple else {"default": None}
    return click.option(name, dest, hidden=True, callback=warn, **value)


# --------------------------------------------------------------------------- trees and targets


def tree(what: str, *, dest: str = "trees", multiple: bool = False, required: bool = False) -> Decorator:
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


def from_index(help: str, *, dest: str = "spec", multiple: bool = False) -> Decorator:
    """``--from-index [NAME=]SPEC``: a release (a wheel) from the package index."""
    value = {"multiple": True} if multiple else {"default": None}
    return click.option("--from-index", dest, metavar="[NAME=]SPEC", help=help, **value)


def platform(when: str) -> Decorator:
    """``--platform``: which wheel of a release ``--from-index`` takes."""
    return click.option(
        "--platform",
        type=click.Choice(["native", "aarch64", "x86_64"]),
        default=None,
        help=f"{when}: the wheel's platform (default native; a pure wheel needs none).",
    )


def layout(help: str) -> Decorator:
    """``--layout source|installed``: how a build tree lays out the target's files."""
    return click.option("--layout", type=click.Choice(["source", "installed"]), default=None, help=help)


def base(help: str) -> Decorator:
    """``--base REF``: the upstream base a series applies to."""
    return click.option("--base", default=None, metavar="REF", help=help)


def path_map(help: str) -> Decorator:
    """``--map SRC=DST`` (repeatable): the path map of an installed layout."""
    return click.option("--map", "maps", multiple=True, metavar="SRC=DST", help=help)


package = click.option(
    "--package", default=None, metavar="NAME", help="Its name on the package index (for --from-index)."
)


def upstream(default: str) -> Decorator:
    """``--upstream PATH|URL``: an upstream repository, a local clone or a URL to clone and fetch."""
    return click.option(
        "--upstream",
        "upstream",
        default=None,
        metavar="PATH|URL",
        help=f"An upstream clone: a local git repository, or a URL cloned and fetched into the cache (default: {default}).",
    )


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


def one_target(c: Ctx, kind: str, value: str, target: str | None) -> tuple[str | None, str]:
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


# --------------------------------------------------------------------------- verify and gate

tags = click.option(
    "--tags",
    "tags",
    multiple=True,
    metavar="TAG[,TAG]",
    help="Run only tests carrying one of these tags (repeatable or comma-separated), e.g. cpu.",
)


def engine(which: str) -> Decorator:
    """``--engine NAME``: the engine every engine test runs on (``which``: the names it takes)."""
    return click.option(
        "--engine", default=None, metavar="NAME", help=f"Run every engine test on this engine ({which})."
    )


reuse = stack(
    click.option("--no-cache", is_flag=True, help="Measure again even when a tree's results are cached."),
    click.option(
        "--plan",
        "plan_only",
        is_flag=True,
        help="Print the plan (what runs, what is carried and why, the engine starts) and start nothing.",
    ),
    click.option("--all", "all_", is_flag=True, help="Every patch: re-prove each one, carry no earlier verdict."),
    click.option(
        "--full-every",
        "full_every",
        type=click.IntRange(min=0),
        default=7,
        show_default=True,
        metavar="N",
        help="Re-prove a patch whose proof is N runs old, whatever moved (the gate: N nights; 0: never by age).",
    ),
)
"""``--no-cache``, ``--plan``, ``--all``, ``--full-every N``: what a run carries from earlier runs
(the results cache, the verify plan's proofs: ``patchset.verify.plan``), in ``verify`` and ``gate``
alike; a command takes them as ``**reused`` and passes ``reused_args(reused)`` on."""


def reused_args(values: dict[str, Any]) -> dict[str, Any]:
    """The keywords of ``run_verify`` and ``run_gate`` that the ``reuse`` options set."""
    return {
        "use_cache": not values["no_cache"],
        "plan_only": values["plan_only"],
        "all_": values["all_"],
        "full_every": values["full_every"],
    }


# --------------------------------------------------------------------------- the network


def _positive_seconds(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    if value is not None and not value > 0:
        raise click.BadParameter(f"{value:g} is not a positive number of seconds")
    return value


timeout = click.option(
    "--timeout",
    "timeout",
    type=float,
    default=None,
    metavar="SECONDS",
    callback=_positive_seconds,
    help="Spend at most SECONDS on the network in all (default $PATCHSET_NET_COMMAND_DEADLINE, 7200).",
)
"""``--timeout SECONDS``: the network time the whole command may spend (its requests together;
each one also keeps its own limits); read by ``apply_timeout``."""


def apply_timeout(seconds: float | None) -> None:
    """Narrow the running command's network budget to ``seconds`` (``--timeout``)."""
    if seconds is None:
        return
    from patchset.upstream.net import current_budget

    budget = current_budget()
    if budget is not None:
        budget.limit(seconds)

"""CLI commands: the target's base: base detect."""

from __future__ import annotations

import click

from patchset import errors
from patchset.cli import Ctx, SuggestingGroup, emit_json, guarded, out
from patchset.clicmds import options as opt


@click.group(cls=SuggestingGroup)
def base() -> None:
    """The upstream commit the series is validated on (the target's ``base``)."""


@base.command("detect")
@opt.target("compare with", "default: the only target with active patches")
@opt.tree("its version files name the commit it was built from (vllm/_version.py, dist-info)")
@click.option(
    "--image",
    default=None,
    metavar="REF",
    help="An image: its tag (nightly-<commit>) and, where docker runs, its label ai.vllm.build.commit.",
)
@opt.upstream("none: a commit prefix is resolved only against the target's recorded base")
@opt.json
@click.pass_obj
@guarded
def detect(c: Ctx, target: str | None, trees: str | None, image: str | None, upstream: str | None, as_json) -> int:
    """Which upstream commit a build tree or an image is, against the target's base.

    \b
    A nightly names its commit as a prefix in its version (0.30.1rc1.dev48+g7f1a539: 7f1a539);
    the prefix is resolved in --upstream (a clone), else matched against the recorded base;
    never derived from the version numbers.
    Exit 0 the same commit (or nothing to compare); 1 another commit, or clues that disagree;
    2 nothing found, bad input.
    """
    from patchset.commands.basedetect import detect as do_detect
    from patchset.commands.basedetect import render

    led = c.load()
    name = target
    tree = None
    if trees is not None:
        value = trees
        prefix, sep, rest = trees.partition("=")
        if sep and prefix in led.targets and not rest.startswith("=") and target in (None, prefix):
            name, value = prefix, rest  # --tree NAME=DIR
        tree = opt.tree_dir(value, trees)
    if name is None:
        names = [t for t in led.targets if led.series(t)] or list(led.targets)
        if len(names) != 1:
            raise errors.InputError("which target? pass --target NAME", hint=opt.target_hint(led.targets))
        name = names[0]
    if name not in led.targets:
        raise errors.InputError(f"unknown target {name!r}", hint=opt.target_hint(led.targets))
    check = do_detect(led.targets[name], led.path, tree=tree, image=image, upstream=upstream)
    if as_json:
        emit_json(check.to_json())
    else:
        render(out, check)
    return check.exit_code

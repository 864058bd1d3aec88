"""CLI commands: the target's base: base detect."""

from __future__ import annotations

from pathlib import Path

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
@opt.value(
    "--image", "REF", "An image: its tag (nightly-<commit>) and, where docker runs, its label ai.vllm.build.commit."
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


@base.command("find")
@opt.target("search for", "default: the only target")
@opt.value(
    "--since",
    "VERSION",
    "The oldest release (with --upstream: commit) to search (default: the 12 newest final releases, 500 commits).",
)
@opt.upstream("none: releases from the package index; a clone: its commits, newest first")
@opt.json
@click.pass_obj
@guarded
def find(c: Ctx, target: str | None, since: str | None, upstream: str | None, as_json: bool) -> int:
    """The releases the target's series applies to with zero fuzz, newest first.

    \b
    From the package index, probed by release order (galloping from the newest, then bisecting
    each edge of the run that fits), not one by one; verdicts cached per series and release.
    Exit 0 when some release fits, 1 when none of those checked does, 2 bad input.
    """
    from patchset.clicmds.rebasing import upstream_clone
    from patchset.commands.importer import choose_target
    from patchset.commands.onboard.bases import Find, commits, fitting, releases, search

    led = c.load()
    t = choose_target(led, target)
    if upstream is None:
        f, what, shown = Find(led, t, releases(t, since)), "release(s)", lambda v: f"{t.package}=={v}"
    else:
        clone = Path(str(upstream_clone(upstream, "HEAD")))
        f, what, shown = Find(led, t, commits(clone, since), clone=clone), "commit(s)", lambda v: v[:12]
    if not as_json:
        f.heard = lambda v, ok: out.line(f"{shown(v)}: {'applies' if ok else 'does not apply'}", indent="  ")
    search(f)
    fit = fitting(f)
    if as_json:
        emit_json(f.to_json())
    elif fit:
        span = (
            ", ".join(map(shown, fit))
            if upstream is None
            else f"{len(fit)} commit(s), {shown(fit[0])} … {shown(fit[-1])}"
        )
        out.line(f"target {t.name} applies with zero fuzz to: {span}")
        out.line(f"checked {len(f.verdicts)} of {len(f.versions)} {what} ({f.cached} from the cache)")
        out.line(f"next: patchset target set {t.name} --base {fit[0] if upstream else shown(fit[0])}")
    else:
        out.line(f"target {t.name}: no {what[:-3]} checked fits ({len(f.verdicts)} of {len(f.versions)} checked)")
    return 0 if fit else 1

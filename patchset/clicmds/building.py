"""CLI commands: build wheel and build overlay."""

from __future__ import annotations

from pathlib import Path

import click

from patchset import errors
from patchset.cli import Ctx, _progress_bar, emit_json, guarded, json_opt, out
from patchset.commands.table import Styled


@click.group()
def build() -> None:
    """What gets deployed: a patched wheel, or an overlay over a stock image."""


@build.command("wheel")
@click.option("--target", default=None, help="The target whose series to apply (default: the only one).")
@click.option(
    "--from-index",
    "spec",
    default=None,
    metavar="SPEC",
    help="A wheel from the package index, e.g. flashinfer-python==0.6.18.post1.",
)
@click.option(
    "--wheel", "wheel_file", type=click.Path(dir_okay=False, path_type=Path), default=None, help="A wheel file."
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Directory for the wheel: new, empty, or one patchset wrote before (it holds .patchset-output).",
)
@json_opt
@click.pass_obj
@guarded
def build_wheel(c: Ctx, target, spec, wheel_file, out_dir, as_json) -> int:
    """A wheel with the series applied: version VERSION+ps.<hash of the lock>, RECORD rewritten.

    \b
    Exit 0 written; 1 the series does not apply or a file would not match the lock (nothing is
    written); 2 bad input (a hostile wheel member, --out not empty and not patchset's) or environment.
    """
    from patchset.build.series import pick_target
    from patchset.build.wheel import build_wheel as do_build
    from patchset.build.wheel import fetch_wheel

    if (spec is None) == (wheel_file is None):
        raise errors.InputError("give one of --from-index SPEC or --wheel FILE")
    led = c.load()
    tgt = pick_target(led, target)
    with _progress_bar() as bar:
        path = wheel_file.resolve() if wheel_file else fetch_wheel(spec, progress=bar.callback("", unit="bytes"))
        rep = do_build(led, tgt, path, out_dir.resolve(), progress=bar.callback("build wheel"))
    if as_json:
        emit_json(rep.to_json())
    elif rep.ok:
        out.line(Styled("built", "green"), f" {rep.message}")
        out.line(str(rep.wheel), indent="  ")
    else:
        out.line(Styled(rep.outcome, "red"), f" {rep.message}")
        for p in rep.mismatched:
            out.line(f"does not match the lock: {p}", indent="  ")
    return 0 if rep.ok else 1


@build.command("overlay")
@click.option("--target", default=None, help="The target whose series the tree carries (default: the only one).")
@click.option("--tree", type=click.Path(file_okay=False, path_type=Path), required=True, help="The patched build tree.")
@click.option(
    "--layout",
    type=click.Choice(["source", "installed"]),
    default=None,
    help="Layout of the tree (default: the target's).",
)
@click.option(
    "--base-image", default=None, metavar="IMAGE", help="FROM of the Dockerfile (default: the target's base_image)."
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="A new or empty directory, or an overlay patchset wrote before (replaced whole).",
)
@json_opt
@click.pass_obj
@guarded
def build_overlay(c: Ctx, target, tree, layout, base_image, out_dir, as_json) -> int:
    """The patched files in the installed layout, EXPECTED.sha256, a Dockerfile and build.sh.

    \b
    Exit 0 written; 1 a patched file of the tree does not match the lock (nothing is written);
    2 bad input (no installed_root or base image, --out not empty and not patchset's, a path leaving
    the tree).
    """
    from patchset.build.overlay import build_overlay as do_build
    from patchset.build.series import pick_target

    led = c.load()
    tgt = pick_target(led, target)
    rep = do_build(led, tgt, tree.resolve(), out_dir.resolve(), layout=layout, base_image=base_image)
    if as_json:
        emit_json(rep.to_json())
    elif rep.ok:
        out.line(Styled("built", "green"), f" {rep.message}")
        for w in rep.written:
            out.line(str(w), indent="  ")
    else:
        out.line(Styled(rep.outcome, "red"), f" {rep.message}")
        for p in rep.mismatched + rep.missing:
            out.line(str(p), indent="  ")
    return 0 if rep.ok else 1

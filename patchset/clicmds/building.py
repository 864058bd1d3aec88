"""CLI commands: build wheel and build overlay."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from patchset import errors
from patchset.cli import Ctx, SuggestingGroup, emit_json, guarded, out, progress_bar
from patchset.clicmds import options as opt
from patchset.commands.table import Styled


@click.group(cls=SuggestingGroup)
def build() -> None:
    """What gets deployed: a patched wheel, or an overlay over a stock image."""


@build.command("wheel")
@opt.target("build", "default: the only target with active patches")
@opt.from_index("A wheel from the package index, as in apply, e.g. flashinfer-python==0.6.18.post1.")
@opt.path("--wheel", "A wheel file.", dest="wheel_file", dir_okay=False)
@opt.platform("With --from-index")
@opt.out_dir("Directory for the wheel: new, empty, or one patchset wrote before (it holds .patchset-output).")
@opt.json
@click.pass_obj
@guarded
def build_wheel(c: Ctx, target, spec, wheel_file, platform, out_dir, as_json) -> int:
    """A wheel with the series applied: version VERSION+ps.<hash of the lock>, RECORD rewritten.

    \b
    Exit 0 written; 1 the series does not apply or a file would not match the lock (nothing is
    written); 2 bad input (a hostile wheel member, --out not empty and not patchset's) or environment.
    """
    from patchset.build.series import pick_target
    from patchset.build.wheel import build_wheel as do_build
    from patchset.build.wheel import fetch_wheel
    from patchset.commands.views import render_hashes

    if (spec is None) == (wheel_file is None):
        raise errors.InputError("give one of --from-index SPEC or --wheel FILE")
    if platform and wheel_file is not None:
        raise errors.InputError("--platform goes with --from-index (a --wheel file is used as it is)")
    if spec is not None:
        target, spec = opt.one_target(c, "from-index", spec, target)
    led = c.load()
    tgt = pick_target(led, target)
    with progress_bar() as bar:
        path = (
            wheel_file.resolve() if wheel_file else fetch_wheel(spec, platform, progress=bar.callback("", unit="bytes"))
        )
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
            render_hashes(out, rep.hashes.get(p), indent="    ")
    return 0 if rep.ok else 1


@build.command("overlay")
@opt.target("build", "default: the only target with active patches")
@opt.tree("one the series was applied to (apply --tree, --from-index --into)", dest="tree", required=True)
@opt.layout("Layout of the tree (default: the target's).")
@opt.value("--base-image", "IMAGE", "FROM of the Dockerfile (default: the target's base_image).")
@opt.out_dir("A new or empty directory, or an overlay patchset wrote before (replaced whole).")
@opt.json
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
    from patchset.commands.views import render_hashes

    target, value = opt.one_target(c, "tree", tree, target)
    led = c.load()
    tgt = pick_target(led, target)
    root = opt.tree_dir(value, tree)
    rep = do_build(led, tgt, root, out_dir.resolve(), layout=layout, base_image=base_image)
    hashes = {} if rep.ok else _refused_hashes(tgt, tgt.layout_or(layout), root, rep)
    if as_json:
        emit_json({**rep.to_json(), "hashes": hashes})
    elif rep.ok:
        out.line(Styled("built", "green"), f" {rep.message}")
        for w in rep.written:
            out.line(str(w), indent="  ")
    else:
        out.line(Styled(rep.outcome, "red"), f" {rep.message}")
        for p in rep.mismatched + rep.missing:
            out.line(str(p), indent="  ")
            render_hashes(out, hashes.get(p), indent="    ")
    return 0 if rep.ok else 1


def _refused_hashes(tgt: Any, layout: str, tree: Path, rep: Any) -> dict[str, dict[str, str | None]]:
    """For each file the overlay refused: the sha256 the lock expects and the one the tree's
    file has (None: no file). ``rep.files`` maps installed paths to the lock's sha256; a
    source-layout tree holds them under the path map's source paths (as ``build.overlay`` reads)."""
    from patchset.confine import confine
    from patchset.ledger.lock import sha256_bytes

    refused = {*rep.mismatched, *rep.missing}
    out: dict[str, dict[str, str | None]] = {}
    for inst, expected in rep.files.items():
        rel = tgt.from_installed(inst, layout)
        if rel not in refused:
            continue
        try:
            f = confine(tree, rel, what=f"locked file {rel!r}")
            actual = sha256_bytes(f.read_bytes()) if f.is_file() else None
        except (OSError, errors.PatchsetError):
            actual = None
        out[rel] = {"expected": expected, "actual": actual}
    return out

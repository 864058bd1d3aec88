"""CLI commands: apply and recover."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from patchset import errors
from patchset.cli import Ctx, emit_json, guarded, out, progress_bar
from patchset.clicmds import options as opt


@click.command()
@opt.tree("patched in place, e.g. a site-packages copy (repeatable)", multiple=True)
@click.option(
    "--repo",
    "repos",
    multiple=True,
    metavar="[NAME=]DIR",
    help="A git checkout (NAME=: of target NAME): one commit per patch on a new branch (repeatable).",
)
@opt.from_index(
    "A release from the package index, e.g. vllm==0.30.0 (downloaded once, cached).", dest="specs", multiple=True
)
@click.option("--into", "intos", multiple=True, metavar="[NAME=]DIR", help="Where --from-index unpacks the tree.")
@opt.platform("--from-index of an installed layout")
@opt.target("apply", "default: every target with active patches")
@opt.layout("Layout of the tree (default: the target's ledger entry).")
@click.option("--branch", default="", metavar="NAME", help="Branch for --repo (default patchset/<target>).")
@click.option(
    "--fuzz", type=int, default=0, show_default=True, metavar="N", help="Allow fuzz (recorded in the report)."
)
@click.option("--update-lock", is_flag=True, help="Record the resulting file hashes in the lock.")
@opt.dry_run("Check that everything applies and matches; write nothing.")
@click.option(
    "--skip-applied", is_flag=True, help="On a --tree that carries part of the series, apply only the missing patches."
)
@click.option(
    "--remove-empty",
    is_flag=True,
    help="Remove files a patch leaves empty (GNU patch -E, as dpkg-source applies); --tree and --from-index.",
)
@click.option(
    "--strict-base",
    is_flag=True,
    help="Refuse a --tree whose version files name another upstream commit than the target's base "
    "(default: a warning).",
)
@click.option(
    "--durable",
    is_flag=True,
    default=None,
    help="fsync every step so the apply also survives a power cut (default: $PATCHSET_FSYNC; "
    "a kill or Ctrl-C is always safe).",
)
@opt.json
@click.pass_obj
@guarded
def apply(
    c: Ctx,
    trees,
    repos,
    specs,
    intos,
    platform,
    target,
    layout,
    branch,
    fuzz,
    update_lock,
    dry_run,
    skip_applied,
    remove_empty,
    strict_base,
    durable,
    as_json,
) -> int:
    """Apply the series to build trees: zero fuzz, atomic, byte-checked against the lock.

    \b
    Exit 0: applied (or the tree already carries the series); 1: a patch fails, the tree carries
    part of the series, or a file would not match the lock (nothing is written in each case);
    2: bad input or environment.
    """
    from patchset.commands.apply import run as run_apply
    from patchset.commands.apply.target import ApplyRun, TreeArg, TreeKind, parse_tree_args

    led = c.load()
    names = [target] if target else [t for t in led.targets if led.series(t)]
    if target and target not in led.targets:
        raise errors.InputError(f"unknown target {target!r}", hint=opt.target_hint(led.targets))
    if not names:
        raise errors.InputError(
            f"{c.ledger_path} has no active patches to apply",
            hint="bring patches in with `patchset import DIR` (a folder of .patch files, a quilt series)",
        )
    chosen: dict[str, TreeArg] = {}
    for kind, values in (("tree", trees), ("repo", repos)):
        for name, value in parse_tree_args(values, kind, names).items():
            chosen[name] = TreeArg(TreeKind(kind), opt.tree_dir(value, value, kind), layout=layout or "", branch=branch)
    spec_map = parse_tree_args(_name_specs(specs, led, names), "from-index", names)
    if len(intos) == 1 and len(spec_map) > 1 and intos[0].partition("=")[0] not in names:
        into_map = {name: str(Path(intos[0]) / name) for name in spec_map}  # one --into: DIR/<target> each
    else:
        into_map = parse_tree_args(intos, "into", names)
    for name, spec in spec_map.items():
        if name not in into_map:
            raise errors.InputError(f"--from-index {spec} needs --into DIR (where the patched tree goes)")
        chosen[name] = TreeArg(
            TreeKind.INDEX, Path(into_map[name]).resolve(), spec=spec, layout=layout or "", platform=platform or ""
        )
    if not chosen:
        raise errors.InputError(
            "no build tree given", hint="pass --tree DIR, --repo DIR or --from-index SPEC --into DIR"
        )
    if platform and not spec_map:
        raise errors.InputError("--platform goes with --from-index (it picks the wheel of an installed layout)")
    with progress_bar() as bar:
        job = ApplyRun(
            led,
            fuzz=fuzz,
            update_lock=update_lock,
            dry_run=dry_run,
            skip_applied=skip_applied,
            remove_empty=remove_empty,
            durable=durable or None,
            strict_base=strict_base,
            progress=bar.callback("apply"),
            download_progress=bar.callback("", unit="bytes"),
        )
        reports = run_apply(job, chosen)
    if as_json:
        emit_json({"ok": all(r.ok for r in reports), "targets": [r.to_json() for r in reports]})
    else:
        from patchset.commands.views import render_apply

        render_apply(out, reports)
    return 0 if all(r.ok for r in reports) else 1


@click.command()
@opt.tree(
    "one an apply was interrupted in (repeatable; default: the trees the ledger names, else the current directory)",
    multiple=True,
)
@click.option(
    "--back", is_flag=True, help="Undo the interrupted apply (put the old files back) instead of finishing it."
)
@opt.json
@click.pass_obj
@guarded
def recover(c: Ctx, trees: tuple[str, ...], back: bool, as_json: bool) -> int:
    """Finish (or with --back undo) an apply or a ledger edit that was interrupted (kill -9, power loss)."""
    from patchset.commands.recover import recover_trees

    done = recover_trees([_recover_dir(t) for t in trees], c.ledger_path, back=back)
    if as_json:
        emit_json(done)
    else:
        for d in done:
            out.line(f"{d.get('tree') or d['ledger']}: {d['done']}")
    return 0


def _name_specs(specs: tuple[str, ...], led: Any, names: list[str]) -> tuple[str, ...]:
    """``--from-index vllm==0.30.0`` names its target by the project: the target whose package
    (or name) is ``vllm``. Values that already say ``NAME=`` are kept."""
    import re

    named = []
    for v in specs:
        name, sep, rest = v.partition("=")
        if len(names) > 1 and not (sep and name in names and not rest.startswith("=")):
            project = re.split(r"[=<>!~\s\[]", v, maxsplit=1)[0]
            match = [t for t in names if project in (led.targets[t].package, t)]
            if len(match) == 1:
                v = f"{match[0]}={v}"
        named.append(v)
    return tuple(named)


def _recover_dir(value: str) -> Path:
    """``--tree [NAME=]DIR`` as apply takes it. The ledger is not read to tell a target name from a
    directory (recovery must work while the ledger is half-edited): ``NAME=`` is dropped when the
    whole value is not a directory and NAME is a plain word."""
    name, sep, rest = value.partition("=")
    if sep and rest and name and "/" not in name and not Path(value).is_dir():
        return Path(rest).resolve()
    return Path(value).resolve()

"""The job matrices of the workflows, as JSON, from the ledger.

``tests``: one entry per active patch that has a test the tags select (``{"patch", "tags"}``), so
the gate's per-patch tests fan out one job per patch and a long series gates in the time of its
slowest patch. ``targets``: one entry per target with active patches, their bodies and a base, for the
workflow that applies every ledger on every push (``{"ledger", "target", "onto", "upstream"}``:
``upstream`` is empty when the base is a release the package index has).

    python -m patchset.ci.scripts.matrix tests --ledger patches.toml --tags cpu [--output matrix]
    python -m patchset.ci.scripts.matrix targets --ledger patches.toml --ledger examples/x/patches.toml
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from patchset.ci.scripts._common import main_guard, set_output
from patchset.ci.upstream import is_release
from patchset.ledger.store import load_ledger
from patchset.text import split_list
from patchset.verify.selection import selected


def tests_matrix(ledger_path: Path, tags: list[str], target: str | None = None) -> dict:
    ledger = load_ledger(ledger_path)
    wanted = [] if "all" in tags else tags
    include = []
    for p in ledger.series(target):
        if any(selected(spec, wanted) for spec in p.tests):
            include.append({"patch": p.id, "target": p.target, "tags": ",".join(tags)})
    return {"include": include}


def targets_matrix(ledgers: list[Path]) -> dict:
    include = []
    for path in ledgers:
        ledger = load_ledger(path)
        for name, t in ledger.targets.items():
            active = ledger.series(name)
            if not active or not t.base or not all(ledger.body_file(p).is_file() for p in active):
                continue  # nothing to apply, no base to apply to, or bodies not imported here
            release = bool(t.package) and is_release(t.base)
            include.append(
                {"ledger": str(path.parent), "target": name, "onto": t.base, "upstream": "" if release else t.upstream}
            )
    return {"include": include}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m patchset.ci.scripts.matrix", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tests", help="one job per patch with a selected test")
    t.add_argument("--ledger", type=Path, default=Path("patches.toml"))
    t.add_argument("--tags", action="append", default=[], help="test tags (comma-separated or repeated)")
    t.add_argument("--target", default=None)
    t.add_argument("--output", default="", help="also set this GitHub step output")
    g = sub.add_parser("targets", help="one job per ledger target with active patches")
    g.add_argument("--ledger", type=Path, action="append", required=True)
    g.add_argument("--output", default="")
    args = ap.parse_args(argv)
    if args.cmd == "tests":
        data = tests_matrix(args.ledger, split_list(args.tags), args.target)
    else:
        data = targets_matrix(args.ledger)
    text = json.dumps(data, separators=(",", ":"))
    print(text)
    if args.output:
        set_output(args.output, text)
        set_output(f"{args.output}_size", str(len(data["include"])))
    return 0


if __name__ == "__main__":
    main_guard(main)

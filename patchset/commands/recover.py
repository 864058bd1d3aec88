"""``patchset recover``: finish or undo what a killed run left, a ledger edit and applies to trees.

The trees are those named, else those the ledger's notes name (``commands.interrupted``), else
the current directory; each is recovered under its tree lock (``patchset.engine.tree.recover``).
"""

from __future__ import annotations

from pathlib import Path

from patchset.commands.interrupted import interrupted_trees
from patchset.engine.tree import recover
from patchset.errors import InputError
from patchset.ledger import store as ledger_mod


def recover_trees(trees: list[Path], ledger_path: Path | None, back: bool = False) -> list[dict[str, str]]:
    """``patchset recover``: finish (or ``back``: undo) an interrupted ledger edit and the
    interrupted apply of each tree.

    The ledger edit first (``{"ledger", "done"}``). Without trees: those the ledger's notes name,
    else the current directory. One ``{"tree", "done"}`` per tree: ``rolled forward``, ``rolled
    back``, ``discarded`` (killed while staging) or ``nothing to recover``."""
    out = []
    if ledger_path is not None and ledger_mod.pending_edit(ledger_path.parent):
        done = ledger_mod.recover_edit(ledger_path.parent, "back" if back else "auto")
        out.append({"ledger": str(ledger_path), "done": done or "nothing to recover"})
    if not trees:
        found = interrupted_trees(ledger_path.parent) if ledger_path is not None and ledger_path.is_file() else []
        trees = found or ([] if out else [Path.cwd()])
    for tree in trees:
        if not tree.is_dir():
            raise InputError(f"--tree {tree}: not a directory")
        done = recover(tree, "back" if back else "auto")
        out.append({"tree": str(tree), "done": done or "nothing to recover"})
    return out

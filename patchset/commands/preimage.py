"""The files a target's active series leaves on its base: what a patch appended to it starts from.

An overlay file or an edit script's result becomes the last patch of a target's series, so its
diff is taken from the base *with the earlier patches applied* (an overlay of a file an earlier
patch changed must not undo that patch's change, nor fail on top of it). Computed in memory with
the apply engine's own file applier, zero fuzz; a series that does not apply to the base given is
an error naming the patch.
"""

from __future__ import annotations

from collections.abc import Callable

from patchset.engine.hunks import apply_file
from patchset.errors import InputError, PatchFormatError
from patchset.ledger.model import Ledger, Target
from patchset.patchfmt.diffs import parse_patch


def series_files(
    ledger: Ledger, target: Target, read: Callable[[str], bytes | None], skip: set[str] | frozenset[str] = frozenset()
) -> dict[str, bytes | None]:
    """``{path: bytes or None (deleted)}`` for every file the target's active series (patches in
    ``skip`` left out) changes, applied in order onto the base ``read`` gives."""
    state: dict[str, bytes | None] = {}
    for p in ledger.series(target.name):
        if p.id in skip or not ledger.body_file(p).is_file():
            continue
        strip = p.source.strip if p.source.strip is not None else target.strip
        try:
            fps = parse_patch(ledger.body_file(p).read_bytes(), strip, source=p.body_path)
        except PatchFormatError:
            continue  # validate reports an unreadable body; it changes nothing here
        for fp in fps:
            src = fp.path
            data = state[src] if src in state else read(src)
            out = apply_file(data, fp)
            if not out.ok:
                raise InputError(
                    f"{src}: patch {p.id} of the {target.name} series does not apply to the base given "
                    f"({out.message or 'it does not fit'})",
                    hint="the series is on another base: check --base, or rebase the series first",
                )
            if fp.op in ("rename", "delete"):
                state[src] = None
            state[fp.target or src] = out.new
    return state

"""Allow a ledger's commands the way a user does (``patchset allow --yes``'s model): tests that run
edit scripts, engines or test commands through the command line need it, as a user would."""

from __future__ import annotations

from pathlib import Path

from patchset.ledger import consent
from patchset.ledger.store import load_ledger


def allow_ledger(path: Path) -> list[str]:
    """Record every command of the ledger at ``path`` (a ``patches.toml``, or its directory) as
    allowed in this test session's state directory; the keys recorded."""
    path = Path(path)
    if path.is_dir():
        path = path / "patches.toml"
    return [c.key for c in consent.allow(load_ledger(path))]

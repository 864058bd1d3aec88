"""Small ledgers for rule tests: a valid head to build on, and the line a case marks as the culprit."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchset.errors import LedgerError
from patchset.ledger.model import Ledger
from patchset.ledger.store import load_ledger

HEAD = 'schema = 1\n[targets.demo]\nupstream = "u"\ngithub = "a/b"\n\n'
PATCH = '[[patch]]\nid = "a"\ntarget = "demo"\ntitle = "t"\norigin = "ours"\n'
MARK = "# here"


def marked_line(text: str) -> int:
    """The 1-based line that carries the ``# here`` comment: where the error must point."""
    lines = [i for i, ln in enumerate(text.splitlines(), start=1) if ln.rstrip().endswith(MARK)]
    assert len(lines) == 1, f"mark exactly one line with {MARK!r}"
    return lines[0]


def load_text(tmp_path: Path, text: str) -> Ledger:
    path = tmp_path / "patches.toml"
    path.write_text(text)
    return load_ledger(path)


def refused(tmp_path: Path, text: str) -> LedgerError:
    """Load ``text`` as patches.toml; it must be refused at its marked line. Returns the error."""
    with pytest.raises(LedgerError) as exc:
        load_text(tmp_path, text)
    err = exc.value
    assert err.where is not None
    assert Path(err.where.file) == tmp_path / "patches.toml"
    assert err.where.line == marked_line(text), (err.render(), text)
    return err

"""Domain exceptions shared by every patchset package.

Each exception carries the exit code the CLI must return, so commands never map errors by hand:
0 ok, 1 a finding (a failed patch, a failed check, a hash mismatch), 2 bad input or environment.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

EXIT_OK = 0
EXIT_FINDING = 1
EXIT_INPUT = 2


class PatchsetError(Exception):
    """Base class: something the user must act on. Never shown as a traceback."""

    exit_code: int = EXIT_INPUT

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def render(self) -> str:
        text = self.message
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text


@dataclass
class Location:
    """Where in an input file a problem is: file, optional 1-based line, optional key path."""

    file: Path | str
    line: int | None = None
    key: str | None = None

    def __str__(self) -> str:
        out = str(self.file)
        if self.line:
            out += f":{self.line}"
        if self.key:
            out += f": {self.key}"
        return out


class InputError(PatchsetError):
    """Bad input: a malformed ledger, patch file or argument. Exit code 2."""

    exit_code = EXIT_INPUT

    def __init__(self, message: str, *, where: Location | None = None, hint: str | None = None) -> None:
        self.where = where
        super().__init__(f"{where}: {message}" if where else message, hint=hint)


class LedgerError(InputError):
    """The ledger (patches.toml) or its lock is malformed."""


class PatchFormatError(InputError):
    """A patch body cannot be parsed."""


class EnvironmentFailure(PatchsetError):
    """The environment failed: network, disk, a missing tool. Exit code 2."""

    exit_code = EXIT_INPUT


class UnsafePathError(InputError):
    """A patch names a path that escapes the build tree."""


class ForeignJournal(InputError):
    """A transaction journal this installation did not write (shipped in a tree, an archive or a
    cloned ledger, copied from another user, or damaged): it is never replayed and left alone."""


class ForeignState(InputError):
    """Recorded state under ``.patchset/`` (a rebase in progress, its backups, the gate's state)
    this installation did not write (it came with a cloned ledger, from another user or an older
    patchset, or is damaged): never replayed, left alone, exit 2."""


class Finding(PatchsetError):
    """A result the user asked about came out bad: exit code 1."""

    exit_code = EXIT_FINDING


class ApplyFailed(Finding):
    """A patch does not apply; the tree was left untouched."""


class HashMismatch(Finding):
    """Patched files do not match the lock."""

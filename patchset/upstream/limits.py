"""How much one release archive may unpack to: total bytes, members, bytes per member, mtimes.

Any index (or a tampered mirror) can serve an archive that unpacks without end. The readers count
every member against one :class:`Budget` per pass and refuse it before its bytes are read. The
defaults are several times the largest real releases (the vLLM x86_64 wheel: 772 MB in 5,098
members, the largest 308 MB; the sdist: 8,108 members): ``PATCHSET_ARCHIVE_MAX_BYTES`` (4G, tar
headers included), ``PATCHSET_ARCHIVE_MAX_MEMBER_BYTES`` (1G) and ``PATCHSET_ARCHIVE_MAX_MEMBERS``
(50000), in ``patchset.envlimits``' syntax.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from patchset import envlimits
from patchset.errors import InputError

MAX_BYTES_ENV = "PATCHSET_ARCHIVE_MAX_BYTES"
MAX_MEMBER_BYTES_ENV = "PATCHSET_ARCHIVE_MAX_MEMBER_BYTES"
MAX_MEMBERS_ENV = "PATCHSET_ARCHIVE_MAX_MEMBERS"

DEFAULT_MAX_BYTES = 4 << 30
DEFAULT_MAX_MEMBER_BYTES = 1 << 30
DEFAULT_MAX_MEMBERS = 50_000
# A pax or GNU long-name header, a symlink target: real ones are a few hundred bytes at most.
MAX_HEADER_BYTES = 1 << 20
MAX_LINK_BYTES = 4096
# Timestamps: from the epoch to the last second of year 9999 (what every tool can represent).
MAX_MTIME = 253_402_300_799


def _shown(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


@dataclass(frozen=True)
class ArchiveLimits:
    """The bounds one pass over one archive must stay within."""

    max_bytes: int = DEFAULT_MAX_BYTES
    max_member_bytes: int = DEFAULT_MAX_MEMBER_BYTES
    max_members: int = DEFAULT_MAX_MEMBERS

    @classmethod
    def from_env(cls) -> ArchiveLimits:
        """The defaults, overridden by ``PATCHSET_ARCHIVE_MAX_*`` (read by ``patchset.envlimits``'s rules)."""
        return cls(
            max_bytes=envlimits.size(MAX_BYTES_ENV, DEFAULT_MAX_BYTES),
            max_member_bytes=envlimits.size(MAX_MEMBER_BYTES_ENV, DEFAULT_MAX_MEMBER_BYTES),
            max_members=envlimits.size(MAX_MEMBERS_ENV, DEFAULT_MAX_MEMBERS, unit="members"),
        )


class Budget:
    """What one pass over ``archive`` has used of its :class:`ArchiveLimits` so far."""

    def __init__(self, archive: Path | str, limits: ArchiveLimits | None = None) -> None:
        self.archive = archive
        self.limits = limits or ArchiveLimits.from_env()
        self.used = 0  # bytes of member contents (and, for tar, headers) taken so far
        self.members = 0

    def _refuse(self, what: str, env: str) -> InputError:
        return InputError(
            f"archive {self.archive} {what}",
            hint=f"the archive is hostile or broken; if it is a genuine release, raise {env}",
        )

    def take_member(self, name: str) -> None:
        """Count one more member (file, directory or link) named ``name``."""
        self.members += 1
        if self.members > self.limits.max_members:
            raise self._refuse(
                f"has more than {self.limits.max_members} members (at {name!r})",
                MAX_MEMBERS_ENV,
            )

    def check_size(self, name: str, size: int, *, header: bool = False) -> None:
        """Refuse a negative ``size`` or one past a limit, before any of its bytes are read."""
        if size < 0:
            raise InputError(
                f"archive {self.archive} is damaged: member {name!r} has a negative size ({size})",
                hint="the archive is hostile or broken; do not use it",
            )
        if header and size > MAX_HEADER_BYTES:
            raise InputError(
                f"archive {self.archive} is damaged: an extended header before {name!r} is {_shown(size)} "
                f"(at most {_shown(MAX_HEADER_BYTES)})",
                hint="the archive is hostile or broken; do not use it",
            )
        if not header and size > self.limits.max_member_bytes:
            raise self._refuse(
                f"member {name!r} is {_shown(size)}, more than the {_shown(self.limits.max_member_bytes)} "
                f"allowed for one member",
                MAX_MEMBER_BYTES_ENV,
            )
        if self.used + size > self.limits.max_bytes:
            raise self._refuse(
                f"unpacks to more than {_shown(self.limits.max_bytes)} (at member {name!r})",
                MAX_BYTES_ENV,
            )

    def take(self, name: str, size: int, *, header: bool = False) -> None:
        """``check_size`` and count ``size`` bytes as used."""
        self.check_size(name, size, header=header)
        self.used += size


def check_mtime(value: float, name: str, archive: Path | str) -> int:
    """``value`` as whole seconds, refusing a non-finite, negative or absurd timestamp."""
    if not math.isfinite(value) or not 0 <= value <= MAX_MTIME:
        raise InputError(
            f"archive {archive} is damaged: member {name!r} has an impossible timestamp ({value!r})",
            hint="timestamps must lie between 1970 and 9999; the archive is hostile or broken",
        )
    return int(value)

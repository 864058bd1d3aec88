"""What a deployable artifact needs to know about a target's series: its label and its files.

A patched wheel and an image overlay both carry the label ``ps.<short hash>`` (a PEP 440 local
version) of the target's part of the lock (base, bodies, patched files), which changes when, and
only when, what gets deployed changes; and exactly the files the lock records, each checked with
``patchset.confine.check_relative`` here, before a build reads or writes anything.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from packaging.version import Version

from patchset.commands.apply.target import series_items
from patchset.confine import check_relative
from patchset.errors import InputError
from patchset.ledger.model import Ledger, Target, TargetLock
from patchset.patchfmt.diffs import files_touched

SHORT = 10  # hex digits of the label; more when needed to keep PEP 440 from normalising it
LABEL_PREFIX = "ps"


@dataclass(frozen=True)
class SeriesFacts:
    """One target's series as an artifact sees it (paths in the installed layout)."""

    target: Target
    label: str  # ps.<short hash>
    digest: str  # the full sha256 the label abbreviates
    expected: dict[str, str]  # installed path -> sha256 after the series (from the lock)
    base: dict[str, str]  # installed path -> sha256 before the series (files the base has)
    touched: list[str]  # every installed path the bodies read or write, in order


def locked_target(ledger: Ledger, target: Target) -> TargetLock:
    locked = ledger.lock.targets.get(target.name)
    if locked is None or not locked.files:
        raise InputError(
            f"target {target.name}: {ledger.lock_path.name} records no patched files, so an artifact cannot be checked",
            hint=f"record them first: patchset apply --target {target.name} ... --update-lock",
        )
    return locked


def lock_digest(ledger: Ledger, target: Target) -> str:
    """sha256 over the target's lock record, in a fixed text form (see the module docstring)."""
    import hashlib

    locked = locked_target(ledger, target)
    lines = [f"target {target.name}", f"base {locked.base}"]
    lines += [f"body {p.id} {ledger.lock.bodies.get(p.id, '')}" for p in ledger.series(target.name)]
    lines += [f"file {path} {sha}" for path, sha in sorted(locked.files.items())]
    return hashlib.sha256(("\n".join(lines) + "\n").encode()).hexdigest()


def short_label(digest: str) -> str:
    """``ps.`` + the first 10 hex digits, extended until it holds a letter (an all-digit segment
    such as ``0123456789`` would be normalised by PEP 440 to ``123456789``)."""
    n = SHORT
    while n < len(digest) and digest[:n].isdigit():
        n += 1
    label = f"{LABEL_PREFIX}.{digest[:n]}"
    assert str(Version(f"0+{label}")).endswith(label)
    return label


def series_facts(ledger: Ledger, target: Target) -> SeriesFacts:
    """The label and file lists of one target; refuses a target without a lock or bodies."""
    items = series_items(ledger, target)
    locked = locked_target(ledger, target)

    def to_inst(path: str, what: str) -> str:
        inst = target.path_map.to_installed(path)
        shown = f"{what} {path!r}" + (f" (installed as {inst!r})" if inst != path else "")
        return check_relative(inst, what=f"target {target.name}: {shown}")

    paths = (to_inst(p, f"patch {item.patch_id}: path") for item in items for p in files_touched(item.body, item.strip))
    touched = list(dict.fromkeys(paths))
    digest = lock_digest(ledger, target)
    return SeriesFacts(
        target=target,
        label=short_label(digest),
        digest=digest,
        expected={to_inst(k, "lock key"): v for k, v in sorted(locked.files.items())},
        base={to_inst(k, "lock key"): v for k, v in sorted(locked.base_files.items())},
        touched=touched,
    )


def pick_target(ledger: Ledger, name: str | None) -> Target:
    """``--target`` or the only target with an active series."""
    if name is not None:
        if name not in ledger.targets:
            raise InputError(f"unknown target {name!r}", hint=f"one of: {', '.join(ledger.targets)}")
        return ledger.targets[name]
    with_series = [t for t in ledger.targets if ledger.series(t)]
    if len(with_series) != 1:
        raise InputError(
            "which target? " + (f"several have a series: {', '.join(with_series)}" if with_series else "none has one"),
            hint="pass --target NAME",
        )
    return ledger.targets[with_series[0]]


class BuildReport:
    """What a ``build`` command did for one target: ``ok`` when built, and its JSON form (every
    field of the report, plus ``ok``). Mixed into the wheel and overlay report dataclasses."""

    outcome: str

    @property
    def ok(self) -> bool:
        return self.outcome == "built"

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, **dataclasses.asdict(self)}  # type: ignore[call-overload]

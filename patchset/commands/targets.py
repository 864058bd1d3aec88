"""``patchset init --target`` and ``patchset target add``: targets without hand-editing the ledger.

A known name (vllm, flashinfer, nccl) takes its preset (``patchset.ledger.presets``); options given
on the command line override it; any other name is a generic target with only what was given.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from patchset.errors import InputError
from patchset.ledger import store as ledger_mod
from patchset.ledger.presets import target_values
from patchset.ledger.schema import TARGET_NAME_RE

NAME_RE = TARGET_NAME_RE  # the ledger schema's rule: one rule for names given here and written by hand


def parse_maps(maps: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``--map SRC=DST`` (a path prefix in the patches -> the same prefix in an installed tree)."""
    out: dict[str, str] = {}
    for m in maps:
        src, sep, dst = m.partition("=")
        if not sep or not src or not dst:
            raise InputError(f"--map {m!r}: expected SRC=DST", hint="e.g. --map include/=flashinfer/data/include/")
        out[src] = dst
    return out


def check_name(name: str) -> None:
    if not NAME_RE.match(name):
        raise InputError(
            f"target name {name!r}: use letters, digits and . _ + - (e.g. vllm, python3.11)",
            hint="the name becomes [targets.<name>] and the folder patchset/series/<name>/",
        )


def add_targets(ledger_path: Path, wanted: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Add targets (name -> values from ``target_values``) in one atomic ledger edit."""
    for name in wanted:
        check_name(name)
    with ledger_mod.edit(ledger_path) as e:
        for name, values in wanted.items():
            e.add_target(name, values)
    return wanted


def init(ledger_path: Path, title: str, targets: list[str]) -> dict[str, dict[str, Any]]:
    """A new ledger with the named targets (presets where known)."""
    for name in targets:
        check_name(name)
    ledger_mod.init_ledger(ledger_path, title)
    return add_targets(ledger_path, {t: target_values(t) for t in targets}) if targets else {}


SETTABLE = ("base", "base_version", "installed_root", "base_image", "package", "layout", "upstream", "github")


def set_target(ledger_path: Path, name: str, values: dict[str, Any], maps: dict[str, str]) -> dict[str, Any]:
    """Change keys of an existing ``[targets.NAME]`` in one atomic ledger edit (the schema checks
    the result before anything is written); ``maps`` adds or replaces path-map prefixes. Returns
    what changed: key -> (old, new)."""
    import tomlkit

    from patchset.ledger.presets import offer

    changed: dict[str, Any] = {}
    with ledger_mod.edit(ledger_path) as e:
        targets = e.doc.get("targets")
        if targets is None or name not in targets:
            raise InputError(f"unknown target {name!r} in {ledger_path.name}: {offer(name)}")
        table = targets[name]
        for key, value in values.items():
            if value is None or key not in SETTABLE:
                continue
            old = table.get(key)
            if old != value:
                table[key] = value
                changed[key] = [old, value]
        if maps:
            pm = table.get("path_map")
            if pm is None:
                pm = tomlkit.table()
                table.add("path_map", pm)
            for src, dst in maps.items():
                if pm.get(src) != dst:
                    changed[f"path_map.{src}"] = [pm.get(src), dst]
                    pm[src] = dst
        if not changed:
            e.cancelled = True
    return changed

"""Write what a survey found into the ledger, in one atomic edit: each diff that is a patch of a
target, in the survey's order, its names read as the survey read them; a target the ledger lacks
is created from its preset; refused files are left out and counted."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from patchset.commands.apply.lock import complete_lock
from patchset.commands.importer import ImportItem, ImportResult, holdings, import_items
from patchset.commands.onboard.bases import Find, fitting, releases, search
from patchset.commands.onboard.survey import Finding, Survey, candidate_targets, survey
from patchset.commands.overlay_import import OverlayReport, import_overlay
from patchset.commands.targets import check_name
from patchset.errors import InputError
from patchset.ledger import store as ledger_mod
from patchset.ledger.model import Ledger, Target
from patchset.ledger.presets import target_values
from patchset.upstream.stock import open_stock


@dataclass
class Onboarding:
    """One ``import REPO``: what it was asked, the survey, and what it wrote."""

    ledger_path: Path
    repo: Path
    target: str | None = None  # the target the user named (it may be created)
    base: str | None = None
    base_tree: Path | None = None
    dry_run: bool = False
    survey: Survey | None = None
    result: ImportResult = field(default_factory=ImportResult)
    overlays: list[OverlayReport] = field(default_factory=list)
    recorded_base: str = ""
    base_search: Find | None = None  # --base auto: the search that found it

    def to_json(self) -> dict[str, object]:
        assert self.survey is not None
        done = {**self.result.to_json(), "overlays": [o.to_json() for o in self.overlays], "base": self.recorded_base}
        if self.base_search is not None:
            done["base_search"] = self.base_search.to_json()
        return {**self.survey.to_json(), "dry_run": self.dry_run, **({} if self.dry_run else done)}


def _base_target(ob: Onboarding, known: dict[str, Target]) -> str:
    """The target the base given is of: the one named, else the ledger's only one, else vllm."""
    return ob.target or (next(iter(known)) if len(known) == 1 else "vllm")


def nothing_found(repo: Path, s: Survey) -> InputError:
    """No diff of any target: what the repository holds and what the survey made of it (no
    suggestion to import a repository without a change as an overlay)."""
    total, said, _, _ = holdings(repo)
    if not total:
        return InputError(f"{repo}: the directory is empty: nothing to import")
    listed = [f"{f.path}: {f.becomes()}" for f in s.findings[:6]] + (["…"] if len(s.findings) > 6 else [])
    return InputError(
        f"{repo}: nothing to import: no changes to vllm (or any target) found as diffs; {said}",
        hint="; ".join([*listed, "nothing was imported"]),
    )


def run(ob: Onboarding) -> Onboarding:
    """Survey ``ob.repo`` and, unless a dry run, write its patches; nothing found is an error that
    writes nothing."""
    ledger = ledger_mod.load_ledger(ob.ledger_path)
    auto = ob.base == "auto"
    if auto:  # found after the diffs are in: `base find` on the series they make
        ob.base = None
    if ob.target and ob.target not in ledger.targets:
        check_name(ob.target)
    targets = candidate_targets(ledger.targets, ob.target)
    if ob.target:  # the user named it: its files and no other target's
        targets = {ob.target: targets[ob.target]}
    stock, label = None, ""
    if ob.base is not None or ob.base_tree is not None:
        stock = open_stock(ledger.root, targets[_base_target(ob, ledger.targets)], ob.base, ob.base_tree)
    try:
        s = survey(Survey(ob.repo, targets, set(ledger.targets), stock))
    finally:
        if stock is not None:
            label = stock.label
            stock.close()
    ob.survey = s
    if not s.imported and not s.overlays and not ob.dry_run:
        raise nothing_found(ob.repo, s)
    if ob.dry_run:
        return ob
    if s.imported:
        _write(ob, s, ledger, label)
        if auto:
            _auto_base(ob, _base_target(ob, ledger.targets))
    for f in s.overlays:  # after the diffs: each overlay file's diff is taken on top of them
        if f.target not in ledger_mod.load_ledger(ob.ledger_path).targets:
            with ledger_mod.edit(ob.ledger_path) as e:
                e.add_target(f.target, target_values(f.target))
        folder = ob.repo / f.path.rstrip("/") if f.path != "./" else ob.repo
        ob.overlays.append(import_overlay(ob.ledger_path, folder, f.target, base=ob.base, base_tree=ob.base_tree))
    return ob


def _write(ob: Onboarding, s: Survey, ledger: Ledger, label: str) -> None:
    by_target: dict[str, list[Finding]] = {}
    for f in s.imported:
        by_target.setdefault(f.target, []).append(f)
    with ledger_mod.edit(ob.ledger_path) as e:
        for name in by_target:
            if name not in ledger.targets:
                e.add_target(name, target_values(name))
        for name, found in by_target.items():
            items = [
                ImportItem(s.repo / f.path, f.path, f.reading.strip, root=f.reading.root) for f in found if f.reading
            ]
            import_items(e, s.targets[name], items, ob.result)
        base_target = _base_target(ob, ledger.targets)
        if label and base_target in by_target and not s.targets[base_target].base:
            e.doc["targets"][base_target]["base"] = ob.recorded_base = label
    # beside an overlay's or a script's files already locked
    if base_target in by_target and (label or s.targets[base_target].base):
        complete_lock(ob.ledger_path, base_target, ob.base, ob.base_tree)


def _auto_base(ob: Onboarding, name: str) -> None:
    """``--base auto``: the newest release the imported series fits, recorded when the target has
    no base (a target with one keeps it: the search is still reported)."""
    ledger = ledger_mod.load_ledger(ob.ledger_path)
    if name not in ledger.targets:
        return
    t = ledger.targets[name]
    ob.base_search = search(Find(ledger, t, releases(t, None)))
    fit = fitting(ob.base_search)
    if fit and not t.base:
        with ledger_mod.edit(ob.ledger_path) as e:
            e.doc["targets"][name]["base"] = ob.recorded_base = f"{t.package}=={fit[0]}"

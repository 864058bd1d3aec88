"""``patchset import --overlay DIR``: whole-file overlays become patches against the target's base.

An overlay kit keeps modified copies of installed files at their site-packages paths, sometimes
with a ``MANIFEST.json``. Mounted on a newer release, an overlay silently reverts every upstream
change to its file; carried as a patch (the byte-exact diff from the base's stock file) it rebases
like any other.

The kit is untrusted: its paths are confined, its symlinks never followed, sizes bounded; a
manifest checksum that disagrees with its file is reported while the file wins. Each patch is
proved before it is written (applied in memory it must give the overlay file byte for byte) and
the lock records that file's sha256; nothing is written unless the whole import holds.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from patchset.commands.apply.lock import complete_lock
from patchset.commands.apply.target import series_files
from patchset.commands.importer import choose_target, patch_id_for, read_source
from patchset.confine import check_relative, confine, regular_file
from patchset.engine.hunks import apply_file
from patchset.errors import InputError, Location, PatchFormatError, UnsafePathError
from patchset.ledger import store as ledger_mod
from patchset.ledger.lock import sha256_bytes
from patchset.ledger.model import Ledger, Target
from patchset.patchfmt.diffs import parse_patch
from patchset.rebase.regen import DiffDir, FileChange, render_staged
from patchset.upstream.bases import version_like
from patchset.upstream.releases import is_spec_like, parse_spec
from patchset.upstream.stock import StockBase, open_stock

MAX_OVERLAY_FILES = 20_000
MAX_MANIFEST_BYTES = 16 << 20
GROUPS = ("file", "set")
_SKIP_DIRS = {".git", "__pycache__", ".hg", ".svn"}
_PR = re.compile(r"(?:PR\s*#|pull/|#)(\d+)", re.I)
_IDENTICAL = re.compile(r"^\s*(?P<who>[^():]+?)\s*\(identical\)\s*:\s*(?P<path>.+)$")


@dataclass(frozen=True)
class Entry:
    """One overlay file and where it goes."""

    overlay: str  # as the kit names it (relative to the overlay directory or the manifest's)
    path: Path  # on disk
    installed: str  # relative to site-packages
    sets: tuple[str, ...] = ()
    provenance: str = ""
    checksum: tuple[str, str] | None = None  # (md5|sha256, manifest value)


class OverlayReport:
    """What ``import --overlay`` found and did."""

    def __init__(self, overlay: str, manifest: str = "", target: str = "") -> None:
        self.overlay, self.manifest, self.target = overlay, manifest, target
        self.base: dict[str, str] = {}  # target -> base label the diffs are against
        self.recorded: dict[str, dict[str, str]] = {}  # target -> keys set on it
        self.patches: dict[str, list[str]] = {}  # patch id -> files (source layout)
        self.targets: dict[str, str] = {}  # patch id -> target
        self.added: list[str] = []
        self.updated: list[str] = []
        self.unchanged: list[str] = []
        self.new_files: list[str] = []  # files the base does not have (new-file patches)
        self.identical: list[str] = []  # overlay files equal to the stock file
        self.skipped: list[dict[str, str]] = []  # {file, reason}
        self.checksums: list[dict[str, str]] = []  # {file, algorithm, manifest, actual}
        self.not_in_manifest: list[str] = []
        self.missing: list[dict[str, str]] = []  # manifest entries without their file
        self.notes: list[str] = []

    def skip(self, file: str, reason: str) -> None:
        self.skipped.append({"file": file, "reason": reason})

    @property
    def files(self) -> int:
        return sum(len(v) for v in self.patches.values())

    def to_json(self) -> dict[str, Any]:
        d = dict(vars(self))
        d["counts"] = {
            "files": self.files,
            "patches": len(self.patches),
            "identical": len(self.identical),
            "skipped": len(self.skipped),
        }
        return d


# --------------------------------------------------------------------------- the kit


def _walk(root: Path, skip: set[str], rep: OverlayReport) -> list[tuple[str, Path]]:
    """Regular files under ``root`` (relative posix names), never through a symlink; symlinks and
    special files are named as skipped; ``skip``: real paths left out (the manifest)."""
    found: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        keep = []
        for d in sorted(dirnames):
            if d in _SKIP_DIRS or d.startswith("."):
                continue
            if (here / d).is_symlink():
                rep.skip((here / d).relative_to(root).as_posix(), "a symbolic link")
                continue
            keep.append(d)
        dirnames[:] = keep
        for name in sorted(filenames):
            full = here / name
            rel = full.relative_to(root).as_posix()
            if name.endswith((".pyc", ".pyo")) or name.startswith(".") or os.path.realpath(full) in skip:
                continue
            try:
                check_relative(rel, what=f"overlay file {rel!r}")
            except UnsafePathError as exc:
                rep.skip(rel.encode("unicode_escape").decode(), f"{exc.message}: refused")
                continue
            st = full.lstat()
            if stat.S_ISLNK(st.st_mode):
                rep.skip(rel, "a symbolic link: an overlay carries files")
            elif not stat.S_ISREG(st.st_mode):
                rep.skip(rel, "not a regular file")
            else:
                found.append((rel, full))
            if len(found) > MAX_OVERLAY_FILES:
                raise InputError(
                    f"{root} holds more than {MAX_OVERLAY_FILES} files: not an overlay",
                    hint="pass the directory of overlay files (mirrored at their site-packages paths)",
                )
    return found


def _text(value: Any, what: str, where: Location) -> str:
    if not isinstance(value, str):
        raise InputError(f"{what} must be a string, not {type(value).__name__}", where=where)
    return value


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest as data, its shape checked (every value that is used has its type)."""
    raw = read_source(path, what="manifest")
    if len(raw) > MAX_MANIFEST_BYTES:
        raise InputError(f"larger than {MAX_MANIFEST_BYTES >> 20} MiB: not a manifest", where=Location(path))
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise InputError("not UTF-8 text: not a JSON manifest", where=Location(path)) from None
    except ValueError as exc:
        line = getattr(exc, "lineno", None)
        raise InputError(f"not JSON: {getattr(exc, 'msg', exc)}", where=Location(path, line)) from None
    if not isinstance(data, dict):
        raise InputError("a manifest is a JSON object with `files`", where=Location(path))
    for key in ("site_packages_root", "base_image"):
        if key in data and data[key] is not None:
            _text(data[key], f"`{key}`", Location(path, key=key))
    files = data.get("files", [])
    if not isinstance(files, list):
        raise InputError("`files` must be a list of objects", where=Location(path, key="files"))
    for i, f in enumerate(files):
        where = Location(path, key=f"files[{i}]")
        if not isinstance(f, dict):
            raise InputError("each `files` entry must be an object", where=where)
        if "overlay_file" not in f:
            raise InputError("an entry without `overlay_file`", where=where, hint="name the overlay file it describes")
        for key in ("overlay_file", "site_packages_target", "md5", "sha256", "provenance"):
            if key in f and f[key] is not None:
                _text(f[key], f"`{key}`", where)
        sets = f.get("sets", [])
        if isinstance(sets, str):
            f["sets"] = [sets]
        elif not isinstance(sets, list) or not all(isinstance(s, str) for s in sets):
            raise InputError("`sets` must be a list of names", where=where)
    return data


def _installed_name(target: str, root: str, where: Location) -> str | None:
    """A ``site_packages_target`` relative to site-packages; None when it lies outside it."""
    t = target.strip()
    if t.startswith("/"):
        r = "/" + root.strip("/") + "/" if root.strip("/") else None
        if r is None or not t.startswith(r):
            return None
        t = t[len(r) :]
    try:
        return check_relative(t, what=f"{where}: site_packages_target")
    except UnsafePathError as exc:
        raise InputError(exc.message, where=where, hint="the manifest is malformed or hostile") from None


def _locate(rel: str, roots: tuple[Path, ...], what: str) -> Path | None:
    """The regular file ``rel`` names below the first root that has it (confined to that root)."""
    for base in roots:
        cand = confine(base, rel, what=what)
        if regular_file(cand):
            return cand
    return None


def _from_manifest(
    overlay: Path, manifest: Path, data: dict[str, Any], rep: OverlayReport
) -> tuple[list[Entry], set[str]]:
    """The manifest's entries (their files confined to the kit), and the real paths they name."""
    entries: list[Entry] = []
    named: set[str] = set()
    root = data.get("site_packages_root") or ""
    for i, f in enumerate(data.get("files", []), start=1):
        where = Location(manifest, key=f"files[{i - 1}]")
        name = f["overlay_file"]
        try:
            rel = check_relative(name, what=f"{where}: overlay_file")
            path = _locate(rel, (manifest.parent, overlay), f"{where}: overlay_file")
        except UnsafePathError as exc:
            rep.skip(name, f"{exc.message}: refused")
            continue
        if path is None:
            rep.missing.append({"file": name, "entry": f"files[{i - 1}]"})
            continue
        named.add(os.path.realpath(path))
        spt = f.get("site_packages_target") or ""
        installed = _installed_name(spt, root, where) if spt else None
        if spt and installed is None:
            rep.skip(name, f"its site_packages_target {spt!r} is outside site_packages_root {root!r}")
            continue
        algo = next((a for a in ("sha256", "md5") if f.get(a)), None)
        checksum = (algo, f[algo].strip().lower()) if algo else None
        sets = tuple(f.get("sets") or ())
        entries.append(
            Entry(name, path, installed or _strip_to_package(rel), sets, f.get("provenance") or "", checksum)
        )
    return entries, named


def _strip_to_package(rel: str) -> str:
    """An overlay path mirrored below an install prefix (``usr/local/lib/python3.12/dist-packages/
    vllm/x.py``) reduced to its site-packages path (``vllm/x.py``)."""
    parts = rel.split("/")
    for i, p in enumerate(parts):
        if p in ("site-packages", "dist-packages") and i + 1 < len(parts):
            return "/".join(parts[i + 1 :])
    return rel


# --------------------------------------------------------------------------- owners and provenance


def _roots(t: Target) -> list[str]:
    """Installed-path prefixes that belong to target ``t``."""
    out = [dst for _, dst in t.path_map.prefixes]
    names = {t.name, t.package, t.package.replace("-", "_")}
    if t.package.endswith("-python"):
        names.add(t.package[: -len("-python")])
    out += [f"{n}/" for n in names if n]
    return out


def owner_of(ledger: Ledger, installed: str, first: str) -> str | None:
    """The target whose package holds ``installed`` (``first`` wins a tie), else None."""
    order = [first, *[n for n in ledger.targets if n != first]]
    best: tuple[int, str] | None = None
    for name in order:
        for r in _roots(ledger.targets[name]):
            if installed.startswith(r) and (best is None or len(r) > best[0]):
                best = (len(r), name)
    return best[1] if best else None


def provenance_fields(text: str, github: str) -> dict[str, Any]:
    """``origin``, ``authors``, ``prs`` and ``notes`` from a manifest's provenance string:
    ``PR #N backport`` (upstream, the PR named), ``ours``, ``X (identical): path`` (a copy of X's
    file: X is the author), anything else kept as a note."""
    text = text.strip()
    out: dict[str, Any] = {"origin": "ours", "authors": [], "prs": [], "notes": ""}
    if not text:
        return out
    out["notes"] = f"provenance: {text}"
    low = text.lower()
    m = _IDENTICAL.match(text)
    if m:
        out["authors"] = [m.group("who").strip()]
    elif ("pr" in low or "pull/" in low) and _PR.search(text):
        out["origin"] = "upstream" if "backport" in low or "cherry" in low else "port"
        if github:
            out["prs"] = [f"{github}#{n}" for n in dict.fromkeys(_PR.findall(text))]
    return out


# --------------------------------------------------------------------------- one patch


@dataclass(frozen=True)
class _File:
    """One overlay file of a patch. Its bytes are read again when the body is made, and so is its
    pre-image when that is the base's own file: memory stays near one pre-image, one overlay file
    and the body of one patch (``bench/overlay_import.py``)."""

    entry: Entry
    key: str  # the source-layout path the patch names
    new_sha: str  # sha256 of the overlay file as planned (a file changed since then fails the proof)
    old: bytes | None  # what the series leaves on the base before this patch, when it changed it
    reread: bool  # the pre-image is the base's own file (``stock_sha``): read again when used
    stock_sha: str | None  # sha256 of the base's own file (None: the base has no such file)
    mode: str

    @property
    def exists(self) -> bool:
        """The file is there before the patch (else the patch creates it)."""
        return self.reread or self.old is not None

    def pre_image(self, stock: StockBase) -> bytes | None:
        return stock.read(self.key) if self.reread else self.old


class _Planned:
    def __init__(self, pid: str, target: str) -> None:
        self.pid, self.target = pid, target
        self.files: list[_File] = []
        self.sets: list[str] = []


def _file_mode(path: Path) -> str:
    return "100755" if path.stat().st_mode & 0o111 else "100644"


def _body(plan: _Planned, stock: StockBase, title: str, description: str) -> bytes:
    """The patch body, its files staged for the diff one at a time (one file's two versions in
    memory at once, none of them beside git's output)."""
    head = f"Subject: [PATCH] {title}\n\n{description.rstrip()}\n\n".encode("utf-8", "surrogateescape")
    with DiffDir() as d:
        for f in plan.files:
            old_path, old_mode = (f.key, f.mode) if f.exists else (None, None)
            data = read_source(f.entry.path, what="overlay file")
            d.stage(FileChange(old_path, f.key, f.pre_image(stock), data, old_mode, f.mode))
            del data
        return render_staged(d, head=head)


def _prove(body: bytes, plan: _Planned, stock: StockBase) -> str | None:
    """None when the body, applied to each file's pre-image, gives the overlay file exactly (only
    the result's hash is made: the proof holds the pre-image and the body)."""
    try:
        fps = parse_patch(body, 1)
    except PatchFormatError as exc:
        return f"the diff does not parse back ({exc.message})"
    by_path = {fp.target or fp.path: fp for fp in fps}
    for f in plan.files:
        fp = by_path.get(f.key)
        if fp is None:
            return f"{f.key}: the diff lost the file"
        old = f.pre_image(stock)
        if f.reread and (old is None or sha256_bytes(old) != f.stock_sha):
            return f"{f.key}: the base's file changed during the import"
        got = apply_file(old, fp, digest_only=True)
        del old
        if not got.ok or got.sha256 != f.new_sha:
            return f"{f.key}: the diff does not reproduce the overlay file byte for byte ({got.message or 'differs'})"
    return None


# --------------------------------------------------------------------------- the import


def check_base(t: Target, label: str, what: str) -> None:
    """Refuse a base given for ``what`` (the overlay, the script) other than the one the target is on."""

    def norm(ref: str) -> str:
        if is_spec_like(ref):
            s = parse_spec(ref)
            return f"{s.name}=={version_like(s.version) or s.version}"
        return version_like(ref) or ref.rstrip("/")

    a, b = norm(t.base), norm(label)
    if t.base and a != b and a.split("==")[-1] != b.split("==")[-1]:
        raise InputError(
            f"target {t.name!r} is on base {t.base!r}; {what} was to be read against {label!r}",
            hint=f"leave out --base (then it is read against {t.base!r}), or rebase the series first: "
            "every patch of a target applies to one base",
        )


def import_overlay(
    ledger_path: Path,
    overlay: Path,
    target: str,
    *,
    base: str | None = None,
    base_tree: Path | None = None,
    manifest: Path | None = None,
    group: str = "file",
) -> OverlayReport:
    """Import the overlay files under ``overlay`` as patches of ``target`` (see the module doc)."""
    if group not in GROUPS:
        raise InputError(f"--group {group!r}: one of {', '.join(GROUPS)}")
    if base is not None and base_tree is not None:
        raise InputError("give one of --base SPEC or --base-tree DIR")
    if not overlay.is_dir() or overlay.is_symlink():
        raise InputError(f"--overlay {overlay}: not a directory", hint="pass the directory of overlay files")
    ledger = ledger_mod.load_ledger(ledger_path)
    primary = choose_target(ledger, target)
    rep = OverlayReport(str(overlay), str(manifest or ""), target)
    data = read_manifest(manifest) if manifest is not None else {}
    skip_paths = {os.path.realpath(manifest)} if manifest is not None else set()
    walked = _walk(overlay, skip_paths, rep)
    if manifest is not None:
        entries, named = _from_manifest(overlay, manifest, data, rep)
        for rel, full in walked:
            if os.path.realpath(full) not in named:
                rep.not_in_manifest.append(rel)
                entries.append(Entry(rel, full, _strip_to_package(rel)))
    else:
        entries = [Entry(rel, full, _strip_to_package(rel)) for rel, full in walked]
    given = base if base is not None else (str(base_tree) if base_tree is not None else None)
    run = _Run(ledger, rep, data, given is not None)
    try:
        run.stocks[target] = open_stock(ledger.root, primary, base, base_tree)
        if given is not None:
            check_base(primary, run.stocks[target].label, "the overlay")
        _write(run, _plan(run, entries, group))
    finally:
        for s in run.stocks.values():
            s.close()
    if rep.patches:  # the diffs imported before (or beside) the overlay: their files into the lock too
        complete_lock(ledger_path, target, base, base_tree)
    return rep


@dataclass
class _Run:
    """One overlay import: the ledger, the report, the manifest, the bases opened (by target)."""

    ledger: Ledger
    rep: OverlayReport
    manifest: dict[str, Any]
    base_given: bool
    stocks: dict[str, StockBase] = field(default_factory=dict)


def _plan(run: _Run, entries: list[Entry], group: str) -> list[_Planned]:
    ledger, rep, stocks = run.ledger, run.rep, run.stocks
    plans: dict[str, _Planned] = {}
    owners: dict[str, str] = {}  # key -> the overlay file that claimed it
    assigned: list[tuple[_Planned, Entry, str]] = []
    for e in sorted(entries, key=lambda x: x.installed):
        name = owner_of(ledger, e.installed, rep.target)
        if name is None:
            roots = ", ".join(r for t in ledger.targets.values() for r in _roots(t))
            rep.skip(e.overlay, f"{e.installed} is outside every target's package ({roots})")
            continue
        t = ledger.targets[name]
        if name not in stocks:
            if not t.base:
                rep.skip(
                    e.overlay,
                    f"{e.installed} belongs to target {name!r}, which records no base: "
                    f"`patchset target set {name} --base SPEC`, then import it again",
                )
                continue
            stocks[name] = open_stock(ledger.root, t)
        stock = stocks[name]
        data = read_source(e.path, what="overlay file")
        if e.checksum is not None:
            algo, want = e.checksum
            actual = hashlib.new(algo, data).hexdigest()
            if actual != want:
                rep.checksums.append({"file": e.overlay, "algorithm": algo, "manifest": want, "actual": actual})
        key = t.lock_key(e.installed)
        if key in owners:
            rep.skip(e.overlay, f"{owners[key]} is the overlay of {key} already")
            continue
        owners[key] = e.overlay
        pid_file = patch_id_for("overlay/" + key)
        use_set = group == "set" and e.sets
        pid = patch_id_for(e.sets[0]) if use_set else pid_file
        if use_set and len(e.sets) > 1:
            rep.notes.append(f"{e.overlay} is in sets {', '.join(e.sets)}: carried in {e.sets[0]!r}")
        plan = plans.get(pid)
        if plan is None:
            plan = plans[pid] = _Planned(pid, name)
        elif plan.target != name:
            rep.skip(e.overlay, f"set {pid!r} already holds files of target {plan.target!r}")
            continue
        del data  # read again below: one overlay file in memory at a time, not the whole kit
        assigned.append((plan, e, key))
    # each file's diff starts where the rest of the series leaves it (this import's patches left out)
    pre: dict[str, dict[str, bytes | None]] = {}
    for plan, e, key in assigned:
        t, stock = ledger.targets[plan.target], stocks[plan.target]
        if plan.target not in pre:
            pre[plan.target] = series_files(ledger, t, stock.read, skip=set(plans))
        original = stock.read(key)
        in_series = key in pre[plan.target]  # else the pre-image is the base's own file
        old = pre[plan.target][key] if in_series else original
        data = read_source(e.path, what="overlay file")
        if old == data:
            rep.identical.append(e.overlay)
            continue
        # a changed file keeps the base's mode (a copy's execute bit is the copy's, not the change)
        mode = stock.mode(key) if old is not None else _file_mode(e.path)
        stock_sha = sha256_bytes(original) if original is not None else None
        reread = not in_series and original is not None
        plan.files.append(_File(e, key, sha256_bytes(data), None if reread else old, reread, stock_sha, mode))
        if old is None:
            rep.new_files.append(key)
        del data, old, original
        plan.sets += [s for s in e.sets if s not in plan.sets]
    return [p for p in plans.values() if p.files]


def _describe(plan: _Planned, stock: StockBase, root: str) -> tuple[str, str]:
    files = [f.key for f in plan.files]
    title = f"Overlay of {files[0]}" if len(files) == 1 else f"Overlay set {plan.pid} ({len(files)} files)"
    lines = [f"Imported by patchset from whole-file overlays, as the diff from {stock.label}'s stock files."]
    for f in plan.files:
        e = f.entry
        where = f"{root.rstrip('/')}/{e.installed}" if root else e.installed
        lines.append(f"  {e.overlay} -> {where}" + ("" if f.exists else " (new file)"))
        if e.provenance:
            lines.append(f"    provenance: {e.provenance}")
    if plan.sets:
        lines.append(f"Sets: {', '.join(plan.sets)}")
    return title, "\n".join(lines)


def _record_targets(e: ledger_mod.Edit, run: _Run) -> None:
    """What the import learnt about its target, recorded where the ledger lacks it: the base (when
    given), the manifest's base image and site-packages root."""
    rep, data = run.rep, run.manifest
    root = data.get("site_packages_root") or ""
    for name, stock in run.stocks.items():
        t = run.ledger.targets[name]
        rep.base[name] = stock.label
        set_here: dict[str, str] = {}
        if not t.base and run.base_given and name == rep.target:
            set_here["base"] = stock.label
            if stock.version:
                set_here["base_version"] = stock.version
        if name == rep.target:
            image = data.get("base_image") or ""
            if image and not t.base_image:
                set_here["base_image"] = image
            elif image and image != t.base_image:
                rep.notes.append(f"the manifest's base_image {image!r} differs from target {name}'s {t.base_image!r}")
            if root and not t.installed_root:
                set_here["installed_root"] = root
        if set_here:
            e.doc["targets"][name].update(set_here)
            rep.recorded[name] = set_here


def _write(run: _Run, plans: list[_Planned]) -> None:
    ledger, rep = run.ledger, run.rep
    root = run.manifest.get("site_packages_root") or ""
    with ledger_mod.edit(ledger.path) as e:
        _record_targets(e, run)
        for plan in plans:
            t = ledger.targets[plan.target]
            stock = run.stocks[plan.target]
            title, description = _describe(plan, stock, root)
            body = _body(plan, stock, title, description)
            problem = _prove(body, plan, stock)
            if problem is not None:
                for f in plan.files:
                    rep.skip(f.entry.overlay, problem)
                continue
            rel = f"patchset/series/{plan.target}/{plan.pid}.patch"
            existing = e.patch_of_kind(
                plan.pid, "overlay", plan.target, "an overlay", "rename or remove that patch first"
            )
            digest = sha256_bytes(body)
            if existing is not None:
                rel = existing.get("body") or rel
                (rep.unchanged if e.same_body(plan.pid, rel, body) else rep.updated).append(plan.pid)
            else:
                prov = [provenance_fields(f.entry.provenance, t.github) for f in plan.files]
                origins = {p["origin"] for p in prov}
                values: dict[str, Any] = {
                    "id": plan.pid,
                    "target": plan.target,
                    "title": title,
                    "origin": origins.pop() if len(origins) == 1 else "ours",
                    "files": [f.key for f in plan.files],
                    "authors": list(dict.fromkeys(a for p in prov for a in p["authors"])),
                    "notes": "\n".join(dict.fromkeys(p["notes"] for p in prov if p["notes"])),
                    "tags": plan.sets,
                }
                table = e.add_patch(values)
                prs = list(dict.fromkeys(r for p in prov for r in p["prs"]))
                if prs:
                    e.set_path(table, "upstream.prs", prs)
                e.set_path(table, "overlay.files", [f.entry.overlay for f in plan.files])
                if rep.manifest:
                    e.set_path(table, "overlay.manifest", rep.manifest)
                rep.added.append(plan.pid)
            e.write_file(rel, body)
            e.lock.bodies[plan.pid] = digest
            tl = e.lock.target(plan.target)
            tl.base = tl.base or stock.label
            for f in plan.files:
                tl.files[f.key] = f.new_sha
                if f.stock_sha is not None:
                    tl.base_files[f.key] = f.stock_sha
            rep.patches[plan.pid] = [f.key for f in plan.files]
            rep.targets[plan.pid] = plan.target

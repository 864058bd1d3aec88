"""``patchset import``: a quilt directory, format-patch mails, DEP-3/Yocto patches and
``EXPECTED.sha256`` files into the ledger, in one atomic edit.

Bodies are copied byte for byte under their original file names (an export gives the same files
back). Only regular files are read, each bounded; a file in which no diff starts is refused. Two
source names that reduce to one id are a collision, refused with both names; re-importing the same
file name is an update.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from patchset.commands.apply.lock import complete_lock
from patchset.commands.inspection import body_problem, diffstat
from patchset.confine import check_relative, confine
from patchset.engine.hunks import apply_file
from patchset.errors import InputError, Location, PatchFormatError, UnsafePathError
from patchset.ledger import store as ledger_mod
from patchset.ledger.lock import parse_expected, sha256_bytes
from patchset.ledger.model import Ledger, Target
from patchset.ledger.presets import offer
from patchset.ledger.schema import ID_RE
from patchset.patchfmt.diffs import parse_patch
from patchset.patchfmt.headers import is_mbox_start, mail_file_name, parse_meta, split_mbox
from patchset.patchfmt.reader import diff_start
from patchset.upstream.stock import StockBase, open_stock

PATCH_SUFFIXES = (".patch", ".diff")
MAX_PATCH_BYTES = 64 << 20  # a patch, series or EXPECTED.sha256 file larger than this is refused


@dataclass
class ImportItem:
    """One patch found in an import source, before it enters the ledger."""

    path: Path
    name: str
    strip: int | None = None
    data: bytes | None = None  # the body when it is one mail of an mbox (else read from ``path``)
    root: str = ""  # --root: the package directory the diff's names are relative to


@dataclass
class ImportResult:
    """What an import added, updated and left unchanged."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    expected: dict[str, int] = field(default_factory=dict)
    files: dict[str, list[str]] = field(default_factory=dict)  # target -> files the imported bodies touch
    inferred: dict[str, str] = field(default_factory=dict)  # patch id -> the reading of its names import chose
    recorded_base: str = ""  # --base recorded as the target's base (it had none)

    def to_json(self) -> dict[str, object]:
        return {k: v for k, v in vars(self).items() if k != "files"}


def patch_id_for(name: str) -> str:
    stem = name
    for suf in PATCH_SUFFIXES:
        if stem.endswith(suf):
            stem = stem[: -len(suf)]
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-.")
    return stem or "patch"


def body_name(name: str, pid: str) -> str:
    """The file name a body keeps: its own, unless a path could not hold it (``confine``): ``<id>.patch``."""
    try:
        return check_relative(name, what="body name")
    except UnsafePathError:
        return f"{pid}.patch"


def read_source(path: Path, *, what: str = "patch") -> bytes:
    """The bytes of the import source ``path``: a regular file (a device, FIFO or socket is
    refused before it is read: ``/dev/zero`` never ends), at most :data:`MAX_PATCH_BYTES`."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError("no such file", where=Location(path)) from None
    except OSError as exc:
        raise InputError(f"cannot read it: {exc.strerror or exc}", where=Location(path)) from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "a device, FIFO or socket"
            raise InputError(
                f"not a regular file ({kind}): a {what} is read from a file",
                where=Location(path),
                hint="pass the patch files, a quilt directory or an EXPECTED.sha256 file",
            )
        # sized by the file, not the limit: read(limit) allocates the whole limit up front
        limit = MAX_PATCH_BYTES + 1
        data = fh.read(min(st.st_size + 1, limit))
        if st.st_size < len(data) < limit:  # it grew since fstat: read on, to the limit
            data += fh.read(limit - len(data))
    if len(data) > MAX_PATCH_BYTES:
        raise InputError(
            f"larger than {MAX_PATCH_BYTES >> 20} MiB: too large for a {what}",
            where=Location(path),
            hint="is this the right file? split a patch this large into smaller ones",
        )
    return data


def _read_text(path: Path, what: str) -> str:
    try:
        return read_source(path, what=what).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"not UTF-8 text ({exc.reason} at byte {exc.start}): not a {what}", where=Location(path)
        ) from None


def read_series_file(series: Path) -> list[ImportItem]:
    """Parse a quilt ``series`` file: one patch per line, optional ``-pN``, ``#`` comments. A name
    that leaves the series directory (``..``, absolute) is refused: it becomes a body path."""
    items = []
    for lineno, raw in enumerate(_read_text(series, "quilt series file").splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        strip = None
        for opt in parts[1:]:
            m = re.fullmatch(r"-p(\d+)", opt)
            if not m:
                raise InputError(
                    f"unsupported option {opt!r} in series file",
                    where=Location(series, lineno),
                    hint="only -pN is understood",
                )
            strip = int(m.group(1))
        # confined to the patches directory: an absolute line, '..' or a link out would import any file
        path = confine(series.parent, parts[0], what=f"{Location(series, lineno)}: series line")
        name = check_relative(parts[0], what="series line")
        if not path.exists():
            raise InputError(
                f"series names {parts[0]!r}, which does not exist",
                where=Location(series, lineno),
                hint=f"add the file to {series.parent} or remove the line",
            )
        # the name relative to the series file (quilt allows sub-directories: glibc's "locale/x.diff")
        items.append(ImportItem(path=path, name=name, strip=strip))
    return items


def unique_ids(items: list[ImportItem]) -> list[str]:
    """One id per item: from the file name, or from the series-relative path where two items share a
    file name (``a/fix.patch`` and ``b/fix.patch`` become ``a-fix`` and ``b-fix``, not one ``fix``)."""
    short = [patch_id_for(Path(i.name).name) for i in items]
    ids = [patch_id_for(i.name) if short.count(s) > 1 else s for i, s in zip(items, short, strict=True)]
    seen: dict[str, ImportItem] = {}
    for pid, item in zip(ids, items, strict=True):
        if pid in seen:
            raise InputError(
                f"{item.name} and {seen[pid].name} would both get the id {pid!r}",
                where=Location(item.path),
                hint="rename one of the files",
            )
        seen[pid] = item
    return ids


_SCRIPT_HINT = (
    "an edit script is imported as a generated patch: `patchset import --script 'python3 {name} {{root}}/PATH' "
    "--id ID --target T --base SPEC` runs it on a private copy of the base and keeps its diff"
)
_OVERLAY_HINT = (
    "a modified copy of an installed file is an overlay: `patchset import --overlay DIR --target T --base SPEC` "
    "turns each file of DIR (mirrored at its site-packages path) into its diff from the base"
)
_SOURCE_SUFFIXES = (".py", ".pyi", ".c", ".cc", ".cpp", ".cu", ".cuh", ".h", ".hpp", ".sh", ".txt", ".toml", ".yaml")


def not_a_diff(path: Path, body: bytes) -> tuple[str, str]:
    """What a file without a diff is, and which import it belongs to: (message, hint)."""
    name = path.name
    text = body[:65536].decode("utf-8", "replace")
    if not body.strip():
        return "not a diff: the file is empty", "import patch files (unified diffs, format-patch mails with a diff)"
    if re.match(r"^From [0-9a-f]{40} ", text) or (
        re.search(r"^Subject: ", text, re.M) and re.search(r"^From: ", text, re.M)
    ):
        return (
            "not a diff: a mail without a patch (a cover letter, a reply?)",
            "import the mails that carry the diffs (git format-patch writes one per commit)",
        )
    if name.endswith(".json") or text.lstrip().startswith(("{", "[")):
        if "overlay_file" in text or "site_packages_target" in text:
            return "not a diff: an overlay manifest (JSON)", (
                "import the overlay with its manifest: `patchset import --overlay DIR --manifest "
                f"{name} --target T --base SPEC`"
            )
        return "not a diff: JSON", "import patch files; an overlay kit's MANIFEST.json goes with --overlay --manifest"
    looks_script = re.search(r"\.replace\(|re\.sub\(|\bsed\s+-i\b", text) and re.search(
        r"write_text\(|write_bytes\(|open\([^)]*['\"]w|os\.replace\(|\bsed\s+-i\b", text
    )
    if looks_script:
        return "not a diff: an edit script (it rewrites files in place)", _SCRIPT_HINT.format(name=name)
    if name.endswith(_SOURCE_SUFFIXES) or text.startswith("#!") or re.search(r"^(import|from|def|class) ", text, re.M):
        return "not a diff: a source file", _OVERLAY_HINT
    return "not a diff: no 'diff --git' or '---'/'+++' header", (
        "import patch files (unified diffs, format-patch mails with a diff); "
        "whole modified files go with --overlay, edit scripts with --script"
    )


def _check_text(item: ImportItem, body: bytes) -> None:
    """Refuse a file in which no diff starts, saying which import it belongs to. A NUL byte alone
    does not make a patch binary (vim's patches carry some, and GNU patch applies them)."""
    if diff_start(body)[0] == len(body):
        if b"\x00" in body:
            raise InputError("binary file, not a patch (NUL bytes and no diff)", where=Location(item.path))
        message, hint = not_a_diff(item.path, body)
        raise InputError(message, where=Location(item.path), hint=hint + "; nothing was imported")
    if b"\x00" not in body:
        return
    try:
        parse_patch(body, item.strip if item.strip is not None else 1, source=str(item.path))
    except PatchFormatError:
        raise InputError("binary file, not a patch (NUL bytes and no diff)", where=Location(item.path)) from None


def _expected(path: Path, *, relative: bool = False) -> dict[str, str]:
    return parse_expected(path, _read_text(path, "EXPECTED.sha256 file"), relative=relative)


def nothing_importable(src: Path) -> InputError:
    """The error for a directory without a series, a patch or an EXPECTED.sha256: what it holds
    (by kind, a few names) and which import fits it."""
    total, found, scripts, counts = holdings(src)
    if not total:
        return InputError(f"{src}: the directory is empty: nothing to import")
    hint = "a patch directory holds *.patch / *.diff files or a quilt series"
    if scripts:
        hint = _SCRIPT_HINT.format(name=scripts[0])
    elif counts.get(".py") or counts.get(".cuh") or counts.get(".h"):
        hint = _OVERLAY_HINT.replace("DIR", str(src))
    return InputError(
        f"{src}: nothing to import: no series file, no *.patch or *.diff, no EXPECTED.sha256; {found}",
        hint=hint + "; nothing was imported",
    )


def holdings(src: Path) -> tuple[int, str, list[str], dict[str, int]]:
    """(how many files ``src`` holds, "it holds N file(s) (kinds: names)", edit-script-like names,
    the count per suffix)."""
    counts: dict[str, int] = {}
    names: list[str] = []
    scripts: list[str] = []
    total = 0
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
        for n in sorted(filenames):
            total += 1
            kind = Path(n).suffix or "(no suffix)"
            counts[kind] = counts.get(kind, 0) + 1
            rel = (Path(dirpath) / n).relative_to(src).as_posix()
            if len(names) < 5:
                names.append(rel)
            if re.match(r"^(patch|fix|apply)[_-].*\.py$", n):
                scripts.append(rel)
        if total > 10000:
            break
    found = ", ".join(f"{n} {k}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    said = f"it holds {total} file(s) ({found}: {', '.join(names)}{', …' if total > len(names) else ''})"
    return total, said, scripts, counts


def split_mails(item: ImportItem) -> list[ImportItem]:
    """An mbox (several ``git format-patch`` mails in one file) as one item per mail, named as
    format-patch names them (``0001-subject.patch``); any other file as itself."""
    try:
        with open(item.path, "rb") as fh:
            head = fh.read(256) if os.path.isfile(item.path) else b""
    except OSError:
        head = b""
    if not is_mbox_start(head):
        return [item]  # read (and checked) when it is imported
    data = read_source(item.path)
    mails = split_mbox(data)
    if len(mails) == 1:
        return [ImportItem(path=item.path, name=item.name, strip=item.strip, data=data)]
    return [
        ImportItem(path=item.path, name=mail_file_name(n, parse_meta(mail).title), strip=item.strip, data=mail)
        for n, mail in enumerate(mails, start=1)
    ]


def collect(sources: list[Path]) -> tuple[list[ImportItem], list[Path]]:
    """Expand the command-line sources into ordered patch items and EXPECTED.sha256 files."""
    items: list[ImportItem] = []
    expected: list[Path] = []
    for src in sources:
        if src.is_dir():
            if (src / "EXPECTED.sha256").is_file():
                expected.append(src / "EXPECTED.sha256")
            if (src / "series").is_file():
                items.extend(read_series_file(src / "series"))
            else:
                found = [f for f in sorted(src.iterdir()) if f.is_file() and f.suffix in PATCH_SUFFIXES]
                if not found and not (src / "EXPECTED.sha256").is_file():
                    raise nothing_importable(src)
                for f in found:
                    items.extend(split_mails(ImportItem(path=f, name=f.name)))
        elif os.path.exists(src):
            if not src.is_file():
                read_source(src)  # a device, FIFO or socket: refused with what it is
            if src.name == "series":
                items.extend(read_series_file(src))
            elif src.name.endswith(".sha256"):
                expected.append(src)
            else:
                items.extend(split_mails(ImportItem(path=src, name=src.name)))
        else:
            raise InputError(
                f"{src}: no such file or directory", hint="pass a quilt directory, patch files or EXPECTED.sha256 files"
            )
    return items, expected


def choose_target(ledger: Ledger, name: str | None, question: str = "which target?") -> Target:
    """The target named, else the ledger's only one."""
    if name is None and len(ledger.targets) == 1:
        return next(iter(ledger.targets.values()))
    if name is None:
        raise InputError(
            question,
            hint=f"pass --target NAME (one of: {', '.join(sorted(ledger.targets))})"
            if ledger.targets
            else "the ledger has no target yet: `patchset target add vllm` (vllm, flashinfer, nccl have presets)",
        )
    if name not in ledger.targets:
        raise InputError(f"unknown target {name!r} in {ledger.path.name}: {offer(name)}")
    return ledger.targets[name]


@dataclass(frozen=True)
class Naming:
    """How the user says the bodies' file names are read (``--strip N``, ``--root DIR``); None: as fits."""

    strip: int | None = None
    root: str | None = None


def import_sources(
    ledger_path: Path,
    sources: list[Path],
    target: str | None = None,
    patch_id: str | None = None,
    *,
    base: str | None = None,
    base_tree: Path | None = None,
    naming: Naming = Naming(),
) -> ImportResult:
    """Import patches and expected hashes into the ledger, atomically. ``patch_id``: the id of the
    one patch imported. Each body's names are read the way that fits the base (given, else the
    target's when at hand, else its package: ``diffroot``) unless ``naming`` (or a ``-pN``) says."""
    strip, root = naming.strip, naming.root
    ledger = ledger_mod.load_ledger(ledger_path)
    t = choose_target(ledger, target, "which target do these patches belong to?")
    items, expected_files = collect(sources)
    if strip is not None and strip < 0:
        raise InputError(f"--strip {strip}: a number of leading components (0, 1, ...)")
    if root is not None:
        root = check_relative(root, what="--root").rstrip("/") + "/"
    for item in items:
        item.strip = strip if strip is not None else item.strip
        item.root = root if root is not None else item.root
    base_files, label = known_base_files(ledger, t, base, base_tree)
    result = ImportResult()
    if patch_id is not None and not ID_RE.match(patch_id):
        raise InputError(
            f"--id {patch_id!r} is not an id",
            hint="use letters, digits, '.', '_' and '-' (starting with one of the first two)",
        )
    if patch_id is not None and len(items) != 1:
        raise InputError(
            f"--id names one patch, and the sources hold {len(items)}",
            hint="import that one patch file alone with --id",
        )
    given = base is not None or base_tree is not None
    with (
        open_stock(ledger.root, t, base, base_tree) if given else nullcontext() as stock,
        ledger_mod.edit(ledger_path) as e,
    ):
        import_items(e, t, items, result, [patch_id] if patch_id is not None else None, base_files, stock)
        if given and not t.base and label:
            e.doc["targets"][t.name]["base"] = result.recorded_base = label  # --base: the target had none
        for ef in expected_files:  # the build tree's layout -> the lock's key space (source layout)
            hashes = {
                check_relative(t.lock_key(k), what=f"{ef}: {k!r} as a lock key"): v
                for k, v in _expected(ef, relative=True).items()
            }
            e.lock.target(t.name).files.update(hashes)
            result.expected[str(ef)] = len(hashes)
    if not expected_files and (given or _base_at_hand(ledger, t)):
        complete_lock(ledger_path, t.name, base, base_tree)  # beside an overlay's or a script's files
    return result


def _source_name(target: Target, body: str) -> str:
    """The name a body was imported under: its path below the target's series directory (as
    ``ImportItem.name`` has it), else its file name."""
    prefix = f"patchset/series/{target.name}/"
    return body[len(prefix) :] if body.startswith(prefix) else Path(body).name


def _refuse_collision(e: ledger_mod.Edit, target: Target, item: ImportItem, pid: str, body: str | None) -> None:
    """``item`` maps to the id of an existing patch: an update when that patch came from the same
    source name (or has no body yet), a collision when it came from another one."""
    if body is None:
        rel = f"patchset/series/{target.name}/{pid}.patch"
        if not (e.path.parent / rel).is_file():
            return  # declared in the ledger, never imported: this import brings its body
        body = rel
    was = _source_name(target, body)
    now = item.name if body.startswith(f"patchset/series/{target.name}/") else Path(item.name).name
    if was == now:
        return
    raise InputError(
        f"{item.name!r} would get the id {pid!r}, which patch {pid!r} imported from {was!r} already has: "
        "importing it would replace that patch's body; nothing was imported",
        where=Location(item.path),
        hint=f"import it under an id of its own (`patchset import --id NEW-ID {shlex.quote(str(item.path))}`), or, if it is "
        f"the new version of {pid!r}, name the file {was!r}",
    )


def _refuse_shared_body(e: ledger_mod.Edit, item: ImportItem, rel: str) -> None:
    """A new patch's body file must not be another patch's (a hand-written ``body`` key, ``--id``)."""
    for t in e.patch_tables():
        if t.get("body") == rel or (
            t.get("body") is None and rel == f"patchset/series/{t.get('target')}/{t.get('id')}.patch"
        ):
            raise InputError(
                f"{item.name!r} would be stored as {rel}, the body of patch {t.get('id')!r}; nothing was imported",
                where=Location(item.path),
                hint="rename the file before importing it",
            )


def base_problem(body: bytes, strip: int, target: Target, stock: StockBase) -> str:
    """The first file whose hunks do not match ``stock`` with zero fuzz, as apply words it ("" when
    every one does). ``body`` must parse (``body_problem`` first)."""
    for fp in parse_patch(body, strip):
        key = target.lock_key(fp.path)
        got = apply_file(stock.read(key) if fp.op != "create" else None, fp, fuzz=0)
        if not got.ok and got.status != "already_applied":
            failed = [h.describe() for h in got.hunks if h.status == "failed"]
            return f"{key}: " + ("; ".join(failed) or got.message) + f" on {stock.label}"
    return ""


def known_base_files(
    ledger: Ledger, target: Target, base: str | None = None, base_tree: Path | None = None
) -> tuple[set[str] | None, str]:
    """(the base's file list, its label) for reading diff names: the base given, else the target's
    recorded base when it is at hand without a download (a directory, a local clone, a release
    already in the history); ``(None, "")`` otherwise (the target's package directories are used)."""
    if base is None and base_tree is None and (not target.base or not _base_at_hand(ledger, target)):
        return None, ""
    with open_stock(ledger.root, target, base, base_tree) as stock:
        return set(stock.files()), stock.label


def _base_at_hand(ledger: Ledger, target: Target) -> bool:
    from packaging.utils import canonicalize_name

    from patchset.upstream import cache
    from patchset.upstream.bases import local_repo, version_like
    from patchset.upstream.releases import is_spec_like, parse_spec

    ref = target.base
    if any(p.is_dir() for p in (Path(ref).expanduser(), ledger.root / ref)) or local_repo(target.upstream or "-"):
        return True
    if is_spec_like(ref):
        spec = parse_spec(ref)
    elif version_like(ref) and target.package:
        spec = parse_spec(f"{target.package}=={version_like(ref)}")
    else:
        return False
    from patchset.upstream.history import ReleaseHistory

    git_dir = cache.history_dir() / f"{canonicalize_name(spec.project)}.git"
    return (git_dir / "HEAD").is_file() and ReleaseHistory(git_dir).rev(f"refs/tags/{spec.tag}") is not None


def _read_names(
    item: ImportItem, body: bytes, target: Target, base_files: set[str] | None, pid: str, result: ImportResult
) -> bytes:
    """Settle how ``body``'s file names are read (``diffroot``): ``item.strip``/``item.root`` as given,
    else the one reading that fits; the body re-rooted when a root goes in front of its names."""
    from patchset.commands.diffroot import infer, reroot

    if item.strip is None and not item.root:
        chosen, fits = infer(body, target, target.strip, base_files)
        if chosen is None and len(fits) > 1 and base_files is not None:
            raise InputError(
                "its file names fit several readings: " + "; ".join(r.describe() for r in fits),
                where=Location(item.path),
                hint="say which with --strip N (and --root DIR when the names start inside the package); "
                "nothing was imported",
            )
        if chosen is not None:
            item.strip, item.root = chosen.strip, chosen.root
            against = "the base's files" if base_files is not None else "the target's package"
            result.inferred[pid] = f"{chosen.describe()}: the reading that fits {against}"
    if item.root:
        body = reroot(body, target.strip_for(item.strip), item.root)
    return body


def import_items(
    e: ledger_mod.Edit,
    target: Target,
    items: list[ImportItem],
    result: ImportResult,
    ids: list[str] | None = None,
    base_files: set[str] | None = None,
    stock: StockBase | None = None,
) -> None:
    """Bodies into ``patchset/series/<target>/`` and entries into the ledger (new or updated);
    ``ids`` default to ``unique_ids(items)``; with ``stock`` (``--base``) each hunk must match it."""
    tname = target.name
    for item, pid in zip(items, ids if ids is not None else unique_ids(items), strict=True):
        body = item.data if item.data is not None else read_source(item.path)
        _check_text(item, body)
        body = _read_names(item, body, target, base_files, pid, result)
        level = item.strip if item.strip is not None else target.strip
        why = body_problem(body, level, item.name) or (base_problem(body, level, target, stock) if stock else "")
        if why:
            raise InputError(
                f"{why}: apply would refuse this body",
                where=Location(item.path),
                hint="fix the diff (or regenerate it with `git diff`/`diff -u`); nothing was imported",
            )
        existing = e.patch_table(pid)
        rel = f"patchset/series/{tname}/{body_name(item.name, pid)}"
        digest = sha256_bytes(body)
        if existing is not None:
            if existing.get("target") != tname:
                raise InputError(
                    f"patch {pid!r} exists for target {existing.get('target')!r}",
                    where=Location(item.path),
                    hint=f"import it with --target {existing.get('target')}",
                )
            rel = existing.get("body") or f"patchset/series/{tname}/{pid}.patch"
            old = e.path.parent / rel
            same = old.is_file() and old.read_bytes() == body
            if same and e.lock.bodies.get(pid) == digest:
                result.unchanged.append(pid)
                continue
            if not same:
                _refuse_collision(e, target, item, pid, existing.get("body"))
            if "body" not in existing and body_name(item.name, pid) != f"{pid}.patch":
                existing["body"] = rel = f"patchset/series/{tname}/{item.name}"
            table = existing
            result.updated.append(pid)
        else:
            _refuse_shared_body(e, item, rel)
            table = _add_entry(e, tname, pid, rel, body)
            result.added.append(pid)
        if existing is None or pid in result.inferred or item.root:  # a new reading replaces the old one
            if item.strip is not None and item.strip != target.strip:
                e.set_path(table, "source.strip", item.strip)
            if item.root:
                e.set_path(table, "source.root", item.root)
        e.write_file(rel, body)
        e.lock.bodies[pid] = digest
        level = target.strip_for(item.strip)
        result.files.setdefault(tname, []).extend(s.path for s in diffstat(body, level))


def _add_entry(e: ledger_mod.Edit, tname: str, pid: str, rel: str, body: bytes) -> Any:
    """A new entry for the body ``rel``, filled from its header (subject, authors, DEP-3, PRs)."""
    meta = parse_meta(body)
    values = {
        "id": pid,
        "target": tname,
        "body": rel,
        "title": meta.title or pid,
        "origin": meta.origin or ("upstream" if meta.prs else "ours"),
        "authors": meta.authors,
        "description": meta.description[:2000],
    }
    table = e.add_patch(values)
    for key, refs in (("prs", meta.prs), ("issues", meta.issues), ("commits", meta.commits)):
        if refs:
            e.set_path(table, f"upstream.{key}", refs)
    for name, value in meta.dep3.items():
        e.set_path(table, f"dep3.{name}", value)
    if meta.upstream_status:
        table.add("notes", f"Upstream-Status: {meta.upstream_status}")
    return table


# ---- a build repository: per-target patch folders and an EXPECTED.sha256 ---------------------------
def _has_patches(d: Path) -> bool:
    return (d / "series").is_file() or any(f.is_file() and f.suffix in PATCH_SUFFIXES for f in d.iterdir())


def build_folders(src: Path) -> dict[str, Path] | None:
    """The per-target patch folders of a build repository (``DIR/patches/<target>/*.patch`` or
    ``DIR/<target>/*.patch``), or None when ``src`` is a plain patch directory or not a directory."""
    if not src.is_dir() or _has_patches(src):
        return None
    for root in (src / "patches", src):
        if root.is_dir():
            found = {d.name: d for d in sorted(root.iterdir()) if d.is_dir() and _has_patches(d)}
            if found:
                return found
    return None


def is_repository(src: Path, folders: dict[str, Path] | None, known: set[str]) -> bool:
    """``src`` is a repository to survey: a directory that is not a patch folder (a series, only
    patches at its top) nor a build repository whose folders all name presets or the ledger's
    targets (``known``: ``patches/vllm/``)."""
    from patchset.ledger.presets import PRESETS

    if not src.is_dir() or (src / "series").is_file() or (src / "EXPECTED.sha256").is_file():
        return False
    if _has_patches(src):  # patches at the top: a patch folder, unless folders beside them hold more
        return any(d.is_dir() and not d.name.startswith(".") for d in src.iterdir())
    return not folders or any(name not in PRESETS and name not in known for name in folders)


@dataclass
class BuildImport:
    """What ``patchset import DIR`` inferred from a build repository, and what it did."""

    source: str
    folders: dict[str, str] = field(default_factory=dict)  # target -> folder
    created: dict[str, dict] = field(default_factory=dict)  # target -> its [targets.<name>] values
    preset: list[str] = field(default_factory=list)  # created targets that came from a preset
    patches: dict[str, list[str]] = field(default_factory=dict)  # target -> ids in series order
    result: ImportResult = field(default_factory=ImportResult)
    expected: dict[str, dict[str, int]] = field(default_factory=dict)  # EXPECTED file -> target -> count
    unmatched: dict[str, list[str]] = field(default_factory=dict)  # EXPECTED file -> paths no patch touches

    def to_json(self) -> dict[str, object]:
        return {
            **{k: v for k, v in vars(self).items() if k != "result"},
            **self.result.to_json(),
            "expected": self.expected,
        }


def _expected_files(src: Path, folders: dict[str, Path]) -> list[tuple[Path, str | None]]:
    """EXPECTED.sha256 files: at the top (any target) or inside one target's folder."""
    out: list[tuple[Path, str | None]] = [(d / "EXPECTED.sha256", None) for d in (src, src / "patches")]
    out += [(f / "EXPECTED.sha256", name) for name, f in folders.items()]
    return [(f, name) for f, name in out if f.is_file()]


def _owner(path: str, keys: dict[str, tuple[str, str]]) -> tuple[str, str] | None:
    """The (target, lock key) whose patched file ``path`` names: the same path, or the same path
    under a prefix (``/usr/lib/python3.12/dist-packages/vllm/x.py`` names ``vllm/x.py``)."""
    if path in keys:
        return keys[path]
    best = max((k for k in keys if path.endswith("/" + k)), key=len, default=None)
    return keys[best] if best else None


def patched_keys(targets: dict[str, Target], files: dict[str, list[str]]) -> dict[str, tuple[str, str]]:
    """Every spelling of each patched file (as its body names it, its source-layout lock key, its
    installed path) -> (target, lock key): an ``EXPECTED.sha256`` line in either layout finds the
    key ``apply`` checks, whichever layout the body was written in."""
    keys: dict[str, tuple[str, str]] = {}
    for name, paths in files.items():
        t = targets[name]
        for f in paths:
            key = t.lock_key(f)
            for spelling in t.spellings(f, key):
                keys.setdefault(spelling, (name, key))
    return keys


def import_build(ledger_path: Path, src: Path, folders: dict[str, Path]) -> BuildImport:
    """Create the missing targets (presets where the folder name is known), import every folder's
    patches in file order, and file the expected hashes under the target whose patches touch each
    path, all in one atomic ledger edit."""
    from patchset.commands.targets import check_name
    from patchset.ledger.presets import PRESETS, target_values

    ledger = ledger_mod.load_ledger(ledger_path)
    rep = BuildImport(str(src), folders={n: str(f) for n, f in folders.items()})
    targets = dict(ledger.targets)
    with ledger_mod.edit(ledger_path) as e:
        for name in folders:
            if name not in targets:
                check_name(name)
                values = target_values(name)
                e.add_target(name, values)
                rep.created[name] = values
                if name in PRESETS:
                    rep.preset.append(name)
                targets[name] = ledger_mod.target_from(name, values)
        for name, folder in folders.items():
            items, _ = collect([folder])
            base_files = known_base_files(ledger, targets[name])[0] if targets[name].base else None
            import_items(e, targets[name], items, rep.result, None, base_files)
            rep.patches[name] = [patch_id_for(i.name) for i in items]
        keys = patched_keys(targets, rep.result.files)
        for ef, only in _expected_files(src, folders):
            counts: dict[str, int] = {}
            for path, digest in _expected(ef).items():
                owner = _owner(path, {k: v for k, v in keys.items() if only is None or v[0] == only})
                if owner is None:
                    rep.unmatched.setdefault(str(ef), []).append(path)
                    continue
                key = check_relative(owner[1], what=f"{ef}: {path!r} as a lock key")
                e.lock.target(owner[0]).files[key] = digest
                counts[owner[0]] = counts.get(owner[0], 0) + 1
            rep.expected[str(ef)] = counts
    return rep

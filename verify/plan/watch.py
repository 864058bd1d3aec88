"""What a patch's without-run depends on, as far as verify can tell before it starts anything.

Why this module exists: a patch's verdict (proven, not needed) is worth carrying to another night
only when nothing it rests on moved. That is, as far as a static look can tell, the files the patch
writes and the modules those files import (an ``ast`` scan of each patched Python file as the base
has it, plus the import lines the series adds to it; direct imports only, resolved to files of the
tree), each in three states: the base tree (upstream), the tree with the series and the tree without
the patch. A change upstream shows in the first, a neighbouring patch's change in the other two.

Of an imported module, what is watched is the names the patched file uses from it
(``verify.plan.names``: each one's definition, compared by AST), or the whole file where that
cannot be told (``watch = "files"`` on the target: always the whole file, as the first scan did).
What the scan cannot see is said in docs/verify-plan.md: a module reached only through another
import, a plugin loaded by name, a change in a compiled extension or in the engine itself. Rotation
(``--full-every``) bounds how long such a change can hide.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from patchset.confine import confine
from patchset.engine.results import SeriesItem, SeriesResult
from patchset.errors import PatchsetError, UnsafePathError
from patchset.patchfmt.diffs import parse_patch
from patchset.verify.plan.names import SEP, Tree, absolute, file_of, parse, watched_names

ABSENT, UNSAFE = "absent", "unsafe"  # digests of a file that is not there / may not be read
MAX_SCAN = 4 << 20  # bytes of a module parsed for its imports (vLLM's largest is ~300 KB)
MAX_WATCH = 2048  # watched files per patch
DIGEST_LEN = 16


@dataclass
class Watch:
    """A patch's watched files: why each is watched, and its digest in the base, with the series and
    without the patch (``DIGEST_LEN`` hex digits, ``absent`` or ``unsafe``)."""

    why: dict[str, str] = field(default_factory=dict)  # key -> "patched" | "imported by P" | "used by P"
    digests: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # key -> (base, with, without)
    notes: list[str] = field(default_factory=list)  # what the scan could not read


def short(digest: str | None) -> str:
    return digest[:DIGEST_LEN] if digest else ABSENT


def file_digest(root: Path, rel: str) -> str:
    """The file's sha256 (short) as the engine hashes it (a link: its target text), ``absent``, or
    ``unsafe`` when the path leaves the tree."""
    try:
        path = confine(root, rel, what="a watched file")
    except UnsafePathError:
        return UNSAFE
    try:
        if path.is_symlink():
            return short(hashlib.sha256(os.fsencode(os.readlink(path))).hexdigest())
        if not path.is_file():
            return ABSENT
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
        return short(h.hexdigest())
    except OSError:
        return UNSAFE


def body_digest(body: bytes) -> str:
    return short(hashlib.sha256(body).hexdigest())


def _read_source(root: Path, rel: str) -> str | None:
    try:
        path = confine(root, rel, what="a patched module")
        if not path.is_file() or path.stat().st_size > MAX_SCAN:
            return None
        return path.read_text(encoding="utf-8", errors="replace")
    except (OSError, UnsafePathError):
        return None


def _modules(tree: ast.AST, rel: str) -> list[str]:
    """Dotted names an ``import`` may load: ``import a.b`` -> a.b; ``from a import b`` -> a, a.b;
    ``from .c import d`` relative to ``rel``'s package (one that climbs out of the tree: none)."""
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level <= rel.count("/") + 1:
            base = absolute(node, rel)
            if base:
                out.append(base)
            out += [f"{base}.{alias.name}" if base else alias.name for alias in node.names if alias.name != "*"]
    return out


def _added_imports(lines: Iterable[str]) -> str:
    """The import statements among lines a patch adds (indentation removed, parenthesised ones
    joined), as source ``ast`` parses."""
    out: list[str] = []
    pending: list[str] = []
    depth = 0
    for raw in lines:
        line = raw.strip()
        if not pending and not line.startswith(("import ", "from ")):
            continue
        pending.append(line)
        depth += line.count("(") - line.count(")")
        if depth <= 0 and not line.endswith("\\"):
            out.append(" ".join(p.rstrip("\\") for p in pending))
            pending, depth = [], 0
    return "\n".join(out)


def imports_of(source: str, rel: str, added: Iterable[str], exists: Callable[[str], bool]) -> list[str]:
    """Tree paths of the modules the Python file ``rel`` imports directly (its ``source`` and the
    import lines the series adds to it), as far as they are files of the tree."""
    names: list[str] = []
    for text in (source, _added_imports(added)):
        tree = parse(text)
        names += _modules(tree, rel) if tree is not None else []
    resolver = Tree(lambda _: None, exists)
    found: list[str] = []
    for name in names:
        hit = resolver.resolve(name, rel)
        if hit and hit != rel and hit not in found:
            found.append(hit)
    return found


def watched(
    source: str | None, rel: str, added: list[str], modules: Tree, written: Callable[[str], bool], by_name: bool = True
) -> dict[str, str]:
    """What the patched Python file ``rel`` watches of the modules it imports: ``{key: why}``, the
    names it uses (``by_name``; ``path::NAME``) or whole files. A module the series writes is watched
    whole (its names with the series are not known before the series is applied), and so is every
    import of a file that does not parse."""
    tree = parse(source) if by_name and source is not None else None
    if tree is None:
        return {dep: f"imported by {rel}" for dep in imports_of(source or "", rel, added, modules.exists)}
    extra = [t for t in [parse(_added_imports(added))] if t is not None]
    out: dict[str, str] = {}
    for k, why in watched_names(tree, rel, modules, f"used by {rel}", added, extra).items():
        whole = SEP in k and written(file_of(k))
        out.setdefault(file_of(k) if whole else k, f"imported by {rel}" if whole or SEP not in k else why)
    return out


def key_digest(modules: Tree, base: Callable[[str], str], k: str) -> str:
    """A watched key's digest in the base tree: a file's, or a name's definition (``names``)."""
    if SEP not in k:
        return base(k)
    module = modules.module(file_of(k))
    try:
        return module.digest(k.split(SEP, 1)[1]) if module is not None else base(file_of(k))
    except RecursionError:  # a definition nested deeper than the walk goes: the file's digest
        return base(file_of(k))


def added_lines(items: list[SeriesItem], mapper: Callable[[str], str] | None) -> dict[str, list[str]]:
    """Per tree path, the lines the series' patches add to it (for the import scan)."""
    out: dict[str, list[str]] = {}
    for it in items:
        try:
            files = parse_patch(it.body, it.strip, source=it.patch_id)
        except PatchsetError:
            continue
        for fp in files:
            target = fp.target
            if target is None or not target.endswith(".py"):
                continue
            path = mapper(target) if mapper else target
            lines = out.setdefault(path, [])
            for h in fp.hunks:
                lines += [ln[1:].decode("utf-8", "replace") for ln in h.lines if ln[:1] == b"+"]
    return out


def patched_paths(full: SeriesResult, patch_id: str) -> list[str]:
    """The tree paths a patch reads or writes in the series' dry run."""
    out: list[str] = []
    for pr in full.patches:
        if pr.patch_id != patch_id:
            continue
        for f in pr.files:
            for p in (f.path, f.old_path):
                if p and p not in out:
                    out.append(p)
    return out


def watch_for(
    base: Path,
    patch_id: str,
    full: SeriesResult,
    reduced: SeriesResult | None,
    added: dict[str, list[str]],
    by_name: bool = True,
) -> Watch:
    """The watched files and names of ``patch_id`` and their digests (see the module docstring)."""
    w = Watch()

    @functools.cache
    def base_digest(rel: str) -> str:
        return file_digest(base, rel)

    def exists(rel: str) -> bool:
        return base_digest(rel) not in (ABSENT, UNSAFE) or rel in full.files

    def written(rel: str) -> bool:
        return rel in full.files or (reduced is not None and rel in reduced.files)

    modules = Tree(lambda rel: _read_source(base, rel), exists)
    for rel in patched_paths(full, patch_id):
        w.why.setdefault(rel, "patched")
        if not rel.endswith(".py"):
            continue
        source = _read_source(base, rel)
        if source is None and base_digest(rel) not in (ABSENT,):
            w.notes.append(f"{rel}: not scanned for imports (unreadable or larger than {MAX_SCAN >> 20} MiB)")
        for k, why in watched(source, rel, added.get(rel, []), modules, written, by_name).items():
            w.why.setdefault(k, why)
    if len(w.why) > MAX_WATCH:
        w.notes.append(f"watches {len(w.why)} files and names; only the first {MAX_WATCH} are recorded")
        w.why = dict(list(w.why.items())[:MAX_WATCH])
    for k in w.why:
        b = key_digest(modules, base_digest, k)
        with_d = short(full.files[k]) if k in full.files else b
        without = short(reduced.files[k]) if reduced is not None and k in reduced.files else b
        w.digests[k] = (b, with_d, without)
    return w


def disjoint(a: Watch, b: Watch) -> bool:
    """No file watched by both (in whole or by a name of it): dropping the two patches together
    changes each one's files as dropping it alone does."""
    return not ({file_of(k) for k in a.why} & {file_of(k) for k in b.why})

"""What a patch's without-run depends on, as far as verify can tell before it starts anything.

Why this module exists: a patch's verdict (proven, not needed) is worth carrying to another night
only when nothing it rests on moved. That is, as far as a static look can tell, the files the patch
writes and the modules those files import (an ``ast`` scan of each patched Python file as the base
has it, plus the import lines the series adds to it; direct imports only, resolved to files of the
tree), each in three states: the base tree (upstream), the tree with the series and the tree without
the patch. A change upstream shows in the first, a neighbouring patch's change in the other two.

What the scan cannot see is said in docs/verify-plan.md: a module reached only through another
import, a plugin loaded by name, a change in a compiled extension or in the engine itself. Rotation
(``--full-every``) bounds how long such a change can hide.
"""

from __future__ import annotations

import ast
import hashlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from patchset.confine import confine
from patchset.engine.results import SeriesItem, SeriesResult
from patchset.errors import PatchsetError, UnsafePathError
from patchset.patchfmt.diffs import parse_patch

ABSENT, UNSAFE = "absent", "unsafe"  # digests of a file that is not there / may not be read
MAX_SCAN = 4 << 20  # bytes of a module parsed for its imports (vLLM's largest is ~300 KB)
MAX_WATCH = 2048  # watched files per patch
DIGEST_LEN = 16


@dataclass
class Watch:
    """A patch's watched files: why each is watched, and its digest in the base, with the series and
    without the patch (``DIGEST_LEN`` hex digits, ``absent`` or ``unsafe``)."""

    why: dict[str, str] = field(default_factory=dict)  # path -> "patched" | "imported by <path>"
    digests: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # path -> (base, with, without)
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


def _modules(tree: ast.AST, package: list[str]) -> list[str]:
    """Dotted names an ``import`` may load: ``import a.b`` -> a.b; ``from a import b`` -> a, a.b;
    ``from .c import d`` relative to ``package``."""
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                keep = len(package) - (node.level - 1)
                if keep < 0:
                    continue
                base = ".".join(package[:keep] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
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
    parts = rel.split("/")
    package = parts[:-1]
    names: list[str] = []
    for text in (source, _added_imports(added)):
        try:
            names += _modules(ast.parse(text), package)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
    found: list[str] = []
    for name in names:
        segs = [s for s in name.split(".") if s]
        if not segs or any(not s.isidentifier() for s in segs):
            continue
        roots = [""]
        if segs[0] in parts[:-1]:  # a package under a prefix (src/, python/): resolve from there
            roots.append("/".join(parts[: parts.index(segs[0])]))
        for root in roots:
            stem = "/".join(([root] if root else []) + segs)
            hit = next((c for c in (f"{stem}.py", f"{stem}/__init__.py") if exists(c)), None)
            if hit and hit != rel and hit not in found:
                found.append(hit)
                break
    return found


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
) -> Watch:
    """The watched files of ``patch_id`` and their digests (see the module docstring)."""
    w = Watch()
    cache: dict[str, str] = {}

    def base_digest(rel: str) -> str:
        if rel not in cache:
            cache[rel] = file_digest(base, rel)
        return cache[rel]

    def exists(rel: str) -> bool:
        return base_digest(rel) not in (ABSENT, UNSAFE) or rel in full.files

    for rel in patched_paths(full, patch_id):
        w.why.setdefault(rel, "patched")
        if not rel.endswith(".py"):
            continue
        source = _read_source(base, rel)
        if source is None and base_digest(rel) not in (ABSENT,):
            w.notes.append(f"{rel}: not scanned for imports (unreadable or larger than {MAX_SCAN >> 20} MiB)")
        for dep in imports_of(source or "", rel, added.get(rel, []), exists):
            w.why.setdefault(dep, f"imported by {rel}")
    if len(w.why) > MAX_WATCH:
        w.notes.append(f"watches {len(w.why)} files; only the first {MAX_WATCH} are recorded")
        w.why = dict(list(w.why.items())[:MAX_WATCH])
    for rel in w.why:
        b = base_digest(rel)
        with_d = short(full.files[rel]) if rel in full.files else b
        without = short(reduced.files[rel]) if reduced is not None and rel in reduced.files else b
        w.digests[rel] = (b, with_d, without)
    return w


def disjoint(a: Watch, b: Watch) -> bool:
    """No file watched by both: dropping the two patches together changes each one's files as
    dropping it alone does."""
    return not (set(a.why) & set(b.why))

"""Which reading of a diff's file names fits the target: the strip level, an install prefix, ``-p0``,
paths rooted inside the package.

``infer`` tries each strip level, and each package root in front of what is left, against the
base's files (or, without a base, the target's package directories: strip levels only). The
target's own reading wins when it fits and nothing else does; one other fitting reading is taken
and said; two are a question for the user (``--strip``/``--root``). A reading with a root is no
strip level: the body's names are re-rooted (``reroot``) and the ledger records it.
"""

from __future__ import annotations

from dataclasses import dataclass

from patchset.errors import InputError, PatchFormatError
from patchset.ledger.model import Target
from patchset.patchfmt.diffs import parse_patch
from patchset.patchfmt.names import strip_path
from patchset.patchfmt.reader import ReadError, diff_start, read

MAX_STRIP = 12


@dataclass(frozen=True)
class Reading:
    """One way to read a diff's names: strip ``strip`` components, then put ``root`` in front."""

    strip: int
    root: str
    paths: tuple[str, ...]  # what the patch's files become

    def describe(self) -> str:
        what = f"-p{self.strip}" + (f" under {self.root}" if self.root else "")
        return f"{what} ({', '.join(self.paths[:2])}{', …' if len(self.paths) > 2 else ''})"


def package_roots(t: Target) -> list[str]:
    """Directories (``vllm/``, ``include/``) the target's files live under."""
    names = {t.name, t.package, t.package.replace("-", "_")}
    if t.package.endswith("-python"):
        names.add(t.package[: -len("-python")].replace("-", "_"))
    roots = {f"{n}/" for n in names if n}
    roots |= {src for src, _ in t.path_map.prefixes} | {dst for _, dst in t.path_map.prefixes}
    return sorted(r if r.endswith("/") else r + "/" for r in roots)


def _names(body: bytes) -> list[tuple[str, bool]] | None:
    """The files as written (no strip): (name, created?), or None when the body does not parse."""
    try:
        fps = parse_patch(body, 0)
    except PatchFormatError:
        return None
    return [(fp.path, fp.op == "create") for fp in fps if fp.path]


def _dirs(files: set[str]) -> set[str]:
    out = {""}
    for f in files:
        parts = f.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            out.add("/".join(parts[:i]))
    return out


def _candidates(names: list[tuple[str, bool]], roots: list[str], with_roots: bool) -> list[Reading]:
    out: list[Reading] = []
    seen: set[tuple[str, ...]] = set()
    for k in range(MAX_STRIP + 1):
        try:
            stripped = [strip_path(n, k) for n, _ in names]
        except PatchFormatError:
            break
        for root in ["", *(roots if with_roots else [])]:
            if root and any(s.startswith(root) for s in stripped):
                continue
            paths = tuple(root + s for s in stripped)
            if paths not in seen:
                seen.add(paths)
                out.append(Reading(k, root, paths))
    return out


def infer(
    body: bytes, target: Target, default: int, base_files: set[str] | None
) -> tuple[Reading | None, list[Reading]]:
    """(the reading to use instead of ``-p<default>`` or None to keep it, every reading that fits).
    Against a base, more than one reading that fits (the target's own among them or not) is for the
    caller to ask; against package directories only a reading that fits where the target's own
    does not is taken, and nothing is asked."""
    names = _names(body)
    roots = package_roots(target)
    if not names or (base_files is None and not roots):
        return None, []
    dirs = _dirs(base_files) if base_files is not None else set()

    def fits(r: Reading) -> bool:
        for (_, created), path in zip(names, r.paths, strict=True):
            if path.startswith("/") or not path:
                return False
            key = target.lock_key(path)
            if base_files is None:
                if not any(path.startswith(x) for x in roots):
                    return False
            elif created:
                if key.rpartition("/")[0] not in dirs:
                    return False
            elif key not in base_files:
                return False
        return True

    found = [r for r in _candidates(names, roots, base_files is not None) if fits(r)]
    mine = [r for r in found if r.strip == default and not r.root]
    if base_files is None:  # package directories are weak evidence: never a question, only a clear case
        return (found[0] if len(found) == 1 and not mine else None), (mine or found)
    return (found[0] if len(found) == 1 and not mine else None), found


def reroot(body: bytes, strip: int, root: str) -> bytes:
    """``body`` with ``root`` put after the first ``strip`` components of every file name in its
    header lines (``diff --git``, ``---``/``+++``, ``rename``/``copy``, ``Index:``); the hunks and
    every other byte unchanged."""
    names = _names(body)
    if names is None:
        raise InputError("the body does not parse: its file names cannot be re-rooted")
    start, first_line = diff_start(body)
    try:
        raw = read(body, start, first_line + 1)
    except ReadError as exc:
        raise InputError(f"the body does not parse ({exc}): its file names cannot be re-rooted") from None
    hunks = sorted((int(f.hunks.head[i]), int(f.hunks.stop[i])) for f in raw for i in range(len(f.hunks)))
    spellings: dict[str, str] = {}
    sides = [side.strip('"') for f in raw for side in (f.source, f.target)]  # the other side's (b/… for a/…)
    for name in [*(n for n, _ in names), *sides]:
        if not name or name == "/dev/null" or name in spellings:
            continue
        try:
            rest = strip_path(name, strip)
        except PatchFormatError:
            continue
        spellings[name] = name[: len(name) - len(rest)] + root + rest
    out: list[bytes] = []
    pos, h = 0, 0
    heads = (b"diff --git ", b"--- ", b"+++ ", b"rename from ", b"rename to ", b"copy from ", b"copy to ", b"Index: ")
    for line in body.splitlines(keepends=True):
        here, pos = pos, pos + len(line)
        while h < len(hunks) and hunks[h][1] <= here:
            h += 1
        inside = h < len(hunks) and hunks[h][0] <= here < hunks[h][1]
        if not inside and here >= start and line.startswith(heads):
            text = line.decode("latin-1")
            for old in sorted(spellings, key=len, reverse=True):
                new = spellings[old]
                for sep in (" ", "\t", "\n", "\r"):
                    text = text.replace(f" {old}{sep}", f" {new}{sep}")
            line = text.encode("latin-1")
        out.append(line)
    return b"".join(out)

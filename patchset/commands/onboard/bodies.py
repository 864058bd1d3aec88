"""Which target a diff belongs to, how its names are read, and whether its body holds: the reader
``apply`` uses (``parse_patch``) and, with a base, each hunk applied with zero fuzz, so import refuses
what ``apply`` would refuse, in its words."""

from __future__ import annotations

import re
from dataclasses import dataclass

from patchset.commands.diffroot import package_roots, reroot
from patchset.commands.importer import base_problem
from patchset.errors import InputError, PatchFormatError
from patchset.ledger.model import Target
from patchset.patchfmt.diffs import parse_patch
from patchset.patchfmt.names import strip_path
from patchset.upstream.stock import StockBase

MAX_STRIP = 8
# an install prefix in front of a package's files: an image's site-packages, a venv's, a source checkout
INSTALL_PREFIX = re.compile(
    r"(?:^|/)(?:(?:[^/]+/)*?lib(?:64)?/python3\.\d+/(?:site|dist)-packages|site-packages|dist-packages|workspace/vllm)/"
)
_GIT_HEAD = re.compile(rb"^diff --git (?:\"?a/(\S+?)\"?) (?:\"?b/(\S+?)\"?)\s*$", re.M)
_PLUS = re.compile(rb"^\+\+\+ (\S+)", re.M)
_MINUS = re.compile(rb"^--- (\S+)", re.M)


@dataclass(frozen=True)
class Reading:
    """A diff of ``target``: strip ``strip`` components, put ``root`` in front (``b/v1/x.py``)."""

    target: str
    strip: int
    root: str
    paths: tuple[str, ...]
    prefix: str  # the components stripped after a/ or b/ (``usr/local/lib/python3.12/dist-packages``)


def names(body: bytes) -> list[str]:
    """The files a diff names, as written, read leniently (a malformed body still says whose it is)."""
    found = ["a/" + m.group(1).decode("utf-8", "replace") for m in _GIT_HEAD.finditer(body)]
    if not found:
        for plus, minus in zip(_PLUS.finditer(body), _MINUS.finditer(body), strict=False):
            name = plus.group(1) if plus.group(1) != b"/dev/null" else minus.group(1)
            found.append(name.decode("utf-8", "replace"))
    return list(dict.fromkeys(found))


def _strip_all(written: list[str], k: int) -> list[str] | None:
    try:
        return [strip_path(n, k) for n in written]
    except PatchFormatError:
        return None


def _prefix(name: str, k: int) -> str:
    parts = [p for p in name.split("/") if p][:k]
    if parts and parts[0] in ("a", "b"):
        parts = parts[1:]
    return "/".join(parts)


def read_as(written: list[str], t: Target, base_files: set[str] | None) -> Reading | None:
    """The reading of ``written`` that makes them files of ``t``: after an install prefix, else the
    target's own strip, else the one strip (or, against a base, strip and root) that fits."""
    roots = package_roots(t)
    if not written or not roots:
        return None

    def in_package(paths: list[str]) -> bool:
        return all(any(p.startswith(r) and len(p) > len(r) for r in roots) for p in paths)

    def in_base(paths: list[str]) -> bool:
        return base_files is None or all(t.lock_key(p) in base_files for p in paths)

    cuts = [m.end() if (m := INSTALL_PREFIX.search(n)) else -1 for n in written]
    if all(c >= 0 for c in cuts):
        for k in range(MAX_STRIP + 4):
            paths = _strip_all(written, k)
            if paths is not None and paths == [n[c:] for n, c in zip(written, cuts, strict=True)]:
                return Reading(t.name, k, "", tuple(paths), _prefix(written[0], k)) if in_package(paths) else None
    order = [t.strip, *(k for k in range(MAX_STRIP + 1) if k != t.strip)]
    fits = []
    for k in order:
        paths = _strip_all(written, k)
        if paths is not None and in_package(paths):
            fits.append(Reading(t.name, k, "", tuple(paths), _prefix(written[0], k)))
    if base_files is not None:
        inside = [r for r in fits if in_base(list(r.paths))]
        fits = inside or fits
        if not fits:
            for k in order:
                paths = _strip_all(written, k) or []
                for root in roots:
                    rooted = [root + p for p in paths]
                    if paths and in_base(rooted):
                        return Reading(t.name, k, root, tuple(rooted), _prefix(written[0], k))
    return fits[0] if fits else None


def refusal(body: bytes, reading: Reading, t: Target, stock: StockBase | None, source: str = "<patch>") -> str:
    """Why ``apply`` would refuse this body ("" when it would not): the reader's own words for a
    malformed diff, the hunk that does not match the base (zero fuzz) when a base is at hand."""
    try:
        if reading.root:
            body = reroot(body, reading.strip, reading.root)
        fps = parse_patch(body, reading.strip, source=source)
    except (PatchFormatError, InputError) as exc:
        return exc.message
    if stock is None or stock.target.name != t.name or not fps:
        return ""
    return base_problem(body, reading.strip, t, stock)

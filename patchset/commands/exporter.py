"""``patchset export``: the series as a quilt directory, a ``git am`` mbox, or ``EXPECTED.sha256``.

Quilt export copies bodies byte for byte in series order (import → export round-trips). The mbox
uses a body as is when it already is a format-patch mail, else wraps it in a mail built from the
ledger entry (title, authors, description, trailers).

The destination is a new or empty directory, or one an earlier export wrote (``patchset.outdir``):
a directory of someone's files is refused, never overwritten. Patch file names are made portable
(letters, digits, ``-``, ``_``, ``.`` in each component) and unique, so a name with a space or a
newline cannot give a ``series`` file that quilt or ``patchset import`` reads differently.
"""

from __future__ import annotations

import re
from pathlib import Path

from patchset import atomic, outdir
from patchset.commands.inspection import BODY_MISSING, body_state
from patchset.confine import check_relative
from patchset.errors import InputError
from patchset.ledger.lock import render_expected
from patchset.ledger.model import Ledger, Patch
from patchset.outdir import MARKER
from patchset.patchfmt.headers import split_header

FORMATS = ("quilt", "mbox", "expected")
_ZERO = "0" * 40


def _targets(ledger: Ledger, target: str | None) -> list[str]:
    if target:
        if target not in ledger.targets:
            raise InputError(f"unknown target {target!r}", hint=f"one of: {', '.join(ledger.targets)}")
        return [target]
    return list(ledger.targets)


def _bodies(ledger: Ledger, target: str) -> list[tuple[Patch, bytes]]:
    out = []
    for p in ledger.series(target):
        state, body = body_state(ledger, p)
        if state != BODY_MISSING and body is not None:
            out.append((p, body))
    return out


def quilt_name(ledger: Ledger, p: Patch) -> str:
    """The patch's name in a quilt series: its path under the target's series directory (sub-directories
    kept, as imported), else its file name."""
    prefix = ledger.targets[p.target].series_dir + "/"
    return p.body_path[len(prefix) :] if p.body_path.startswith(prefix) else Path(p.body_path).name


_UNPORTABLE = re.compile(r"[^A-Za-z0-9._-]+")
RESERVED = ("series", "series.mbox", "EXPECTED.sha256", MARKER)  # the export's own files


def portable_name(name: str, fallback: str) -> str:
    """``name`` with every path component reduced to letters, digits, ``-``, ``_`` and ``.`` (runs
    of anything else, spaces and newlines included, become one ``-``; no component starts with
    ``.`` or ``-``); ``fallback`` (the patch id) names a component that would be left empty."""
    parts = [c for c in (_UNPORTABLE.sub("-", part).lstrip(".-").rstrip("-") for part in name.split("/")) if c]
    if not parts or parts[-1].lower() in ("patch", "diff"):  # nothing of the file's own name was left
        parts[-1:] = [(_UNPORTABLE.sub("-", fallback).lstrip(".-") or "patch") + ".patch"]
    return check_relative("/".join(parts), what=f"export name for patch {fallback!r}")


def _unique(name: str, files: set[str], dirs: set[str]) -> str:
    """``name``, or ``name`` with ``-2``, ``-3`` ... before its suffix, clashing with no name in
    ``files`` and no directory in ``dirs`` (compared without letter case: an export must survive a
    case-insensitive file system); a name whose directory is another patch's file is flattened
    (``a/b.patch`` -> ``a-b.patch``). Records the name chosen in both sets."""
    if any(d in files for d in _dirs_of(name.lower())):
        name = name.replace("/", "-")
    head, dot, suffix = name.rpartition(".") if "." in name.rsplit("/", 1)[-1] else (name, "", "")
    candidate, n = name, 1
    while candidate.lower() in files or candidate.lower() in dirs:
        n += 1
        candidate = f"{head}-{n}{dot}{suffix}"
    files.add(candidate.lower())
    dirs.update(_dirs_of(candidate.lower()))
    return candidate


def _dirs_of(name: str) -> list[str]:
    parts = name.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def trailers(p: Patch) -> list[str]:
    """The trailers that name a patch in a mail or a commit (``Patch-Id:`` is what a re-run reads back)."""
    out = [f"Patch-Id: {p.id}", f"Origin: {p.origin}"]
    out += [f"Upstream-PR: {r}" for r in p.upstream.prs]
    out += [f"Ports: {r}" for r in p.upstream.ports]
    return out


def as_mail(p: Patch, body: bytes, index: int, total: int) -> bytes:
    """A format-patch style mail for one patch (the body itself when it already is one)."""
    if body.startswith(b"From ") and b"\nSubject:" in body[:2000]:
        return body if body.endswith(b"\n") else body + b"\n"
    _, diff = split_header(body)
    author = p.authors[0] if p.authors else "patchset"
    login = "".join(c for c in author if c.isalnum() or c in "-_") or "patchset"
    desc = "\n".join((">" + ln if ln.startswith("From ") else ln) for ln in (p.description or "").splitlines())
    head = (
        f"From {_ZERO} Mon Sep 17 00:00:00 2001\n"
        f"From: {author} <{login}@users.noreply.github.com>\n"
        f"Date: Thu, 1 Jan 2026 00:00:00 +0000\n"
        f"Subject: [PATCH {index}/{total}] {p.title}\n\n"
    )
    text = head + (desc + "\n\n" if desc else "") + "\n".join(trailers(p)) + "\n---\n"
    return text.encode("utf-8") + diff + (b"" if diff.endswith(b"\n") else b"\n")


def export(ledger: Ledger, fmt: str, dest: Path, target: str | None = None) -> dict[str, list[str]]:
    """Write the export under ``dest`` (new, empty or an earlier export's; else refused with
    nothing written); returns the files written per target."""
    if fmt not in FORMATS:
        raise InputError(f"unknown format {fmt!r}", hint=f"one of: {', '.join(FORMATS)}")
    names = _targets(ledger, target)
    populated = [t for t in names if (_bodies(ledger, t) if fmt != "expected" else ledger.lock.target(t).files)]
    if not populated:
        raise InputError(
            f"nothing to export for {fmt}: no imported bodies"
            if fmt != "expected"
            else "no expected hashes in the lock",
            hint="import bodies first (`patchset import`)",
        )
    nested = len(populated) > 1
    writes: dict[Path, bytes] = {}
    written: dict[str, list[str]] = {}
    for t in populated:
        out = dest / t if nested else dest
        if fmt == "quilt":
            written[t], lines = [], []
            taken: set[str] = {n.lower() for n in RESERVED}
            taken_dirs: set[str] = set()
            for p, body in _bodies(ledger, t):
                name = _unique(portable_name(quilt_name(ledger, p), p.id), taken, taken_dirs)
                writes[out / name] = body
                written[t].append(name)
                strip = p.strip_on(ledger.targets[t])
                lines.append(name if strip == 1 else f"{name} -p{strip}")  # quilt's default is -p1
            writes[out / "series"] = ("".join(f"{n}\n" for n in lines)).encode()
        elif fmt == "mbox":
            items = _bodies(ledger, t)
            writes[out / "series.mbox"] = b"".join(as_mail(p, b, i, len(items)) for i, (p, b) in enumerate(items, 1))
            written[t] = [p.id for p, _ in items]
        else:  # in the layout the build tree has (an installed target: site-packages paths)
            tgt = ledger.targets[t]
            files = {tgt.tree_path(k, tgt.layout): v for k, v in ledger.lock.target(t).files.items()}
            writes[out / "EXPECTED.sha256"] = render_expected(files).encode()
            written[t] = sorted(files)
    touched = sorted({p.relative_to(dest).parts[0] for p in writes})
    outdir.prepare(dest, option="export", command="export", touches=touched)
    atomic.write_many(writes)
    return written

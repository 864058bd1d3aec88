"""``patchset export``: the series as a quilt directory, a ``git am`` mbox, or ``EXPECTED.sha256``.

Quilt export copies bodies byte for byte in series order (import → export round-trips). The mbox
uses a body as is when it already is a format-patch mail, else wraps it in a mail built from the
ledger entry (title, authors, description, trailers).
"""

from __future__ import annotations

from pathlib import Path

from patchset import atomic
from patchset.commands.inspection import BODY_MISSING, body_state
from patchset.errors import InputError
from patchset.ledger.lock import render_expected
from patchset.ledger.model import Ledger, Patch
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


def trailers(p: Patch) -> list[str]:
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
    """Write the export under ``dest``; returns the files written per target."""
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
            items = _bodies(ledger, t)
            series = []
            lines = []
            for p, body in items:
                name = quilt_name(ledger, p)
                writes[out / name] = body
                series.append(name)
                strip = p.source.strip if p.source.strip is not None else ledger.targets[t].strip
                lines.append(name if strip == 1 else f"{name} -p{strip}")  # quilt's default is -p1
            writes[out / "series"] = ("".join(f"{n}\n" for n in lines)).encode()
            written[t] = series
        elif fmt == "mbox":
            items = _bodies(ledger, t)
            mails = b"".join(as_mail(p, b, i, len(items)) for i, (p, b) in enumerate(items, 1))
            writes[out / "series.mbox"] = mails
            written[t] = [p.id for p, _ in items]
        else:  # in the layout the build tree has (an installed target: site-packages paths)
            tgt = ledger.targets[t]
            files = {tgt.tree_path(k, tgt.layout): v for k, v in ledger.lock.target(t).files.items()}
            writes[out / "EXPECTED.sha256"] = render_expected(files).encode()
            written[t] = sorted(files)
    atomic.write_many(writes)
    return written

"""TOML reading with positions: parse errors and schema errors both name a line.

``tomllib`` parses (its errors carry line and column); ``Locator`` maps a key path such as
``("patch", 3, "upstream", "prs")`` back to the line that defines it, since neither tomllib nor
tomlkit keeps positions.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

try:  # tomli is the standard library's tomllib, published compiled (mypyc): it parses about twice as fast
    import tomli as tomllib
except ImportError:  # pragma: no cover - a source-only install
    import tomllib  # type: ignore[no-redef]

from patchset.errors import LedgerError, Location

KeyPath = tuple[Any, ...]

_ARRAY_HDR = re.compile(r"^\s*\[\[\s*(.+?)\s*\]\]\s*(#.*)?$")
# only ``Locator`` (an error's line) needs these: compiled there, on first use (re caches them)
_TABLE_HDR = r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(#.*)?$"
_KEY = r"""^\s*((?:"[^"]*"|'[^']*'|[A-Za-z0-9_-]+)(?:\s*\.\s*(?:"[^"]*"|'[^']*'|[A-Za-z0-9_-]+))*)\s*="""


def _split_dotted(name: str) -> list[str]:
    parts = re.findall(r"""\s*("[^"]*"|'[^']*'|[^.\s]+)\s*""", name)
    return [p[1:-1] if p[:1] in "\"'" else p for p in parts]


def parse(path: Path, text: str | None = None) -> dict[str, Any]:
    """Parse a TOML file; a syntax error becomes a LedgerError with the file and line."""
    if text is None:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise LedgerError(
                "file not found",
                where=Location(path),
                hint="run `patchset init` to create a ledger, or pass --ledger FILE / -C DIR",
            ) from None
        except UnicodeDecodeError as exc:
            raise LedgerError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", where=Location(path)) from None
    if text.startswith("\ufeff"):
        raise LedgerError(
            "the file starts with a UTF-8 byte-order mark (BOM), which TOML does not allow",
            where=Location(path, 1),
            hint="save it as UTF-8 without a BOM (e.g. `sed -i '1s/^\\xEF\\xBB\\xBF//' FILE`)",
        )
    try:
        data: dict[str, Any] = tomllib.loads(text)
        return data
    except RecursionError:
        raise LedgerError(
            "arrays or tables nested too deeply to read",
            where=Location(path, _deepest_line(text)),
            hint="a ledger needs a few levels of nesting at most: flatten this value",
        ) from None
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = re.search(r"line (\d+)", msg)
        line = int(m.group(1)) if m else None
        raise LedgerError(
            f"invalid TOML: {msg}",
            where=Location(path, line),
            hint="fix the syntax at that line (quotes, brackets, `key = value`)",
        ) from None


_ARRAY_LINE = re.compile(r"^[ \t]*\[\[.*$", re.M)


def array_lines(text: str, name: str) -> list[int]:
    """The 1-based line of each top-level ``[[name]]`` header, in order (what ``Locator`` gives for
    ``(name, i)``, without scanning every key: one regex pass, lines counted between matches)."""
    out = []
    lineno, last = 1, 0
    for m in _ARRAY_LINE.finditer(text):
        lineno += text.count("\n", last, m.start())
        last = m.start()
        h = _ARRAY_HDR.match(m.group(0))
        if h and _split_dotted(h.group(1)) == [name]:
            out.append(lineno)
    return out


def _deepest_line(text: str, limit: int = 100) -> int | None:
    """The line where brackets/braces first nest deeper than ``limit`` (strings not parsed: a hint)."""
    depth = 0
    for lineno, line in enumerate(text.splitlines(), start=1):
        for ch in line:
            depth += ch in "[{"
            depth -= ch in "]}"
            if depth > limit:
                return lineno
    return None


class Locator:
    """Finds the line that defines a key path in a TOML text."""

    def __init__(self, text: str) -> None:
        self.lines: dict[KeyPath, int] = {}
        counters: dict[KeyPath, int] = {}
        context: KeyPath = ()
        table_hdr, key = re.compile(_TABLE_HDR), re.compile(_KEY)
        for lineno, raw in enumerate(text.splitlines(), start=1):
            m = _ARRAY_HDR.match(raw)
            if m:
                names = _split_dotted(m.group(1))
                context = self._resolve_prefix(names[:-1], counters)
                arr = (*context, names[-1])
                idx = counters.get(arr, -1) + 1
                counters[arr] = idx
                # a new element resets the counters of arrays nested inside it
                for k in [k for k in counters if len(k) > len(arr) and k[: len(arr)] == arr]:
                    del counters[k]
                context = (*arr, idx)
                self.lines.setdefault(context, lineno)
                continue
            m = table_hdr.match(raw)
            if m and not raw.lstrip().startswith("[["):
                names = _split_dotted(m.group(1))
                context = self._resolve_prefix(names, counters)
                self.lines.setdefault(context, lineno)
                continue
            m = key.match(raw)
            if m:
                path = context + tuple(_split_dotted(m.group(1)))
                self.lines.setdefault(path, lineno)

    @staticmethod
    def _resolve_prefix(names: list[str], counters: dict[KeyPath, int]) -> KeyPath:
        out: KeyPath = ()
        for name in names:
            out = (*out, name)
            if out in counters:
                out = (*out, counters[out])
        return out

    def line_of(self, path: KeyPath) -> int | None:
        path = tuple(path)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return None

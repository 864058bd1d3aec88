"""Terminal output that reads at any width and in pipes, shared by every command that prints a table.

Tokens (an id, a path, a word) are never broken and paths never cut; a table too wide moves its
least important columns to a second line under the row; piped, a table is one tab-separated line
per row (as ``gh`` does). Every cell goes through ``patchset.text.terminal``. No rich here, so
``patchset list`` starts fast. ``PATCHSET_TTY=1``/``0`` forces the layout; the width comes from
``COLUMNS`` or the terminal; ``NO_COLOR`` turns colour off.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from typing import IO

from patchset.text import plain, terminal

_SGR = {
    "bold": "1",
    "dim": "2",
    "italic": "3",
    "underline": "4",
    "red": "31",
    "green": "32",
    "yellow": "33",
    "blue": "34",
    "magenta": "35",
    "cyan": "36",
}


class Styled:
    """Text with a style name such as ``"bold red"`` (ignored without colour)."""

    __slots__ = ("style", "text")

    def __init__(self, text: str, style: str = "") -> None:
        self.text, self.style = text, style

    def __str__(self) -> str:
        return self.text


Part = str | Styled
# A cell: plain text (tokens are words), styled text, or a list of items (each item one token).
Cell = str | Styled | Sequence[str] | None


_PROSE_BREAKS = re.compile(r"\r\n|[\n\t]")


def _safe_part(p: Part) -> Part:
    """A piece of a line as text: newlines and tabs folded to a space, other controls shown."""
    text = p.text if isinstance(p, Styled) else str(p)
    if plain(text):
        return p
    text = terminal(_PROSE_BREAKS.sub(" ", text))
    return Styled(text, p.style) if isinstance(p, Styled) else text


def _safe_text(text: str) -> str:
    return text if plain(text) else terminal(text.replace("\t", " "), block=True)


def _safe_cell(cell: Cell) -> Cell:
    """A cell as text: newlines kept (the layout reads them as token breaks, never prints them),
    tabs folded to a space (the piped layout's field separator), other controls shown."""
    if cell is None:
        return None
    if isinstance(cell, str):
        return _safe_text(cell)
    if isinstance(cell, Styled):
        safe = _safe_text(cell.text)
        return cell if safe is cell.text else Styled(safe, cell.style)
    return [c if plain(c) else _safe_text(c).replace("\n", " ") for c in map(str, cell)]


def _safe_row(row: Sequence[Cell]) -> list[Cell]:
    """A row with every cell safe (``_safe_cell``); one check for the whole row when nothing in it
    needs escaping, which is every row of an ordinary ledger."""
    texts = [
        c if isinstance(c, str) else c.text if isinstance(c, Styled) else "" if c is None else " ".join(map(str, c))
        for c in row
    ]
    return list(row) if plain(" ".join(texts)) else [_safe_cell(c) for c in row]


def _wraps(token: str) -> bool:
    """A token that may wrap at ``/`` when longer than a line: a path (a URL stays whole, to be
    copied or clicked)."""
    return "/" in token and "://" not in token


def _path_lines(path: str, width: int, first: int | None = None) -> list[str]:
    """A path too long for a line, wrapped at ``/`` boundaries: every line but the last ends with
    ``/``, continuation lines are indented two spaces. Nothing is dropped or cut; a single
    component longer than a line stays whole on its own line. ``first``: room on the first line."""
    parts = path.split("/")
    segs = [f"{p}/" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    lines: list[str] = []
    cur = ""
    for seg in segs:
        room = (width if first is None else first) if not lines else width - 2
        if cur and len(cur) + len(seg) > room:
            lines.append(cur)
            cur = seg
        else:
            cur += seg
    lines.append(cur)
    return [lines[0], *(f"  {ln}" for ln in lines[1:])]


GROW_COMFORT = 44  # what a ``grow`` column keeps before other columns move to the second line


class Col:
    """A column. ``drop`` > 0 lets it move to the second line when the width runs out (higher moves
    first). ``whole``: the cell is one token (an id, a PR reference), never wrapped. ``grow``: the
    column people read (an action) keeps ``GROW_COMFORT`` characters (or all it needs) before other
    columns move, and gets most of the spare width."""

    __slots__ = ("drop", "grow", "name", "right", "whole")

    def __init__(self, name: str, drop: int = 0, whole: bool = False, right: bool = False, grow: bool = False) -> None:
        self.name, self.drop, self.whole, self.right, self.grow = name, drop, whole, right, grow


def _items(cell: Cell) -> list[str]:
    if cell is None:
        return []
    if isinstance(cell, (str, Styled)):
        return [str(cell)] if str(cell) else []
    return [str(c) for c in cell]


def _style_of(cell: Cell) -> str:
    return cell.style if isinstance(cell, Styled) else ""


def _tokens(cell: Cell, whole: bool) -> list[str]:
    """Unbreakable pieces of a cell. List items keep a trailing comma except the last."""
    if isinstance(cell, (str, Styled)):
        text = str(cell)
        return [ln for ln in text.split("\n") if ln] if whole else text.split()
    items = _items(cell)
    return [f"{it}," if i < len(items) - 1 else it for i, it in enumerate(items)]


def _flat(cell: Cell, sep: str = ", ") -> str:
    if cell is None:
        return ""
    if isinstance(cell, (str, Styled)):
        return " ".join(str(cell).split()) if "\n" in str(cell) else str(cell)
    return sep.join(str(c) for c in cell)


def wrap_tokens(tokens: Sequence[str], width: int) -> list[str]:
    """Greedy packing of tokens into lines of ``width``; a token longer than a line gets its own,
    except a path, which wraps at ``/`` boundaries (``_path_lines``)."""
    lines: list[str] = []
    cur = ""
    for tok in tokens:
        if len(tok) > width and _wraps(tok):
            if cur:
                lines.append(cur)
            *done, cur = _path_lines(tok, width)
            lines += done
        elif not cur:
            cur = tok
        elif len(cur) + 1 + len(tok) <= width:
            cur += " " + tok
        else:
            lines.append(cur)
            cur = tok
    if cur:
        lines.append(cur)
    return lines


def _columns() -> int:
    """COLUMNS, else the terminal's width, else 100 (what shutil.get_terminal_size does, without
    importing shutil and the compression modules it pulls in)."""
    try:
        return int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        pass
    for fd in (1, 2):
        try:
            return os.get_terminal_size(fd).columns or 100
        except OSError:
            continue
    return 100


def _env_tty(stream: IO[str]) -> bool:
    forced = os.environ.get("PATCHSET_TTY")
    if forced in ("0", "1"):
        return forced == "1"
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Term:
    """Where a command prints: a stream, whether it is a terminal, its width, colour."""

    def __init__(
        self,
        stream: IO[str] | None = None,
        tty: bool | None = None,
        width: int | None = None,
        color: bool | None = None,
    ) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.tty = _env_tty(self.stream) if tty is None else tty
        if width is None:
            width = _columns() if self.tty else 10_000
        self.width = max(20, width)
        if color is None:
            color = self.tty and not os.environ.get("NO_COLOR") and os.environ.get("PATCHSET_TTY") != "1"
        self.color = bool(color)

    def reopen(self) -> None:
        """Re-read the stream, tty, width and colour from the environment (the CLI keeps one
        ``Term`` that every command module imported, and refreshes it at each invocation)."""
        self.__init__()  # type: ignore[misc]

    # ---- text -------------------------------------------------------------------------------
    def paint(self, text: str, style: str) -> str:
        """``text`` (made safe: ``patchset.text.terminal``) in ``style`` when colour is on."""
        return self._sgr(terminal(text), style)

    def _sgr(self, text: str, style: str) -> str:
        if not self.color or not style:
            return text
        codes = ";".join(_SGR[s] for s in style.split() if s in _SGR)
        return f"\x1b[{codes}m{text}\x1b[0m" if codes else text

    def _emit(self, text: str) -> None:
        self.stream.write(text + "\n")

    def write(self, text: str = "", style: str = "") -> None:
        """A block printed as it is (a diff, a log): newlines and tabs kept, every other control
        character shown (``patchset.text.terminal``); each line in ``style`` when colour is on."""
        text = terminal(text, block=True)
        if style and self.color:
            text = "\n".join(self._sgr(ln, style) if ln else ln for ln in text.split("\n"))
        self._emit(text)

    def line(self, *parts: Part, indent: str = "") -> None:
        """One logical line of prose: wrapped at spaces to the terminal width (never inside a word);
        in a pipe, one physical line. Newlines and tabs in the parts are spaces; other control
        characters are shown, never sent."""
        parts = tuple(_safe_part(p) for p in parts)
        indent = terminal(indent)
        if not self.tty:
            self._emit(indent + "".join(str(p) for p in parts))
            return
        units: list[list[tuple[str, str]]] = []  # words joined without a space; wrapping happens between units
        space = True
        for p in parts:
            text, style = (p.text, p.style) if isinstance(p, Styled) else (p, "")
            for m in re.finditer(r"(\s*)(\S+)", text):
                if m.group(1) or space or not units:
                    units.append([])
                units[-1].append((m.group(2), style))
                space = False
            space = space or text[-1:].isspace()
        width = self.width or 80
        cur, cur_len = "", 0  # the line being filled, and its length without escape codes
        for unit in units:
            ulen = sum(len(w) for w, _ in unit)
            if len(unit) == 1 and _wraps(unit[0][0]) and len(indent) + 2 + ulen > width:
                word, style = unit[0]  # a path longer than a line: wrapped at "/", never cut
                sep = 1 if cur_len else 0
                first = width - len(indent) - cur_len - sep
                if first < 8 and cur_len:  # (no room for a component here: start on the next line)
                    self._emit(indent + cur)
                    cur, cur_len, sep, first = "  ", 2, 0, width - len(indent) - 2
                pieces = _path_lines(word, width - len(indent), first=first)
                for piece in pieces[:-1]:
                    self._emit(indent + cur + " " * sep + self._sgr(piece.lstrip(), style))
                    cur, cur_len, sep = "  ", 2, 0
                last = pieces[-1].lstrip()
                cur, cur_len = cur + " " * sep + self._sgr(last, style), cur_len + sep + len(last)
                continue
            painted = "".join(self._sgr(w, st) for w, st in unit)  # (the parts are safe already)
            if cur_len and len(indent) + cur_len + 1 + ulen > width:
                self._emit(indent + cur)
                cur, cur_len = "  " + painted, 2 + ulen  # continuation lines are indented two more
            else:
                cur, cur_len = (cur + " " + painted, cur_len + 1 + ulen) if cur_len else (painted, ulen)
        self._emit(indent + cur)

    # ---- tables -----------------------------------------------------------------------------
    def table(
        self, cols: Sequence[Col], rows: Sequence[Sequence[Cell]], title: Part | None = None, *, header: bool = True
    ) -> None:
        """``header=False``: piped, the rows alone (a terminal always shows the column names)."""
        if title is not None:
            self.line(title)
        rows = [_safe_row(r) for r in rows]
        if not self.tty:
            self._plain(cols, rows, header)
        else:
            self._layout(cols, rows)

    def _plain(self, cols: Sequence[Col], rows: Sequence[Sequence[Cell]], header: bool = True) -> None:
        if header:
            self._emit("\t".join(terminal(c.name) for c in cols))
        for row in rows:
            self._emit("\t".join(_flat(cell, ",").replace("\t", " ") for cell in row))

    def _layout(self, cols: Sequence[Col], rows: Sequence[Sequence[Cell]]) -> None:
        width = self.width or 80
        n = len(cols)
        cells = [list(r) for r in rows]
        shown = list(range(n))  # column indexes in the table; the rest go to the second line

        def minw(i: int) -> int:
            toks = [len(t) for r in cells for t in _tokens(r[i], cols[i].whole)]
            return max([len(cols[i].name), *toks])

        def natural(i: int) -> int:
            lens = [len(_flat(r[i])) for r in cells] if not cols[i].whole else [minw(i)]
            return max([len(cols[i].name), *lens])

        def comfort(i: int) -> int:
            """A column that may move keeps at least 16 characters (or all it needs) in the table:
            text wrapped into a sliver reads worse than the same text on the second line. A ``grow``
            column keeps ``GROW_COMFORT``."""
            if cols[i].grow:
                return max(minw(i), min(natural(i), GROW_COMFORT))
            return max(minw(i), min(natural(i), 16)) if cols[i].drop else minw(i)

        def need() -> int:
            return sum(comfort(i) for i in shown) + 2 * (len(shown) - 1)

        shown = [i for i in shown if not cols[i].drop or any(_items(r[i]) for r in cells)]  # empty: no column
        while need() > width:
            movable = [i for i in shown if cols[i].drop > 0]
            if not movable:
                break
            shown.remove(max(movable, key=lambda k: (cols[k].drop, k)))
        for i in sorted((k for k in range(n) if k not in shown), key=lambda k: cols[k].drop):
            if not any(_items(r[i]) for r in cells):
                continue
            shown.append(i)  # a column moved early may fit again once a wider one has moved
            shown.sort()
            if need() > width:
                shown.remove(i)
        widths = {i: comfort(i) for i in shown}
        spare = width - (sum(widths.values()) + 2 * (len(shown) - 1))
        for i in [k for k in shown if cols[k].grow]:  # too narrow even so: a grow column gives back its comfort
            if spare < 0:
                back = min(-spare, widths[i] - minw(i))
                widths[i] -= back
                spare += back
        growing = [k for k in shown if cols[k].grow]
        budget = spare * 2 // 3 // max(1, len(growing))  # the columns people read first get most of it
        for i in growing:
            extra = min(budget, natural(i) - widths[i]) if spare > 0 else 0
            if extra > 0:
                widths[i] += extra
                spare -= extra
        while spare > 0:  # share the room left evenly among the columns that still wrap
            short = [i for i in shown if natural(i) > widths[i]]
            if not short:
                break
            share = max(1, spare // len(short))
            for i in short:
                extra = min(share, natural(i) - widths[i], spare)
                widths[i] += extra
                spare -= extra
        self._render(cols, cells, shown, widths, width)

    def _render(
        self, cols: Sequence[Col], cells: list[list[Cell]], shown: list[int], widths: dict[int, int], width: int
    ) -> None:
        """The table as laid out: the ``shown`` columns at their ``widths``, each row's other
        columns on a line of their own below it."""
        moved = [i for i in range(len(cols)) if i not in shown]
        header = "  ".join(
            self.paint(cols[i].name.rjust(widths[i]) if cols[i].right else cols[i].name.ljust(widths[i]), "bold")
            for i in shown
        )
        self._emit(header.rstrip())
        for r_i, r in enumerate(cells):
            wrapped = {i: wrap_tokens(_tokens(r[i], cols[i].whole), widths[i]) or [""] for i in shown}
            height = max(len(v) for v in wrapped.values()) if wrapped else 1
            for h in range(height):
                pieces = []
                for i in shown:
                    text = wrapped[i][h] if h < len(wrapped[i]) else ""
                    padded = text.rjust(widths[i]) if cols[i].right else text.ljust(widths[i])
                    pieces.append(self._sgr(padded, _style_of(r[i])) if text else padded)  # (cells are safe)
                self._emit("  ".join(pieces).rstrip())
            moved_cells = [(cols[i].name, cells[r_i][i]) for i in moved if _items(cells[r_i][i]) not in ([], ["-"])]
            if moved_cells:
                toks: list[str] = []
                for name, cell in moved_cells:
                    parts = _tokens(cell, cols[[c.name for c in cols].index(name)].whole)
                    toks += [f"{name}: {parts[0]}", *parts[1:]]  # the label stays with its first token
                    toks[-1] += ";"
                toks[-1] = toks[-1].rstrip(";")
                for ln in wrap_tokens(toks, width - 4):
                    self._emit("    " + ln)

"""Small text helpers every layer shares: comma-separated option lists and Markdown table cells.

They exist once here so that ``verify``, the gate, the status dashboard and the CLI split
``--tags cpu,gpu`` and escape a Markdown cell the same way.
"""

from __future__ import annotations

from collections.abc import Iterable


def split_list(values: Iterable[object] | str | None) -> list[str]:
    """``["cpu,fast", "gpu"]`` (or ``"cpu,gpu"``) -> ``["cpu", "fast", "gpu"]``: order kept,
    blanks and duplicates dropped."""
    if values is None:
        return []
    items = [values] if isinstance(values, str) else list(values)
    out: list[str] = []
    for item in items:
        for part in str(item).split(","):
            part = part.strip()
            if part and part not in out:
                out.append(part)
    return out


def md_cell(text: object) -> str:
    """``text`` made safe for one cell of a Markdown table (pipes escaped, newlines folded)."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def safe(text: str) -> str:
    """``text`` with control characters shown as ``\\xNN`` (escape sequences in a script's output or
    a file name cannot move the cursor, recolour or hide what is printed); tabs are kept."""
    return "".join(
        ch if ch == "\t" or (ch >= " " and not "\x7f" <= ch <= "\x9f") else f"\\x{ord(ch):02x}" for ch in text
    )

"""Small text helpers every layer shares: comma-separated option lists, ``Word`` (the base of every
closed set of words), a record's JSON keys (``json_fields``), and one sanitiser per output kind for
text that came from outside.

Once here so that every renderer neutralises hostile text the same way: ``terminal`` shows
controls, bidi overrides and lone surrogates instead of sending them; ``markdown_*`` also escape
what Markdown reads as structure; ``xml_text`` keeps a document well-formed; ``html_*`` escape for
HTML; ``safe_url`` passes only http(s) URLs (docs/security.md).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from enum import Enum
from pathlib import Path
from typing import Any


class Word(str, Enum):
    """A closed set of words: each member is its word (compared, printed and written to JSON as it)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    def __repr__(self) -> str:
        return repr(str(self.value))  # a message quoting a value (``{x!r}``) reads as it did for the word

    __hash__ = str.__hash__  # finds its word's entry in a dict keyed by words


__all__ = [
    "Word",
    "html_inline",
    "html_text",
    "json_fields",
    "markdown_block",
    "markdown_cell",
    "markdown_code",
    "markdown_link",
    "markdown_text",
    "plain",
    "safe_url",
    "split_list",
    "terminal",
    "xml_text",
]


def split_list(values: Iterable[object] | str | None) -> list[str]:
    """``["cpu,fast", "gpu"]`` (or ``"cpu,gpu"``) -> ``["cpu", "fast", "gpu"]``: order kept,
    blanks and duplicates dropped."""
    if values is None:
        return []
    items = [values] if isinstance(values, str) else list(values)
    parts = (part.strip() for item in items for part in str(item).split(","))
    return list(dict.fromkeys(part for part in parts if part))


def json_fields(obj: object, names: str) -> dict[str, Any]:
    """``{name: value}`` for the space-separated attribute ``names`` of ``obj``, in the order given
    (the order its JSON document keeps); a value with a ``to_json``, or a list of them, is written by it."""
    return {name: _json_value(getattr(obj, name)) for name in names.split()}


def _json_value(value: Any) -> Any:
    if hasattr(value, "to_json"):
        return value.to_json()
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        return value
    if isinstance(value, (list, tuple)) and not any(hasattr(v, "to_json") for v in value):
        return value
    return [v.to_json() if hasattr(v, "to_json") else v for v in value]  # records, or a lazy sequence (hunk results)


# ---- shown, never interpreted ---------------------------------------------------------------------
# C0 controls, DEL, C1 controls; Arabic letter mark, LRM/RLM, the bidi embeddings and overrides
# (U+202A-U+202E) and isolates (U+2066-U+2069); line and paragraph separators; lone surrogates
# (text decoded with surrogateescape, or broken JSON); U+FFFE/U+FFFF (not characters; invalid in XML).
_REST = "\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff"
_TERMINAL = re.compile(f"[\x00-\x1f{_REST}]")
_BLOCK = re.compile(f"[\x00-\x08\x0b-\x1f{_REST}]")  # the same, newlines and tabs kept
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def plain(text: str) -> bool:
    """Whether ``text`` has nothing any sanitiser here would change for a terminal (no control,
    bidi or separator character, no tab or newline): the fast path of the table renderer."""
    return _TERMINAL.search(text) is None


def _shown(m: re.Match[str]) -> str:
    c = m.group()
    o = ord(c)
    if c in _NAMED:
        return _NAMED[c]
    if o <= 0x9F:
        return f"\\x{o:02x}"
    if 0xDC80 <= o <= 0xDCFF:  # a byte that was not UTF-8, kept by surrogateescape
        return f"\\x{o - 0xDC00:02x}"
    return f"<U+{o:04X}>"


def terminal(text: object, *, block: bool = False) -> str:
    """``text`` safe to print on a terminal: every control character, DEL, C1 control,
    bidirectional override or isolate, line separator and lone surrogate shown as an escape
    (``\\x1b``, ``\\r``, ``<U+202E>``). ``block``: keep newlines and tabs (a diff, a log tail).
    Idempotent: the escapes are plain printable text."""
    s = "" if text is None else str(text)
    rx = _BLOCK if block else _TERMINAL
    return rx.sub(_shown, s) if rx.search(s) else s


# ---- Markdown -----------------------------------------------------------------------------------
_NEWLINES = re.compile(r"\r\n|[\r\n]")
# Markdown punctuation that can start structure inline: escapes, code spans, emphasis and
# strikethrough, links and images, raw HTML and autolinks, entities, table cells.
# (an underscore between two letters or digits is text: kv_cache_utils.py stays readable)
_MD_PUNCT = re.compile(r"[\\`*~\[\]<>&|]|(?<![^\W_])_|_(?![^\W_])")
# a block marker at the start of the text: a heading, a list item, or a dash or equals sign that
# could close a thematic break ("- --" after a list bullet) or underline a setext heading
_MD_LEAD = re.compile(r"^(\s*)(#{1,6}(?=\s|$)|\d{1,9}[.)](?=\s|$)|[+\-=])")


def markdown_text(text: object) -> str:
    """``text`` as literal Markdown text on one line: controls and bidi characters shown as in
    ``terminal``, newlines folded into a space, Markdown punctuation backslash-escaped (what is
    left renders exactly as the input, and cannot open a link, an image, HTML, a code span or a
    new table cell or row)."""
    s = terminal(_NEWLINES.sub(" ", "" if text is None else str(text)))
    s = _MD_PUNCT.sub(lambda m: "\\" + m.group(), s)
    return _MD_LEAD.sub(_lead, s, count=1)


def _lead(m: re.Match[str]) -> str:
    space, mark = m.group(1), m.group(2)
    if mark[0].isdigit():  # "1." / "1)": escape the dot, a backslash before a digit is text
        return f"{space}{mark[:-1]}\\{mark[-1]}"
    return f"{space}\\{mark}"


# one cell of a Markdown table: markdown_text escapes pipes and folds newlines already
markdown_cell = markdown_text


def markdown_code(text: object, *, cell: bool = False) -> str:
    """``text`` as one inline code span that cannot be closed early: fenced with one backtick
    more than the longest run inside it; controls shown, newlines folded. ``cell``: the span is
    inside a table cell, so its pipes are escaped (GitHub splits cells before reading spans)."""
    s = terminal(_NEWLINES.sub(" ", "" if text is None else str(text)))
    if not s:
        return ""
    if cell:
        s = s.replace("|", "\\|")
    fence = "`" * (max((len(r) for r in re.findall(r"`+", s)), default=0) + 1)
    if s.startswith("`") or s.endswith("`") or (s.startswith(" ") and s.endswith(" ") and s.strip()):
        s = f" {s} "
    return f"{fence}{s}{fence}"


def markdown_block(text: object) -> str:
    """``text`` (a log tail, a diff) as a fenced code block that cannot be closed early: the fence
    is one backtick longer than any run of backticks inside; controls shown, newlines and tabs
    kept. Returns the fence lines and the text, without a trailing newline."""
    s = terminal("" if text is None else str(text), block=True).rstrip("\n")
    fence = "`" * max(3, max((len(r) for r in re.findall(r"`+", s)), default=0) + 1)
    return f"{fence}\n{s}\n{fence}" if s else f"{fence}\n{fence}"


_URL_SAFE = "-._~:/?#@!$&'*+,;=%"  # RFC 3986 characters kept; ( ) [ ] < > | \ and spaces are encoded


def safe_url(url: object) -> str | None:
    """``url`` when it is an absolute http(s) URL with a host and no whitespace or control
    character; else None (``javascript:``, ``data:``, relative, malformed)."""
    if not isinstance(url, str) or not url or len(url) > 4096:
        return None
    if _TERMINAL.search(url) or "\\" in url or any(c.isspace() for c in url):
        return None
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        return None
    return url if parts.scheme.lower() in ("http", "https") and parts.hostname else None


def markdown_link(text: object, url: object) -> str:
    """``[text](url)`` when ``url`` is an http(s) URL (``safe_url``), with the URL percent-encoded
    where Markdown would read it (parentheses, brackets, pipes); otherwise ``text`` alone, as
    plain escaped Markdown text."""
    shown = markdown_text(text)
    good = safe_url(url)
    if good is None:
        return shown
    from urllib.parse import quote

    return f"[{shown}]({quote(good, safe=_URL_SAFE)})"


# ---- XML, HTML ------------------------------------------------------------------------------------
def xml_text(text: object) -> str:
    """``text`` safe as XML 1.0 character data or an attribute value: characters XML does not
    allow, and the ones ``terminal`` shows, replaced by their escape; tabs, newlines and
    carriage returns kept. (Markup characters are the serialiser's job: ElementTree escapes them.)"""
    s = "" if text is None else str(text)
    if not _TERMINAL.search(s):
        return s
    return _TERMINAL.sub(lambda m: m.group() if m.group() in "\t\n\r" else _shown(m), s)


def html_inline(text: object) -> str:
    """``text`` inside raw HTML on one line (a ``<summary>`` in Markdown, where Markdown's own
    escapes do not apply): ``html_text`` with newlines folded into a space, so it can neither
    close the HTML block nor add a line."""
    return html_text(_NEWLINES.sub(" ", "" if text is None else str(text)))


def html_text(text: object) -> str:
    """``text`` for HTML text or a quoted attribute value: ``terminal``'s replacements (newlines
    and tabs kept), then ``<``, ``>``, ``&`` and both quotes escaped."""
    import html

    return html.escape(terminal(text, block=True), quote=True)


def read_tail(path: Path, limit: int) -> tuple[str, bool]:
    """The last ``limit`` bytes of the file ``path`` as text, and whether there was more before them
    (``("", False)`` when it cannot be read)."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - limit))
            data = fh.read()
    except OSError:
        return "", False
    return data.decode("utf-8", "replace"), size > limit

"""Checks on rendered output that came from hostile data: what a terminal would interpret, what a
Markdown renderer would turn into structure, what an HTML page would run, what XML would refuse.

Shared by the output-injection tests and the GitHub payload fuzz tests, so both hold every
renderer to the same invariants. Markdown is rendered with markdown-it-py (CommonMark plus GFM
tables and strikethrough, raw HTML on: what GitHub's renderer sees before its own sanitiser).
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

# What must never reach an output raw: C0 controls (but tab and newline), DEL, C1 controls, the
# bidi marks, embeddings, overrides and isolates, line/paragraph separators, lone surrogates.
RAW_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")
# The colours patchset itself paints (patchset.commands.table._SGR): CSI digits and ';' then 'm'.
OUR_SGR = re.compile(r"\x1b\[[0-9;]*m")


def raw_unsafe(text: str, *, newlines: bool = True) -> list[str]:
    """The unsafe characters found in ``text`` (``newlines=False``: a carriage return counts too,
    and so does a newline inside what should be one line)."""
    found = RAW_UNSAFE.findall(text)
    if not newlines:
        found += re.findall("[\n\t]", text)
    return found


# What XML 1.0 does not allow, plus what a reader could be fooled by (C1, DEL, bidi): tab, newline
# and carriage return are XML whitespace and may stay.
XML_UNSAFE = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]"
)


def xml_unsafe(text: str) -> list[str]:
    return XML_UNSAFE.findall(text)


def terminal_unsafe(text: str) -> list[str]:
    """What a terminal would interpret in ``text`` besides patchset's own colours."""
    return raw_unsafe(OUR_SGR.sub("", text))


class Page(HTMLParser):
    """Every tag, every attribute, the rows and cells of each table body, and the text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str, str]] = []  # (tag, name, value)
        self.tables: list[list[int]] = []  # per table body: the number of cells of each row
        self.text: list[str] = []
        self._in_body = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs += [(tag, k, v or "") for k, v in attrs]
        if tag == "tbody":
            self._in_body = True
            self.tables.append([])
        elif tag == "tr" and self._in_body:
            self.tables[-1].append(0)
        elif tag == "td" and self._in_body and self.tables[-1]:
            self.tables[-1][-1] += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "tbody":
            self._in_body = False

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def links(self) -> list[str]:
        return [v for tag, k, v in self.attrs if k in ("href", "src", "action", "formaction", "xlink:href")]

    def handlers(self) -> list[str]:
        return [f"{tag} {k}" for tag, k, _ in self.attrs if k.lower().startswith("on")]


def page(html_text: str) -> Page:
    p = Page()
    p.feed(html_text)
    p.close()
    return p


def markdown_html(md: str) -> str:
    """``md`` rendered as GitHub's renderer would before sanitising (raw HTML passed through)."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"]).render(md)


def only_http(links: list[str]) -> list[str]:
    """The links that are not http(s)."""
    return [u for u in links if not re.match(r"https?://", u.strip(), re.I)]


def check_markdown(md: str, *, rows: list[int], cells: int | list[int], allowed_tags: set[str]) -> Page:
    """``md`` carries no raw control or bidi character, renders tables with ``rows`` body rows
    (one entry per table, in order) of ``cells`` cells each (one count for all tables, or one per
    table), no tag outside ``allowed_tags``, no event handler, and only http(s) links."""
    assert not raw_unsafe(md), f"raw control characters in Markdown: {raw_unsafe(md)[:5]}"
    p = page(markdown_html(md))
    assert [len(t) for t in p.tables] == rows, f"table rows changed: {[len(t) for t in p.tables]} != {rows}\n{md}"
    per_table = cells if isinstance(cells, list) else [cells] * len(p.tables)
    assert all(n == want for t, want in zip(p.tables, per_table, strict=True) for n in t), (
        f"cells per row changed: {p.tables}\n{md}"
    )
    assert set(p.tags) <= allowed_tags, f"markup from data: {sorted(set(p.tags) - allowed_tags)}\n{md}"
    assert not p.handlers(), p.handlers()
    assert not only_http(p.links()), f"non-http links: {only_http(p.links())}"
    return p


# Tags patchset's Markdown renders to (tables, lists, emphasis, code, links, the gate's <details>).
MARKDOWN_TAGS = {
    "h1",
    "h2",
    "h3",
    "p",
    "ul",
    "li",
    "blockquote",
    "strong",
    "em",
    "code",
    "pre",
    "a",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "details",
    "summary",
}
# Tags of the static status page (tracker.html's template).
HTML_TAGS = {
    "html",
    "head",
    "meta",
    "title",
    "style",
    "body",
    "h1",
    "p",
    "code",
    "b",
    "div",
    "details",
    "summary",
    "ul",
    "li",
    "span",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "a",
    "script",
    "colgroup",  # the template's column widths, filter menus and wrap points (issue #27)
    "col",
    "label",
    "select",
    "option",
    "wbr",
}


def check_html(doc: str, *, rows: int) -> Page:
    """The status page carries no raw control or bidi character, no tag outside its template,
    one script (its own), no event handler, only http(s) links, and ``rows`` table rows."""
    assert not raw_unsafe(doc), f"raw control characters in HTML: {raw_unsafe(doc)[:5]}"
    p = page(doc)
    assert set(p.tags) <= HTML_TAGS, sorted(set(p.tags) - HTML_TAGS)
    assert p.tags.count("script") == 1
    assert not p.handlers(), p.handlers()
    assert not only_http(p.links()), only_http(p.links())
    assert [len(t) for t in p.tables] == [rows]
    return p


def json_safe(data: Any) -> bool:
    """Whether ``data`` serialises to JSON text without a raw unsafe character."""
    import json

    return not raw_unsafe(json.dumps(data))

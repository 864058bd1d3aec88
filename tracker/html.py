"""The upstream-status dashboard as one static HTML page: no external assets (inline CSS and JS),
every value escaped, sortable by any column.

Only the template is markup: every value goes through ``patchset.text.html_text`` and a link is
made only for an http(s) URL (``safe_url``). Headers sort (``data-sort`` values, so numbers and
dates sort as such), menus filter, and the URL hash (``#sort=-order``, ``#action=follow-up``)
drives the same header clicks and menus, so a link or a headless browser exercises the code a
person does. At 1,280 px the page never scrolls sideways; ids never break.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

from patchset import atomic
from patchset.text import html_text, safe_url
from patchset.tracker.links import commit_url, ref_url
from patchset.tracker.report import StatusReport, StatusRow, age_seconds
from patchset.tracker.views import (
    ACTION_WORDS,
    FOLLOWUP_WORDS,
    LEGEND,
    MODE_WORDS,
    action_cell,
    days_since,
    followups_cell,
    pr_words,
    short_ref,
)

# (key, header, numeric, width): a width in px, "id" (the longest patch id), or "" (share the rest)
COLUMNS: list[tuple[str, str, bool, str]] = [
    ("order", "#", True, "34"),
    ("id", "patch", False, "id"),
    ("state", "upstream", False, "84"),
    ("pr", "pull request", False, ""),
    ("opened", "age", True, "54"),
    ("activity", "last activity", False, "94"),
    ("drift", "drift", False, "92"),
    ("followups", "follow-ups", False, ""),
    ("action", "action", False, ""),
    ("age", "data", True, "96"),
]
ID_CHARS = 48  # patch ids up to this long never break; a longer one (not a real id) may
CODE_PX = 7.3  # the width of one character of the 12 px monospace ids
FILTERS = (("target", "target"), ("action", "action"), ("state", "upstream state"))

_CSS = """
:root { --fg:#1d2330; --muted:#667085; --line:#e4e7ec; --bg:#fff; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
       background: var(--bg); margin: 16px; }
h1 { font-size: 20px; margin: 0 0 4px; }
.meta { color: var(--muted); margin: 0 0 12px; }
.warn { background: #fff7e6; border-left: 4px solid #f5a623; padding: 6px 10px; margin: 6px 0; }
.err { background: #fdecea; border-left: 4px solid #d93025; padding: 6px 10px; margin: 6px 0; }
.chips span { display: inline-block; border: 1px solid var(--line); border-radius: 12px; padding: 1px 10px;
              margin: 0 6px 6px 0; }
.filters { margin: 0 0 10px; } .filters label { margin-right: 14px; }
.legend { color: var(--muted); font-size: 12px; margin: 10px 0 0; }
table { border-collapse: collapse; width: 100%; table-layout: fixed; }
th, td { border-bottom: 1px solid var(--line); padding: 6px 8px; text-align: left; vertical-align: top;
         overflow-wrap: anywhere; word-break: normal; }
th { position: sticky; top: 0; background: #f8f9fb; cursor: pointer; user-select: none; overflow-wrap: normal; }
.id { white-space: nowrap; overflow-wrap: normal; font-family: ui-monospace, SFMono-Regular, Menlo, monospace;
      font-size: 12px; }
.id-long { overflow-wrap: anywhere; white-space: normal; }
code.path { overflow-wrap: break-word; }
.target { color: var(--muted); font-size: 12px; }
tr[hidden] { display: none; }
ul.fu { margin: 0; padding-left: 14px; } ul.fu li { margin: 0; }
.c-reverted { color: #d93025; font-weight: 600; } .c-follow-up-merged { color: #b06000; font-weight: 600; }
.c-follow-up-open { color: #b06000; } .c-mentioned { color: var(--muted); }
th[aria-sort="ascending"]::after { content: " \\25B2"; }
th[aria-sort="descending"]::after { content: " \\25BC"; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.s-merged, td.s-open, td.s-draft, td.s-closed, td.s-unknown, td.s-none { overflow-wrap: normal; }
tr.inactive td { color: var(--muted); }
code { font-size: 12px; }
.s-merged { color: #8e24aa; font-weight: 600; } .s-open { color: #1e8e3e; font-weight: 600; }
.s-draft { color: #00838f; font-weight: 600; } .s-closed { color: #d93025; font-weight: 600; }
.s-unknown { color: #b06000; } .s-none { color: var(--muted); }
.a-drop-at-rebase { color: #8e24aa; font-weight: 600; } .a-refresh { color: #b06000; font-weight: 600; }
.a-upstream { color: #1a73e8; } .a-held { color: #b06000; } .a-nothing { color: #1e8e3e; }
.a-dropped { color: var(--muted); } .a-unknown { color: #d93025; font-weight: 600; }
.a-follow-up { color: #b06000; font-weight: 600; } .a-reverted { color: #d93025; font-weight: 600; }
.d-revised, .d-merged-with-changes, .d-head-moved { color: #b06000; font-weight: 600; }
.d-closed-unmerged { color: #d93025; } .d-unchanged { color: #1e8e3e; }
.rowerr { color: #d93025; display: block; font-size: 12px; }
.small { color: var(--muted); font-size: 12px; display: block; }
"""

_JS = """
(function () {
  var table = document.getElementById('status');
  var body = table.tBodies[0];
  var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);
  function value(row, i, numeric) {
    var v = row.cells[i].getAttribute('data-sort');
    if (v === null) { v = row.cells[i].textContent; }
    if (numeric) { var n = parseFloat(v); return isNaN(n) ? Infinity : n; }
    return v.toLowerCase();
  }
  function sortBy(th, dir) {
    var i = heads.indexOf(th), numeric = th.getAttribute('data-type') === 'num';
    var rows = Array.prototype.slice.call(body.rows).map(function (r, k) { return [r, k]; });
    rows.sort(function (a, b) {
      var x = value(a[0], i, numeric), y = value(b[0], i, numeric);
      var c = x < y ? -1 : (x > y ? 1 : 0);
      if (c === 0) { c = parseInt(a[0].getAttribute('data-pos'), 10) - parseInt(b[0].getAttribute('data-pos'), 10); return c; }
      return dir === 'descending' ? -c : c;
    });
    rows.forEach(function (p) { body.appendChild(p[0]); });
    heads.forEach(function (h) { h.removeAttribute('aria-sort'); });
    th.setAttribute('aria-sort', dir);
    var key = (dir === 'descending' ? '-' : '') + th.getAttribute('data-key');
    document.body.setAttribute('data-sorted', key);
    if (window.history && history.replaceState) {
      var rest = (window.location.hash || '').replace(/^#/, '').split('&').filter(function (p) {
        return p && p.indexOf('sort=') !== 0;
      });
      history.replaceState(null, '', '#' + ['sort=' + key].concat(rest).join('&'));
    }
  }
  heads.forEach(function (th) {
    th.addEventListener('click', function () {
      sortBy(th, th.getAttribute('aria-sort') === 'ascending' ? 'descending' : 'ascending');
    });
  });
  var menus = Array.prototype.slice.call(document.querySelectorAll('select[data-filter]'));
  function applyFilters() {
    var shown = 0;
    Array.prototype.slice.call(body.rows).forEach(function (row) {
      var ok = menus.every(function (m) {
        return !m.value || row.getAttribute('data-' + m.getAttribute('data-filter')) === m.value;
      });
      if (ok) { row.removeAttribute('hidden'); shown += 1; } else { row.setAttribute('hidden', ''); }
    });
    document.body.setAttribute('data-shown', String(shown));
  }
  menus.forEach(function (m) { m.addEventListener('change', applyFilters); });
  function fromHash() {
    var hash = window.location.hash || '';
    menus.forEach(function (m) {
      var f = new RegExp('[#&]' + m.getAttribute('data-filter') + '=([^&]*)').exec(hash);
      var want = f ? decodeURIComponent(f[1]) : '';
      var known = Array.prototype.some.call(m.options, function (o) { return o.value === want; });
      m.value = known ? want : '';
    });
    applyFilters();
    var m = /sort=(-?)([a-z_]+)/.exec(hash);
    if (!m) { return; }
    var th = heads.filter(function (h) { return h.getAttribute('data-key') === m[2]; })[0];
    if (!th) { return; }
    if (document.body.getAttribute('data-sorted') === m[1] + m[2]) { return; }
    th.removeAttribute('aria-sort');
    th.click();
    if (m[1] === '-') { th.click(); }
  }
  window.addEventListener('hashchange', fromHash);
  fromHash();
})();
"""


_e = html_text


def _age(r: StatusRow) -> float:
    age = age_seconds(r.pr, time.time()) if r.pr is not None else None
    return float("inf") if age is None else age


def _link(text: str, url: str | None, cls: str = "id") -> str:
    """``text`` as a link when ``url`` is an http(s) URL (``safe_url``), else as text."""
    good = safe_url(url) if url else None
    inner = f'<span class="{cls}">{_e(text)}</span>' if cls else _e(text)
    return f'<a href="{_e(good)}">{inner}</a>' if good else inner


def _path(path: str) -> str:
    """A path that may wrap after each ``/`` (never inside a name)."""
    return "/<wbr>".join(_e(part) for part in path.split("/"))


def _small(text: str) -> str:
    return f'<span class="small">{_e(text)}</span>' if text else ""


def _pr_cell(r: StatusRow) -> str:
    """The PR (a link), its title, state words, review/CI, its merge commit (a link), and the
    other refs of the patch (links)."""
    if r.pr is None:
        out = _e("—")
    else:
        pr = r.pr
        out = _link(short_ref(pr.ref), pr.url or ref_url(pr.ref, pr.kind))
        out += f" {_e(pr_words(pr))}"
        out += _small(pr.title)
        bits = [b for b in (pr.review and pr.review.lower().replace("_", " "), pr.ci and f"CI {pr.ci.lower()}") if b]
        if r.in_base is not None:
            bits.append(f"in base: {'yes' if r.in_base else 'no'}")
        if r.first_release:
            bits.append(f"first in {r.first_release}")
        out += _small("; ".join(bits))
        if pr.state == "merged" and pr.merge_commit:
            url = commit_url(pr.ref, pr.merge_commit)
            out += f'<span class="small">merge commit {_link(pr.merge_commit[:12], url)}</span>'
        if r.error:
            out += f'<span class="rowerr">{_e(r.error)}</span>'
    for ref in r.refs:
        out += (
            f'<span class="small">{_e(ref.role.rstrip("s"))} '
            f"{_link(short_ref(ref.ref), ref.url or ref_url(ref.ref, ref.kind))} {_e(ref.state)}</span>"
        )
    return out


def _followups_cell(r: StatusRow) -> str:
    if not r.followups:
        return _small(followups_cell(r))  # "not read", "none", or nothing for a patch without a PR
    items = []
    for f in r.followups:
        if "#" in f["ref"]:
            link = _link(short_ref(f["ref"]), f.get("url") or ref_url(f["ref"]))
        else:
            link = "commit " + _link(str(f.get("merge_commit") or "")[:12], commit_url(f["ref"], f.get("merge_commit")))
        word = FOLLOWUP_WORDS.get(f["class"], f["class"])
        tail = " (in the base)" if f.get("in_base") else ""
        title = _small(f.get("title") or "")
        items.append(f'<li class="c-{_e(f["class"])}">{_e(word)} {link}{_e(tail)}{title}</li>')
    return '<ul class="fu">' + "".join(items) + "</ul>"


def _row(r: StatusRow, pos: int) -> str:
    state = r.upstream_state
    word = ACTION_WORDS.get(r.action, r.action)
    text = action_cell(r)[len(word) :].lstrip(": ")
    action = f"<b>{_e(word)}</b>" + _small(text)
    idcls = "id" if len(r.id) <= ID_CHARS else "id id-long"
    pid = f'<span class="{idcls}">{_e(r.id)}</span>'
    if r.state != "active":
        pid += f' <b class="small">{_e(r.state)}</b>'
    pid += f'<span class="small target">{_e(r.target)} · {_e(r.origin)}</span>'
    pid += _small(r.title)  # each of these is nothing when empty
    pid += "".join(f'<span class="small"><code class="path">{_path(f)}</code></span>' for f in r.files)
    pid += "".join(_small(n) for n in r.notes)
    age = _age(r)
    pr = r.pr
    opened = days_since(pr.created_at) if pr is not None else None
    last = (pr.merged_at if pr.state == "merged" and pr.merged_at else pr.updated_at) if pr is not None else None
    cells = [
        f'<td class="num" data-sort="{_e(r.order or 9999)}">{_e(r.order or "")}</td>',
        f'<td data-sort="{_e(r.id)}">{pid}</td>',
        f'<td class="s-{_e(state)}" data-sort="{_e(state)}">{_e(state)}</td>',
        f'<td data-sort="{_e(r.pr.ref if r.pr else "~")}">{_pr_cell(r)}</td>',
        f'<td class="num" data-sort="{"" if opened is None else opened}">'
        f"{_e(f'{opened} d') if opened is not None else ''}</td>",
        f'<td data-sort="{_e(last or "")}">{_e(last[:10]) if last else ""}</td>',
        f'<td class="d-{_e(r.drift)}" data-sort="{_e(r.drift)}">{_e(r.drift)}</td>',
        f'<td data-sort="{len(r.followups)}">{_followups_cell(r)}</td>',
        f'<td class="a-{_e(r.action)}" data-sort="{_e(r.action)}">{action}</td>',
        f'<td data-sort="{"" if age == float("inf") else round(age)}">{_e(r.data)}</td>',
    ]
    cls = ' class="inactive"' if r.state != "active" else ""
    attrs = f'data-target="{_e(r.target)}" data-action="{_e(r.action)}" data-state="{_e(state)}"'
    return f'<tr{cls} data-id="{_e(r.id)}" data-pos="{pos}" {attrs}>' + "".join(cells) + "</tr>"


def _filters(report: StatusReport) -> str:
    values = {
        "target": sorted({r.target for r in report.rows}),
        "action": sorted({r.action for r in report.rows}),
        "state": sorted({r.upstream_state for r in report.rows}),
    }
    out = []
    for key, label in FILTERS:
        opts = '<option value="">all</option>' + "".join(
            f'<option value="{_e(v)}">{_e(ACTION_WORDS.get(v, v) if key == "action" else v)}</option>'
            for v in values[key]
        )
        out.append(f'<label>{_e(label)} <select data-filter="{key}">{opts}</select></label>')
    return '<div class="filters">' + "".join(out) + "</div>"


def to_html(report: StatusReport) -> str:
    """The whole page as one string."""
    title = "Upstream status" + (f": {report.title}" if report.title else "")
    heads = "".join(
        f'<th data-key="{k}"{" data-type=" + chr(34) + "num" + chr(34) if num else ""} scope="col">{_e(h)}</th>'
        for k, h, num, _w in COLUMNS
    )
    longest = min(ID_CHARS, max((len(r.id) for r in report.rows), default=10))
    cols = "".join(
        f'<col style="width: {round(longest * CODE_PX + 18)}px">'
        if w == "id"
        else (f'<col style="width: {w}px">' if w else "<col>")
        for _k, _h, _n, w in COLUMNS
    )
    rows = "\n".join(_row(r, i) for i, r in enumerate(report.rows))
    chips = "".join(
        f"<span>{n} {_e(ACTION_WORDS.get(a, a))}</span>" for a, n in sorted(report.counts("action").items())
    )
    warns = "".join(f'<div class="warn">{_e(w)}</div>' for w in report.warnings)
    warns += "".join(f'<div class="warn">interrupted: {_e(i.message)}</div>' for i in report.interrupted)
    errors = report.errors()
    errs = ""
    if errors:
        kinds = Counter(e.split(": ")[2] if e.count(": ") >= 2 else "error" for e in errors)
        summary = ", ".join(f"{k} ({n})" for k, n in sorted(kinds.items()))
        errs = (
            f'<details class="err"><summary>{len(errors)} upstream read(s) failed: {_e(summary)}; '
            f"those rows show the last recorded state</summary><ul>"
            + "".join(f"<li>{_e(e)}</li>" for e in errors)
            + "</ul></details>"
        )
    meta = (
        f"ledger <code>{_e(report.ledger)}</code> · mode <b>{_e(report.mode)}</b> "
        f"({_e(MODE_WORDS.get(report.mode, ''))}) · generated {_e(report.generated_at)} · data: {_e(report.oldest())}"
    )
    legend = "".join(f"<div><b>{_e(w)}</b>: {_e(m)}</div>" for w, m in LEGEND)
    data = _e(json.dumps({"rows": len(report.rows), "mode": report.mode}))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)}</title>
<style>{_CSS}</style></head>
<body data-report="{data}">
<h1>{_e(title)}</h1>
<p class="meta">{meta}</p>
{warns}{errs}
<div class="chips">{chips}</div>
{_filters(report)}
<table id="status"><colgroup>{cols}</colgroup><thead><tr>{heads}</tr></thead>
<tbody>
{rows}
</tbody></table>
<div class="legend">{legend}</div>
<script>{_JS}</script>
</body></html>
"""


def write_html(report: StatusReport, path: Path) -> Path:
    """Write the page atomically; returns the path."""
    atomic.write_text(Path(path), to_html(report))
    return Path(path)

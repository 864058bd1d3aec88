"""Metadata in patch headers: git format-patch mails, DEP-3 fields and Yocto ``Upstream-Status``.

``import`` reads these to fill a new ledger entry (title, authors, origin, upstream refs); the
header bytes themselves stay in the body file untouched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_DIFF_START = re.compile(rb"^(diff --git |--- |Index: )", re.M)
_GH_PR = re.compile(r"github\.com/([\w.-]+/[\w.-]+)/pull/(\d+)")
_GH_ISSUE = re.compile(r"github\.com/([\w.-]+/[\w.-]+)/issues/(\d+)")
# a commit named by URL on any forge: GitHub/Gitea ``/commit/SHA``, GitLab ``/-/commit/SHA``,
# cgit ``commit/?id=SHA``, gitweb ``a=commit;h=SHA``
_COMMIT_URL = re.compile(r"https?://\S*?(?:/commits?/|[?;&](?:id|h)=)([0-9a-f]{7,40})\b")
_SUBJECT_PREFIX = re.compile(r"^\[[^\]]*PATCH[^\]]*\]\s*", re.I)
_FIELD = re.compile(r"^([A-Za-z][A-Za-z0-9-]*):[ \t]*(.*)$")

DEP3_FIELDS = {
    "description",
    "subject",
    "origin",
    "bug",
    "forwarded",
    "author",
    "from",
    "reviewed-by",
    "acked-by",
    "last-update",
    "applied-upstream",
    "upstream-status",
    "signed-off-by",
    "date",
    "patch-id",
    "upstream-pr",
}
# DEP-3 fields kept verbatim in the ledger (``[patch.dep3]``): what the header says about where the
# patch comes from and where it went, which no other ledger key holds. ``Bug-<Vendor>`` fields too.
KEPT_FIELDS = ("origin", "forwarded", "last-update", "applied-upstream", "reviewed-by", "acked-by", "upstream-status")


def _is_field(name: str) -> bool:
    return name in DEP3_FIELDS or name.startswith("bug")


@dataclass
class PatchMeta:
    """What a patch's header says about it."""

    title: str = ""
    description: str = ""
    authors: list[str] = field(default_factory=list)
    origin: str = ""
    upstream_status: str = ""
    prs: list[str] = field(default_factory=list)
    issues: list[str] = field(default_factory=list)
    commits: list[str] = field(default_factory=list)
    dep3: dict[str, str] = field(default_factory=dict)  # kept fields, as written: {"Bug-Debian": "https://..."}
    is_mail: bool = False


# the separator line of an mbox: git format-patch's ``From <sha> Mon Sep 17 00:00:00 2001``, or
# a classic From_ line (``From user@host Thu Jan  1 00:00:00 1970``)
_FROM_LINE = re.compile(
    rb"^From (?:[0-9a-f]{40} |\S+ +(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) "
    rb"+\d+ \d+:\d+:\d+ \d{4})",
    re.M,
)


def is_mbox_start(head: bytes) -> bool:
    """Does a file starting with ``head`` start with an mbox From_ line?"""
    return bool(_FROM_LINE.match(head))


def split_mbox(body: bytes) -> list[bytes]:
    """The mails of an mbox (``git format-patch --stdout``, ``git am``'s input), each with its own
    From_ line, as ``git mailsplit`` cuts them; ``[body]`` when it is one mail or no mbox."""
    starts = [m.start() for m in _FROM_LINE.finditer(body)] if _FROM_LINE.match(body) else []
    if len(starts) < 2:
        return [body]
    return [body[a:b] for a, b in zip(starts, [*starts[1:], len(body)], strict=True)]


def mail_file_name(n: int, subject: str) -> str:
    """``0001-fix-the-thing.patch``: the name ``git format-patch`` gives mail ``n`` of a series."""
    slug = re.sub(r"[^A-Za-z0-9._]+", "-", _SUBJECT_PREFIX.sub("", subject)).strip("-.")
    slug = re.sub(r"\.+", ".", slug)[:52].rstrip("-.") or "patch"
    return f"{n:04d}-{slug}.patch"


def split_header(body: bytes) -> tuple[bytes, bytes]:
    """Split a body into (header, diff) at the first diff line."""
    m = _DIFF_START.search(body)
    if not m:
        return body, b""
    return body[: m.start()], body[m.start() :]


def _decode(value: str) -> str:
    if "=?" not in value:  # no RFC 2047 encoded word: nothing to decode (and no email import)
        return value
    import email.header

    try:
        return str(email.header.make_header(email.header.decode_header(value)))
    except Exception:
        return value


def _author_name(value: str) -> str:
    value = _decode(value).strip()
    m = re.match(r'^"?([^"<]*?)"?\s*<[^>]*>$', value)
    return (m.group(1) if m else value).strip()


def _origin_from(status: str, dep3_origin: str) -> str:
    s = status.lower()
    o = dep3_origin.lower()
    if s.startswith("backport") or o.startswith(("upstream", "backport")):
        return "upstream"
    if _COMMIT_URL.search(dep3_origin) and not o.startswith(("other", "vendor")):
        return "upstream"  # "Origin: https://…/commit/SHA": an upstream commit, taken as is
    if o.startswith(("other", "vendor")) or s.startswith(
        ("pending", "submitted", "inappropriate", "denied", "inactive-upstream")
    ):
        return "ours"
    return ""


def parse_meta(body: bytes) -> PatchMeta:
    """Read title, description, authors, origin and upstream refs from a patch header."""
    header, _ = split_header(body)
    lines = header.decode("utf-8", errors="replace").splitlines()
    meta = PatchMeta()
    fields: dict[str, list[str]] = {}
    free: list[str] = []
    i = 0
    if lines and lines[0].startswith("From ") and re.match(r"^From [0-9a-f]{40} ", lines[0]):
        meta.is_mail = True
        i = 1
    in_headers = True
    last: str | None = None
    names: dict[str, str] = {}  # lower-case field -> the spelling the header uses
    after_message = False
    while i < len(lines):
        line = lines[i]
        i += 1
        if meta.is_mail and in_headers:
            if not line.strip():
                in_headers = False
                continue
            if line[:1] in " \t" and last:
                fields[last][-1] += " " + line.strip()
                continue
        m = _FIELD.match(line)
        if m and (_is_field(m.group(1).lower()) or (in_headers and m.group(1).lower() in {"subject", "from", "date"})):
            last = m.group(1).lower()
            fields.setdefault(last, []).append(m.group(2).strip())
            names.setdefault(last, m.group(1))
            continue
        if line.strip() == "---":  # the message ends here (a diffstat follows; DEP-3 fields may still come)
            after_message = True
            continue
        if not after_message and ((meta.is_mail and not in_headers) or (not m and line.strip())):
            free.append(line)
    subject = _decode(fields.get("subject", [""])[0])
    desc_field = fields.get("description", [""])[0]
    body_text = "\n".join(free).strip()
    first_line = next((ln.strip() for ln in free if ln.strip()), "")
    meta.title = _SUBJECT_PREFIX.sub("", subject).strip() or desc_field.strip() or first_line
    meta.description = body_text
    authors = (_author_name(v) for key in ("from", "author") for v in fields.get(key, []))
    meta.authors = list(dict.fromkeys(name for name in authors if name))
    meta.upstream_status = fields.get("upstream-status", [""])[0]
    meta.origin = _origin_from(meta.upstream_status, fields.get("origin", [""])[0])
    blob = "\n".join(v for vs in fields.values() for v in vs) + "\n" + body_text
    prs = [f"{repo}#{num}" for repo, num in _GH_PR.findall(blob)]
    prs += [v for v in fields.get("upstream-pr", []) if re.match(r"^[\w.-]+/[\w.-]+#\d+$", v)]
    meta.prs = list(dict.fromkeys(prs))
    meta.issues = list(dict.fromkeys(f"{repo}#{num}" for repo, num in _GH_ISSUE.findall(blob)))  # an issue is not a PR
    meta.commits = list(dict.fromkeys(_COMMIT_URL.findall(blob)))
    for key, values in fields.items():
        if key in KEPT_FIELDS or key.startswith("bug"):
            meta.dep3[names[key]] = "\n".join(values)
    return meta

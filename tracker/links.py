"""The web pages a dashboard links to: a PR, an issue, a merge commit, on the GitHub the client reads.

Links are built from the ledger's refs (checked ``owner/repo#N``) and a 40-hex sha only, never
from an answer's URL, and point at github.com or at the GitHub Enterprise host of the API.
"""

from __future__ import annotations

import os

from patchset.errors import InputError
from patchset.upstream.refs import PRRef

__all__ = ["commit_url", "ref_url", "web_root"]


def web_root() -> str:
    """The web address of the GitHub the client reads: https://github.com for the public API
    (``api.github.com``), ``https://HOST`` for GitHub Enterprise (``https://HOST/api/v3``)."""
    from urllib.parse import urlsplit

    api = os.environ.get("PATCHSET_GITHUB_API") or os.environ.get("GITHUB_API_URL") or ""
    parts = urlsplit(api)
    if not api or parts.hostname in (None, "api.github.com") or parts.scheme not in ("http", "https"):
        return "https://github.com"
    return f"{parts.scheme}://{parts.netloc}"


def ref_url(ref: str, kind: str = "pr") -> str | None:
    """The web page of ``owner/repo#N``: ``…/pull/N`` (``kind`` "issue": ``…/issues/N``)."""
    try:
        r = PRRef.parse(ref, {}, kind)
    except InputError:
        return None
    return f"{web_root()}/{r.repo}/{'issues' if kind == 'issue' else 'pull'}/{r.number}"


def commit_url(ref: str, sha: str | None) -> str | None:
    """The web page of a merge commit of the repository of ``ref`` (a 40-hex ``sha`` only)."""
    import re as _re

    if not sha or not _re.fullmatch(r"[0-9a-f]{40}", sha):
        return None
    repo = ref.partition("#")[0].partition("@")[0]
    try:
        PRRef(repo, 1)
    except InputError:
        return None
    return f"{web_root()}/{repo}/commit/{sha}"

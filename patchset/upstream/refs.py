"""The tracker's records: which upstream item (PRRef), what GitHub says about it (PRState),
and why a row could not be filled (RowError).

Kept apart from the client so the ledger and the status views can use them without importing
PyGithub. Every record has ``to_json()`` returning a JSON-ready dict.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import urlsplit

from patchset.errors import EnvironmentFailure, InputError
from patchset.text import Word

# Short names people write in the ledger ("vllm#57632"); facts from the production ledger.
DEFAULT_ALIASES: dict[str, str] = {
    "vllm": "vllm-project/vllm",
    "flashinfer": "flashinfer-ai/flashinfer",
    "nccl": "NVIDIA/nccl",
}

KINDS = ("pr", "issue")
_SCP = re.compile(r"^[\w.-]+@(?P<host>[\w.-]+):")  # git@github.com:owner/repo.git


def pull_hosts(upstream: str = "", github: str = "") -> frozenset[str]:
    """The hosts a pull URL of a target may be on: its ``upstream``'s (a URL, or ``git@HOST:``) and,
    when it names a ``github`` repository or its upstream is no URL, the GitHub the client reads
    (``$PATCHSET_GITHUB_API``'s host, github.com by default). A URL on another host names someone
    else's change, never the target's PR of that number."""
    up = upstream.strip()
    try:
        host = urlsplit(up).hostname if "://" in up else (m["host"] if (m := _SCP.match(up)) else None)
    except ValueError:
        host = None
    hosts = {host.lower().removeprefix("www.")} if host else set()
    if github or not hosts:
        api = urlsplit(os.environ.get("PATCHSET_GITHUB_API") or os.environ.get("GITHUB_API_URL") or "")
        ours = api.hostname and api.hostname != "api.github.com" and api.scheme in ("http", "https")
        hosts.add(api.hostname.lower() if ours and api.hostname else "github.com")
    return frozenset(hosts)


def url_host(url: str) -> str:
    """The host of ``url``, lower case, without ``www.`` ("" when there is none)."""
    try:
        return (urlsplit(url).hostname or "").lower().removeprefix("www.")
    except ValueError:
        return ""


_REPO = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$")
_URL = re.compile(r"^https?://[^/]+/(?P<repo>[^/]+/[^/]+)/(?P<what>pull|pulls|issues)/(?P<n>\d+)(?:[/#?].*)?$")
_SHORT = re.compile(r"^(?P<repo>[^#\s]+)#(?P<n>\d+)$")


@dataclass(frozen=True, order=True)
class PRRef:
    """One upstream pull request or issue: ``PRRef("vllm-project/vllm", 57632)``."""

    repo: str
    number: int
    kind: str = "pr"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise InputError(f"ref kind must be one of {KINDS}, got {self.kind!r}")
        if not isinstance(self.number, int) or isinstance(self.number, bool) or self.number <= 0:
            raise InputError(f"{self.repo}: PR/issue number must be a positive integer, got {self.number!r}")
        if not _REPO.match(self.repo):
            raise InputError(f"repository must be OWNER/NAME, got {self.repo!r}")

    @classmethod
    def parse(cls, text: str, aliases: Mapping[str, str] | None = None, kind: str | None = None) -> PRRef:
        """Parse ``owner/repo#N``, ``alias#N`` (``vllm#57632``) or a GitHub pull/issue URL.

        ``kind`` forces "pr" or "issue"; otherwise a URL decides and the short forms mean "pr".
        """
        text = (text or "").strip()
        names = DEFAULT_ALIASES if aliases is None else aliases
        m = _URL.match(text)
        if m:
            found = "issue" if m.group("what") == "issues" else "pr"
            return cls(m.group("repo"), int(m.group("n")), kind or found)
        m = _SHORT.match(text)
        if not m:
            raise InputError(
                f"cannot read {text!r} as a pull request or issue reference",
                hint="write OWNER/REPO#NUMBER (vllm-project/vllm#57632) or ALIAS#NUMBER (vllm#57632)",
            )
        repo = m.group("repo")
        if "/" not in repo:
            if repo not in names:
                known = ", ".join(sorted(names)) or "none"
                raise InputError(
                    f"unknown repository alias {repo!r} in {text!r}",
                    hint=f"known aliases: {known}; or write the full OWNER/REPO#NUMBER",
                )
            repo = names[repo]
        return cls(repo, int(m.group("n")), kind or "pr")

    @property
    def owner(self) -> str:
        return self.repo.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.repo.split("/", 1)[1]

    @property
    def alias(self) -> str:
        """The GraphQL alias for this ref inside its repository's query."""
        return f"{self.kind}{self.number}"

    def __str__(self) -> str:
        return f"{self.repo}#{self.number}"

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PRRef:
        return cls(str(d["repo"]), int(d["number"]), str(d.get("kind", "pr")))


class ReviewDecision(Word):
    """GitHub's ``reviewDecision`` of a pull request."""

    APPROVED = "APPROVED"
    CHANGES_REQUESTED = "CHANGES_REQUESTED"
    REVIEW_REQUIRED = "REVIEW_REQUIRED"


class CheckState(Word):
    """GitHub's ``statusCheckRollup.state`` of a head commit."""

    EXPECTED = "EXPECTED"
    ERROR = "ERROR"
    FAILURE = "FAILURE"
    PENDING = "PENDING"
    SUCCESS = "SUCCESS"


@dataclass
class PRState:
    """What GitHub says about one ref. ``state`` is "open", "closed" or "merged".

    ``source`` is "network" (fetched now) or "cache" (served from the on-disk cache, ``age_s``
    seconds after it was fetched: within ``max_age``, or offline).
    """

    ref: PRRef
    title: str
    author: str | None
    state: str
    draft: bool = False
    merged: bool = False
    merged_at: str | None = None
    merge_commit: str | None = None
    head_sha: str | None = None
    updated_at: str | None = None
    closed_at: str | None = None
    review_decision: ReviewDecision | None = None
    ci: CheckState | None = None  # statusCheckRollup.state of the head
    url: str | None = None
    is_pull: bool = True
    state_reason: str | None = None  # issues: COMPLETED, NOT_PLANNED, REOPENED or a word GitHub adds later
    created_at: str | None = None
    # later upstream work naming it (``tracker.followups.FollowUp.to_json()``, checked where it is
    # used); None: not asked (no token: the REST path reads no timeline)
    followups: list[dict[str, Any]] | None = None
    followup_notes: list[str] = field(default_factory=list)  # timeline items left out, and why
    source: str = "network"
    fetched_at: float = field(default_factory=time.time)
    age_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["ref"] = self.ref.to_json()
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PRState:
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        kw["ref"] = PRRef.from_json(d["ref"])
        return cls(**kw)


# RowError kinds
AUTH = "auth"
RATE_LIMIT = "rate_limit"
NOT_FOUND = "not_found"
FORBIDDEN = "forbidden"
SERVER = "server"
TIMEOUT = "timeout"
NETWORK = "network"
NO_NETWORK = "no_network"  # the host cannot be reached at all (DNS, refused): said once per command
MALFORMED = "malformed"
OFFLINE = "offline"
HTTP = "http"
GRAPHQL = "graphql"


@dataclass
class RowError:
    """Why a row has no state. ``kind`` is one of: auth, rate_limit (``reset_at`` = epoch seconds
    when the limit resets), not_found, forbidden, server, timeout, network, no_network (the host
    could not be reached at all: ``message`` is "HOST: why"), malformed, offline, http, graphql.
    ``status`` is the HTTP status when there was one."""

    kind: str
    message: str
    reset_at: float | None = None
    status: int | None = None

    def __str__(self) -> str:
        text = f"{'no network' if self.kind == NO_NETWORK else self.kind}: {self.message}"
        if self.reset_at:
            text += f" (resets at {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(self.reset_at))})"
        return text

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "error": self.kind,
            "message": self.message,
            "status": self.status,
            "reset_at": self.reset_at,
        }
        if self.reset_at:
            out["reset_at_iso"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.reset_at))
        return out


class FetchError(EnvironmentFailure):
    """A diff or file could not be fetched; ``row`` says why (same kinds as a status row)."""

    def __init__(self, row: RowError, what: str) -> None:
        hint = {
            AUTH: "set GITHUB_TOKEN (or run `gh auth login`) with a token GitHub accepts",
            RATE_LIMIT: "wait for the reset, or use a token (5000 requests/hour instead of 60)",
            OFFLINE: "run once with network access to fill the cache",
            NO_NETWORK: "check the network (or the proxy), then run the command again",
        }.get(row.kind)
        super().__init__(f"{what}: {row}", hint=hint)
        self.row = row

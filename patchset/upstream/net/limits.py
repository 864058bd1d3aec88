"""The limits of patchset's HTTP requests, read from the environment, and the errors that name them.

A request stopped by a limit raises ``DeadlineExceeded`` or ``TooLarge`` (both ``NetLimit``: exit
2) whose message names what was fetched, the host (``host_of``: without credentials), the limit
and the ``PATCHSET_NET_*`` variable that raises it; a bad value fails only the commands that use
the network. The variables and their defaults are in docs/security.md; their syntax is
``patchset.envlimits``'.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple
from urllib.parse import urlsplit

from patchset import envlimits
from patchset.errors import EnvironmentFailure

__all__ = [
    "API",
    "BODY",
    "DOWNLOAD",
    "JSON",
    "DeadlineExceeded",
    "Limits",
    "NetLimit",
    "TooLarge",
    "hint",
    "host_of",
    "limits",
    "printable",
]

ENV_CONNECT = "PATCHSET_NET_CONNECT_TIMEOUT"
ENV_READ = "PATCHSET_NET_READ_TIMEOUT"
ENV_REQUEST = "PATCHSET_NET_REQUEST_DEADLINE"
ENV_DOWNLOAD = "PATCHSET_NET_DOWNLOAD_DEADLINE"
ENV_COMMAND = "PATCHSET_NET_COMMAND_DEADLINE"
ENV_MAX_JSON = "PATCHSET_NET_MAX_JSON"
ENV_MAX_BODY = "PATCHSET_NET_MAX_BODY"

API = "api"  # a request whose whole answer is small: GitHub's REST and GraphQL, an index listing
DOWNLOAD = "download"  # a release file streamed to disk

JSON = "json"  # caps: what an answer may weigh in memory
BODY = "body"

_SECONDS = {
    ENV_CONNECT: 10.0,
    ENV_READ: 30.0,
    ENV_REQUEST: 120.0,
    ENV_DOWNLOAD: 3600.0,
    ENV_COMMAND: 7200.0,
}
_BYTES = {ENV_MAX_JSON: 64 << 20, ENV_MAX_BODY: 512 << 20}


class Limits(NamedTuple):
    """The limits in force, from the environment (``limits()``)."""

    connect: float
    read: float
    request: float
    download: float
    command: float
    max_json: int
    max_body: int


def limits(env: Mapping[str, str] | None = None) -> Limits:
    """The limits from ``env`` (default: the process environment), checked."""
    return Limits(
        connect=envlimits.seconds(ENV_CONNECT, _SECONDS[ENV_CONNECT], env),
        read=envlimits.seconds(ENV_READ, _SECONDS[ENV_READ], env),
        request=envlimits.seconds(ENV_REQUEST, _SECONDS[ENV_REQUEST], env),
        download=envlimits.seconds(ENV_DOWNLOAD, _SECONDS[ENV_DOWNLOAD], env),
        command=envlimits.seconds(ENV_COMMAND, _SECONDS[ENV_COMMAND], env),
        max_json=envlimits.size(ENV_MAX_JSON, _BYTES[ENV_MAX_JSON], env),
        max_body=envlimits.size(ENV_MAX_BODY, _BYTES[ENV_MAX_BODY], env),
    )


class NetLimit(EnvironmentFailure):
    """A request was stopped by one of this module's limits (exit 2)."""

    def __init__(self, message: str, *, hint: str | None = None, host: str = "", variable: str = "") -> None:
        super().__init__(message, hint=hint)
        self.host = host
        self.variable = variable


class DeadlineExceeded(NetLimit):
    """A request did not finish within its deadline, or its command's budget is spent."""


class TooLarge(NetLimit):
    """An answer is larger than patchset keeps in memory."""


def hint(variable: str) -> str:
    if variable not in _SECONDS:  # a caller's own option
        return f"the server answers too slowly: give {variable} more seconds"
    return (
        f"the server answers too slowly (or the link is slow): set {variable}=SECONDS "
        f"(default {_SECONDS[variable]:g}) to give it longer"
    )


def printable(text: str, limit: int = 200) -> str:
    """``text`` without control characters (it may come from an index answer or a ledger)."""
    out = "".join(ch if ch.isprintable() else "?" for ch in text)
    return out if len(out) <= limit else out[: limit - 1] + "…"


def host_of(url: str) -> str:
    """The ``host[:port]`` of ``url`` for a message: without the user and password an index URL
    may carry (``https://user:token@mirror/simple``)."""
    try:
        return printable(urlsplit(url).netloc.rpartition("@")[2] or url)
    except ValueError:
        return printable(url)

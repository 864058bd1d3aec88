"""The PR states the client recorded in its cache, so a second look costs no request.

GraphQL has no conditional requests: a state read that way is recorded per repository (state key
-> ``PRState.to_json()``) in the client's ``HttpCache`` and served from there while younger than
the client's ``max_age`` (always, offline). The record on disk is as untrusted as an answer: it
is read unchecked as a whole and each entry is checked when a ref asks for it
(``payloads.recorded_state``), so one bad entry marks one row.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from patchset.tracker.github.httpcache import HttpCache
from patchset.tracker.github.payloads import Unreadable, recorded_state
from patchset.upstream.refs import MALFORMED, PRRef, PRState, RowError

__all__ = ["StateRecords", "state_key"]


def state_key(ref: PRRef) -> str:
    return f"{ref.kind}:{ref.number}"


class StateRecords:
    """The recorded states of the API at ``base_url``, one cache entry per repository."""

    def __init__(self, cache: HttpCache, base_url: str) -> None:
        self.cache = cache
        self.base_url = base_url

    def _name(self, repo: str) -> str:
        return f"states:{self.base_url}:{repo.lower()}"

    def load(self, repo: str) -> dict[str, Any] | RowError:
        """The states recorded for ``repo`` (state key -> ``PRState.to_json()``), unchecked: each
        entry is checked when a ref asks for it (``recorded``), so one bad entry marks one row. A
        record that is not a JSON object is a ``RowError`` for every ref."""
        entry = self.cache.get("STATE", self._name(repo))
        if entry is None:
            return {}
        import json

        try:
            raw = json.loads(entry.body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            raw = None
        if not isinstance(raw, dict):
            return RowError(MALFORMED, f"unreadable recorded state: the record of {repo} is not a JSON object")
        return raw

    def save(self, repo: str, record: Mapping[str, Any]) -> None:
        import json

        body = json.dumps(dict(record), sort_keys=True).encode("utf-8")
        self.cache.put("STATE", self._name(repo), "", b"", 200, {}, body)

    @staticmethod
    def recorded(ref: PRRef, record: Mapping[str, Any]) -> PRState | RowError | None:
        """The recorded state of ``ref``, checked; a ``RowError`` naming the field when it is
        unreadable; None when nothing is recorded."""
        key = state_key(ref)
        if key not in record:
            return None
        try:
            return recorded_state(ref, record[key])
        except Unreadable as bad:
            return bad.row("recorded state")

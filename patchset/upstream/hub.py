"""What the core asks of a GitHub client, as a protocol: the core never imports the tracker.

``patchset.commands.fetch`` downloads pinned bodies through whatever object the caller hands it:
the CLI passes a way to build the tracker's real client (``patchset.tracker.github.GitHubClient``,
PyGithub underneath); tests pass one pointed at the local GitHub-shaped server. A failed download
raises ``patchset.upstream.refs.FetchError``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from patchset.upstream.refs import PRRef, PRState, RowError


class DiffDetail(Protocol):
    """A downloaded pull-request diff: its bytes and how it was obtained (``diff``, ``files``, ``commits``)."""

    data: bytes
    source: str


class GitHubReader(Protocol):
    """The reads ``fetch`` needs: pull-request states, a PR's diff, a commit's diff, a file at a ref."""

    #: Whether requests carry a token (unauthenticated ones get 60 per hour).
    authenticated: bool

    def pull_states(
        self, refs: Iterable[PRRef], *, max_age: float | None = None
    ) -> dict[PRRef, PRState | RowError]: ...

    def pr_diff_detail(self, ref: PRRef) -> DiffDetail: ...

    def commit_diff(self, repo: str, sha: str, *, revalidate: bool = False) -> bytes: ...

    def file_at(self, repo: str, ref: str, path: str, *, revalidate: bool = False) -> bytes: ...


#: Builds a client only when a download needs one (so commands that stay offline never import PyGithub).
Connect = Callable[[], GitHubReader]

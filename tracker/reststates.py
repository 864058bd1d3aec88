"""PR and issue states over REST, for a client without a token.

GitHub's GraphQL API refuses unauthenticated requests, so without a token each ref is read on
its own (``GET /repos/{o}/{r}/pulls/{n}`` or ``…/issues/{n}``), cached and conditional
(``tracker.reads``): a revalidated answer costs nothing, but there is no review decision, CI
rollup or timeline on this path. Each answer is checked field by field (``tracker.payloads``).
"""

from __future__ import annotations

from patchset.tracker.failures import Failure
from patchset.tracker.payloads import Unreadable, issue_from_rest, pull_from_rest
from patchset.tracker.reads import Reads
from patchset.tracker.transport import short
from patchset.upstream.refs import MALFORMED, PRRef, PRState, RowError

__all__ = ["rest_states"]


def rest_states(reads: Reads, refs: list[PRRef]) -> dict[PRRef, PRState | RowError]:
    """The state of each ref, one REST read each; a failed read is that row's error."""
    out: dict[PRRef, PRState | RowError] = {}
    for ref in refs:
        try:
            if ref.kind == "pr":
                out[ref] = pull_from_rest(ref, reads.get(f"/repos/{ref.repo}/pulls/{ref.number}").json())
            else:
                out[ref] = issue_from_rest(ref, reads.get(f"/repos/{ref.repo}/issues/{ref.number}").json())
        except Failure as f:
            out[ref] = f.row
        except Unreadable as bad:
            out[ref] = bad.row()
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            out[ref] = RowError(MALFORMED, f"unexpected REST shape ({short(exc)})")
    return out

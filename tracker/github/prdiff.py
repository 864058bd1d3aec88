"""A pull request's diff, also when GitHub refuses to produce it.

GitHub's diff media type is the exact bytes wanted. For a large PR GitHub answers 406
``too_large`` or 422 ``not_available`` ("taking too long to generate") instead; the diff is
then rebuilt from the PR's per-file patches (``GET …/pulls/{n}/files``, every field checked by
``payloads.file_entry``: a name with a newline would write diff headers of its own), or, when
some file has no patch there, from the PR's non-merge commits as ``git format-patch`` text. A
``PRDiff`` says which way it was obtained. Both fallbacks are bounded: at most 3000 files, 250
commits, and the memory caps of ``patchset.upstream.net`` over all pages or patches together.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from patchset.text import json_fields
from patchset.tracker.github.failures import Failure
from patchset.tracker.github.httpcache import log
from patchset.tracker.github.payloads import Unreadable, file_entry
from patchset.tracker.github.reads import FULL_SHA, Reads
from patchset.tracker.github.transport import DIFF, LOG, PATCH
from patchset.upstream import net
from patchset.upstream.net import ENV_MAX_BODY
from patchset.upstream.refs import HTTP, MALFORMED, OFFLINE, FetchError, PRRef, RowError

__all__ = ["PR_COMMIT_CAP", "PRDiff", "diff_from_files", "pr_diff_detail"]

PR_COMMIT_CAP = 250  # GitHub lists at most this many commits of a pull request


@dataclass
class PRDiff:
    """A PR's diff and how it was obtained: ``source`` is "diff" (GitHub's diff media type),
    "files" (rebuilt from the per-file patches after a 406 "too large") or "commits" (the PR's
    commits as ``git format-patch`` text, when the file list lacks patches)."""

    ref: PRRef
    data: bytes
    source: str
    cached: bool = False
    age_s: float | None = None
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        import hashlib

        return {
            **json_fields(self, "ref source"),
            "bytes": len(self.data),
            "sha256": hashlib.sha256(self.data).hexdigest(),
            **json_fields(self, "cached age_s note"),
        }


def pr_diff_detail(reads: Reads, ref: PRRef) -> PRDiff:
    """GitHub's diff of the PR, as the exact bytes GitHub sent. When GitHub will not produce
    it (406 ``too_large``, or 422 ``not_available``: "diff is taking too long to generate")
    it is rebuilt from the per-file patches, or, if some file has no patch there, from the
    PR's non-merge commits as format-patch text. Raises ``FetchError``."""
    what = f"diff of {ref}"
    try:
        resp = reads.get(f"/repos/{ref.repo}/pulls/{ref.number}", DIFF, want_json=False)
        return PRDiff(ref, resp.body, "diff", resp.cached, resp.age_s)
    except Failure as f:
        if not (_diff_refused(f) or f.row.kind == OFFLINE):
            raise FetchError(f.row, what) from None
        # offline: a refused diff may have been rebuilt from cached file pages before
        refused = f.row.message
    try:
        files, cached = reads.get_all(f"/repos/{ref.repo}/pulls/{ref.number}/files")
        data, missing = diff_from_files(files)
        if not missing and len(files) < 3000:
            note = f"GitHub refused the whole diff ({refused}); rebuilt from {len(files)} per-file patches"
            log(LOG).info("%s: %s", ref, note)
            return PRDiff(ref, data, "files", cached, None, note)
        reason = (
            f"{len(missing)} file(s) have no patch in the file list ({', '.join(missing[:3])})"
            if missing
            else "the file list stops at 3000 files"
        )
        return _diff_from_commits(reads, ref, f"GitHub refused the whole diff and {reason}")
    except Failure as f:
        raise FetchError(f.row, what) from None


def _diff_refused(f: Failure) -> bool:
    """GitHub would not produce the whole diff: 406 (too large) or 422 ``not_available`` (taking
    too long to generate). Other 422s (no such commit…) are real failures."""
    if f.row.status == 406:
        return True
    return f.row.status == 422 and ("not_available" in f.codes or "too long" in f.row.message.lower())


def _diff_from_commits(reads: Reads, ref: PRRef, why: str) -> PRDiff:
    """The PR's commits as concatenated ``git format-patch`` text. Refuses a PR with more
    commits than GitHub lists (250): the body would silently miss the rest. Skips merge
    commits (more than one parent): their patch is the diff against the first parent, which
    carries whatever upstream changes were merged into the branch, not the PR's change."""
    pull = reads.get(f"/repos/{ref.repo}/pulls/{ref.number}").json()
    total = pull.get("commits") if isinstance(pull, dict) else None
    commits, _ = reads.get_all(f"/repos/{ref.repo}/pulls/{ref.number}/commits")
    if (isinstance(total, int) and total > len(commits)) or len(commits) > PR_COMMIT_CAP:
        raise Failure(
            RowError(
                HTTP,
                f"{why}, and the PR has {total} commits while GitHub lists only the first "
                f"{PR_COMMIT_CAP}: a body from them would be incomplete; fetch the branch with git "
                f"(git fetch <remote> pull/{ref.number}/head) and export it instead",
            )
        )
    parts: list[bytes] = []
    merges: list[str] = []
    held, cap = 0, net.limits().max_body  # the patches together, not only each one
    for c in commits:
        sha = c.get("sha") if isinstance(c, dict) else None
        if not isinstance(sha, str):
            raise Failure(RowError(MALFORMED, "a PR commit without a sha"))
        if not FULL_SHA.match(sha):  # it goes into the next request's path
            raise Failure(Unreadable("sha", sha).row())
        parents = c.get("parents")
        if isinstance(parents, list) and len(parents) > 1:
            merges.append(sha)
            continue
        parts.append(reads.get(f"/repos/{ref.repo}/commits/{sha}", PATCH, immutable=True, want_json=False).body)
        held += len(parts[-1])
        if held > cap:
            raise Failure(
                RowError(
                    MALFORMED,
                    f"{why}, and its commit patches together run past the {cap} bytes patchset keeps in "
                    f"memory ({ENV_MAX_BODY}); refused",
                )
            )
    note = f"{why}; concatenated {len(parts)} commit patches"
    if merges:
        note += f", skipped {len(merges)} merge commit(s) ({', '.join(m[:12] for m in merges[:3])})"
    if not parts:
        raise Failure(RowError(HTTP, f"{why}, and the PR has no commits other than merges"))
    log(LOG).info("%s: %s", ref, note)
    return PRDiff(ref, b"".join(parts), "commits", False, None, note)


def diff_from_files(files: list[Any]) -> tuple[bytes, list[str]]:
    """Rebuild a git-style diff from GitHub's per-file entries. Returns the diff and the names of
    files that carry no patch although they changed (binary, or too large for GitHub to show).

    GitHub's file list has no file modes; new and deleted files are written as mode 100644. Every
    field is checked first (``payloads.file_entry``): a name with a newline would write diff
    headers of its own."""
    parts: list[str] = []
    missing: list[str] = []
    for f in files:
        if not isinstance(f, dict) or not isinstance(f.get("filename"), str):
            raise Failure(RowError(MALFORMED, "a PR file entry without a filename"))
        try:
            new, old, status, patch, changed = file_entry(f)
        except Unreadable as bad:
            raise Failure(bad.row()) from None
        if patch is None and (changed or status in ("added", "removed", "modified", "changed")):
            missing.append(new)
            continue
        head = [f"diff --git a/{old} b/{new}"]
        if status == "added":
            head.append("new file mode 100644")
        elif status == "removed":
            head.append("deleted file mode 100644")
        elif status == "renamed":
            head += [f"rename from {old}", f"rename to {new}"]
        if patch:
            head.append("--- /dev/null" if status == "added" else f"--- a/{old}")
            head.append("+++ /dev/null" if status == "removed" else f"+++ b/{new}")
            head.append(patch if patch.endswith("\n") else patch + "\n")
            parts.append("\n".join(head))
        else:
            parts.append("\n".join(head) + "\n")
    return "".join(parts).encode("utf-8"), missing

"""Signals that decide a patch's fate on a new base: already upstream, superseded, or in conflict.

"Already upstream" is decided from several independent signals, each reported as evidence:

* ``pr-merged``: the patch's PR is recorded merged and its merge commit is in the new base, or a
  commit between the old and the new base names it as ``(#N)`` in its subject;
* ``patch-id``: an upstream commit between the old and new base makes the same change to the
  same files (``git patch-id --stable``, restricted to the patch's files, so a squash merge or a
  release commit that also changed other files still matches);
* ``reverse-apply``: the whole patch reverse-applies, zero fuzz, where it would be replayed;
* ``empty-replay``: the 3-way replay changes nothing.

"Superseded" is a port whose ledger entry names the upstream PR it ports (``upstream.ports``)
when that PR's merge is in the new base (recorded, or a ``(#N)`` commit subject in old..new):
droppable even when the text differs from upstream's.
For a conflict, the upstream commits that changed the conflicting lines since the old base are
found with ``git log -L``.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass

from patchset.engine.hunks import apply_file, reverse_file_patch
from patchset.ledger.model import Patch
from patchset.patchfmt.filepatch import FilePatch, split_lines
from patchset.patchfmt.headers import split_header
from patchset.rebase.replay import BlobStore, Move, Tree
from patchset.text import Word
from patchset.upstream.git import run_git
from patchset.upstream.repo import GitRepo, RenameCandidate, ambiguous, similarity

MAX_PATCH_ID_COMMITS = 400


class Evidence(Word):
    """What a signal tells about a patch."""

    PR_MERGED = "pr-merged"
    PORT_MERGED = "port-merged"
    PATCH_ID = "patch-id"
    REVERSE_APPLY = "reverse-apply"
    EMPTY_REPLAY = "empty-replay"
    NOTE = "note"
    EMPTY_REGENERATION = "empty-regeneration"


@dataclass
class Signal:
    """One piece of evidence about a patch."""

    name: Evidence
    detail: str
    decisive: bool = True

    def to_json(self) -> dict:
        return dict(self.__dict__)


# --------------------------------------------------------------------------- PR merges


def _merge_of(ref: str, patch: Patch, pr_merges: Mapping[str, str]) -> tuple[str | None, str]:
    """The merge commit known for PR ``ref`` and where that knowledge comes from."""
    if ref in pr_merges:
        return pr_merges[ref], "tracker"
    st = patch.status
    if st.merge_commit and st.pr_state == "merged":
        return st.merge_commit, f"ledger status (recorded {st.recorded})" if st.recorded else "ledger status"
    return None, ""


def merge_signals(
    patch: Patch, repo: GitRepo, new: str, label: str, pr_merges: Mapping[str, str], *, ports: bool
) -> list[Signal]:
    """For ``upstream.prs`` (ports=False) or ``upstream.ports`` (ports=True): is the PR in ``new``?"""
    refs = patch.upstream.ports if ports else patch.upstream.prs
    name = Evidence.PORT_MERGED if ports else Evidence.PR_MERGED
    out: list[Signal] = []
    for ref in refs:
        sha, source = _merge_of(ref, patch, pr_merges)
        if sha is None:
            if patch.status.pr_state == "merged" and not ports:
                out.append(
                    Signal(
                        Evidence.NOTE,
                        f"{ref} is recorded merged but no merge commit is recorded: cannot tell "
                        f"whether {label} contains it",
                        decisive=False,
                    )
                )
            continue
        full = repo.rev(sha)
        if full is None:
            out.append(
                Signal(
                    Evidence.NOTE,
                    f"{ref} merged as {sha[:12]} ({source}), but that commit is not in the "
                    "local upstream history: cannot tell",
                    decisive=False,
                )
            )
        elif repo.is_ancestor(full, new):
            what = "ported PR" if ports else "PR"
            out.append(Signal(name, f"{what} {ref} merged as {full[:12]} ({source}), which {label} contains"))
        else:
            out.append(
                Signal(Evidence.NOTE, f"{ref} merged as {full[:12]} ({source}), not yet in {label}", decisive=False)
            )
    return out


# --------------------------------------------------------------------------- PR numbers in commit subjects

_PR_IN_SUBJECT = re.compile(r"\(#(\d+)\)")


def subject_prs(repo: GitRepo, old: str, new: str) -> dict[int, tuple[str, str]]:
    """``{N: (sha, subject)}`` for every commit in ``old..new`` whose subject names a PR as ``(#N)``
    (GitHub's squash-merge subjects: "Fix the scheduler (#31000)"). One ``git log`` call."""
    out: dict[int, tuple[str, str]] = {}
    log = repo.git("log", "--no-merges", "--format=%H%x1f%s", f"{old}..{new}", check=False).stdout
    for line in log.decode("utf-8", "replace").splitlines():
        sha, _, subject = line.partition("\x1f")
        for num in _PR_IN_SUBJECT.findall(subject):
            out.setdefault(int(num), (sha, subject))
    return out


def subject_signals(
    patch: Patch, github: str, commits: Mapping[int, tuple[str, str]], label: str, *, ports: bool
) -> list[Signal]:
    """A PR the patch takes (``upstream.prs``) or ports (``upstream.ports``), referenced as ``(#N)``
    by a commit between the old and the new base: merged upstream, whatever form it took there.
    Only refs of the target's own repository (``github``) or without a repository part count."""
    out: list[Signal] = []
    for ref in patch.upstream.ports if ports else patch.upstream.prs:
        repo_part, _, num = ref.rpartition("#")
        if repo_part and github and repo_part.lower() not in (github.lower(), github.lower().split("/")[-1]):
            continue
        hit = commits.get(int(num)) if num.isdigit() else None
        if hit is None:
            continue
        sha, subject = hit
        what, name = ("ported PR", Evidence.PORT_MERGED) if ports else ("PR", Evidence.PR_MERGED)
        out.append(Signal(name, f"{what} {ref} is upstream commit {sha[:12]} ({subject}), which {label} contains"))
    return out


# --------------------------------------------------------------------------- patch-id


def _patch_ids(data: bytes) -> list[tuple[str, str]]:
    proc = run_git(["patch-id", "--stable"], input=data, check=False)
    out = []
    for line in proc.stdout.decode().splitlines():
        parts = line.split()
        if len(parts) == 2:
            out.append((parts[0], parts[1]))
    return out


def _git_style(diff: bytes) -> bytes:
    """``git patch-id`` only reads diffs with ``diff --git`` lines, and hashes the ``---``/``+++``
    lines and a creation's (deletion's) mode line too: write a plain unified diff as git would
    (``diff -ruN`` stamps its names with dates, and names a created file ``b/...`` on both sides)."""
    lines = split_lines(diff)
    out: list[bytes] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if (
            line.startswith(b"--- ")
            and i + 1 < len(lines)
            and lines[i + 1].startswith(b"+++ ")
            and not (out and out[-1].startswith((b"diff --git ", b"index ", b"new file mode", b"deleted file mode")))
        ):
            a = line[4:].split(b"\t")[0].strip()
            b = lines[i + 1][4:].split(b"\t")[0].strip()
            if a == b"/dev/null":
                out += [b"diff --git " + _side(b, b"a/") + b" " + b + b"\n", b"new file mode 100644\n"]
            elif b == b"/dev/null":
                out += [b"diff --git " + a + b" " + _side(a, b"b/") + b"\n", b"deleted file mode 100644\n"]
            else:
                out.append(b"diff --git " + a + b" " + b + b"\n")
            out += [b"--- " + a + b"\n", b"+++ " + b + b"\n"]
            i += 2
            continue
        out.append(line)
        i += 1
    return b"".join(out)


def _side(name: bytes, prefix: bytes) -> bytes:
    """The other side's name of a created or deleted file: git's ``a/``/``b/`` when it has one."""
    return prefix + name[2:] if name[:2] in (b"a/", b"b/") else name


def _sections(diff: bytes) -> dict[str, bytes]:
    """``{path: that file's diff}`` of a ``git log -p`` commit body (unquoted paths only)."""
    out: dict[str, bytes] = {}
    for sec in (b"\n" + diff).split(b"\ndiff --git ")[1:]:
        header = sec.split(b"\n", 1)[0]
        n = (len(header) - 5) // 2
        if n <= 0 or not header.startswith(b"a/") or header[2 + n : 2 + n + 3] != b" b/":
            continue
        out[header[2 : 2 + n].decode("utf-8", "surrogateescape")] = b"diff --git " + sec.rstrip(b"\n") + b"\n"
    return out


def patch_id_signals(
    repo: GitRepo, old: str, new: str, patches: Mapping[str, tuple[bytes, list[str]]]
) -> dict[str, Signal]:
    """For each patch ``{id: (body, paths)}``: an upstream commit in ``old..new`` whose change to the
    patch's ``paths`` has the patch's patch-id. One ``git log -p`` and one ``git patch-id`` in all."""
    keys = [k for k, (_, paths) in patches.items() if paths]
    if not keys:
        return {}
    every = sorted({p for k in keys for p in patches[k][1]})
    log = repo.git(
        "log",
        "-p",
        "--no-merges",
        "--no-renames",
        "--no-color",
        "--format=%x01%H%x02%s",
        f"-n{MAX_PATCH_ID_COMMITS}",
        f"{old}..{new}",
        "--",
        *every,
        check=False,
    ).stdout
    commits: list[tuple[str, str, dict[str, bytes]]] = []
    for rec in log.split(b"\x01")[1:]:
        head, _, rest = rec.partition(b"\n")
        raw_sha, _, raw_subject = head.partition(b"\x02")
        commits.append((raw_sha.decode(), raw_subject.decode("utf-8", "replace"), _sections(rest)))
    if not commits:
        return {}
    stream: list[bytes] = []
    tags: list[tuple[str, int]] = []  # fake commit id n+1 -> (patch id, commit index or -1 for the patch itself)

    def add(chunk: bytes, tag: tuple[str, int]) -> None:
        tags.append(tag)
        stream.append(b"commit %040x\n" % len(tags) + chunk)

    for k in keys:
        body, paths = patches[k]
        add(_git_style(split_header(body)[1]), (k, -1))
        for ci, (_sha, _subject, secs) in enumerate(commits):
            chunk = b"".join(secs[p] for p in sorted(set(paths)) if p in secs)
            if chunk:
                add(chunk, (k, ci))
    ids: dict[tuple[str, int], str] = {}
    for pid, fake in _patch_ids(b"".join(stream)):
        n = int(fake, 16)
        if 1 <= n <= len(tags):
            ids[tags[n - 1]] = pid
    out: dict[str, Signal] = {}
    for k in keys:
        mine = ids.get((k, -1))
        if not mine:
            continue
        for ci, (sha, subject, _) in enumerate(commits):
            if ids.get((k, ci)) == mine:
                out[k] = Signal(
                    Evidence.PATCH_ID, f"patch-id {mine[:12]} matches upstream commit {sha[:12]} ({subject})"
                )
                break
    return out


# --------------------------------------------------------------------------- reverse apply


def reverse_apply_signal(files: list[FilePatch], new: Tree, moves, label: str) -> Signal | None:
    """Does every file of the patch reverse-apply (zero fuzz) where it would be replayed?"""
    where = []
    for fp in files:
        if fp.binary:
            return None
        rev = reverse_file_patch(fp)
        target = fp.target
        if target is None:
            return None  # a deletion is "already upstream" only if the file is gone: the replay says so
        path = target if new.read(target) is not None or fp.op in ("create", "rename") else moves(target).path
        if path is None:
            return None
        current = new.read(path)
        if current is None:
            return None
        if fp.old_mode and fp.new_mode and fp.old_mode != fp.new_mode and new.mode(path) != fp.new_mode:
            return None  # the text is upstream, the mode the patch sets is not
        out = apply_file(current, rev)
        if not out.ok:
            return None
        where.append(path)
    return Signal(Evidence.REVERSE_APPLY, f"the patch reverse-applies with zero fuzz on {label} ({', '.join(where)})")


# --------------------------------------------------------------------------- conflicts


@dataclass
class Blame:
    """An upstream commit that changed lines a conflicting hunk touches."""

    sha: str
    subject: str

    def to_json(self) -> dict:
        return dict(self.__dict__)


def map_line(src: bytes | None, dst: bytes | None, line: int) -> int:
    """Map a 1-based line of ``src`` to the corresponding line of ``dst``: an unchanged line to itself,
    a changed one to where its region starts in ``dst`` (the line after the unchanged block above
    it), so that a window starting there still covers what replaced it."""
    if src is None or dst is None or src == dst:
        return line
    a, b = split_lines(src), split_lines(dst)
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for i1, j1, n in sm.get_matching_blocks():
        if i1 <= line - 1 < i1 + n:
            return j1 + (line - 1 - i1) + 1
    start = 1
    for i1, j1, n in sm.get_matching_blocks():
        if i1 + n <= line - 1 and n:
            start = j1 + n + 1
    return min(start, max(len(b), 1))


def blame_lines(repo: GitRepo, old: str, new: str, path: str, start: int, end: int) -> list[Blame]:
    """Commits in ``old..new`` that changed lines ``start..end`` of ``path`` (as in ``new``)."""
    if end < start:
        end = start
    proc = repo.git(
        "log", f"-L{start},{end}:{path}", "-s", "--no-color", "--format=%H%x1f%s", f"{old}..{new}", check=False
    )
    if proc.returncode != 0:
        return [Blame(e.sha, e.subject) for e in repo.log_range(old, new, path)]
    out = []
    for line in proc.stdout.decode("utf-8", "replace").splitlines():
        if "\x1f" in line:
            sha, subject = line.split("\x1f", 1)
            out.append(Blame(sha, subject))
    return out


def _name_status(out: bytes) -> list[tuple[str, list[str]]]:
    fields = out.decode("utf-8", "surrogateescape").split("\0")
    rows, i = [], 0
    while i < len(fields) and fields[i]:
        status = fields[i]
        n = 2 if status[:1] in ("R", "C") else 1
        rows.append((status, fields[i + 1 : i + 1 + n]))
        i += 1 + n
    return rows


def moves_for(
    repo: GitRepo, old: str, new: str, paths: list[str], stores: tuple[BlobStore, BlobStore] | None = None
) -> dict[str, Move]:
    """Where each path (gone from ``new``) went: git's rename pick, plus added files with the same
    name scoring at least 50%; best first, ambiguity flagged. Git weighs only these paths against
    the additions (a pathspec): ~0.05 s instead of ~0.2 s on a whole vLLM release."""
    out: dict[str, Move] = {p: Move(None) for p in paths}
    if not paths:
        return out
    plain = _name_status(repo.git("diff-tree", "-r", "-z", "--name-status", "--no-renames", old, new).stdout)
    added = [f[0] for st, f in plain if st == "A"]
    gone = [p for p in paths if any(st == "D" and f[0] == p for st, f in plain)]
    if not added or not gone:
        return out
    spec = [f":(literal){p}" for p in gone + added]
    renamed = {
        f[0]: (f[1], int(st[1:] or 0))
        for st, f in _name_status(
            repo.git("diff-tree", "-r", "-z", "--name-status", "-M50%", "-l0", old, new, "--", *spec).stdout
        )
        if st.startswith("R")
    }
    by_name: dict[str, list[str]] = {}
    for a in added:
        by_name.setdefault(a.rsplit("/", 1)[-1], []).append(a)
    old_store, new_store = stores or (BlobStore(repo, old), BlobStore(repo, new))
    old_store.prefetch(gone)
    new_store.prefetch([a for p in gone for a in by_name.get(p.rsplit("/", 1)[-1], [])])
    for p in gone:
        cands: dict[str, RenameCandidate] = {}
        if p in renamed:
            cands[renamed[p][0]] = RenameCandidate(renamed[p][0], renamed[p][1], "git")
        same = [a for a in by_name.get(p.rsplit("/", 1)[-1], []) if a not in cands]
        if same:
            old_blob = old_store.get(p)[0] or b""
            for a in same:
                score = similarity(old_blob, new_store.get(a)[0] or b"")
                if score >= 50:
                    cands[a] = RenameCandidate(a, score, "same-name")
        ranked = sorted(cands.values(), key=lambda c: (-c.similarity, c.how != "git", c.path))[:5]
        out[p] = Move(ranked[0].path if ranked else None, ranked, ambiguous(ranked) if ranked else False)
    return out

"""``import --pr N`` and ``import --revert SHA``: upstream changes a build carries by reference.

A PR becomes an entry of origin ``upstream`` sourced from the PR, not fetched yet (``patchset
fetch`` pins it); a revert is the reverse of an upstream commit from a clone or the release
history, written as a body now (origin ``revert``). A list of PRs can be a file (a Dockerfile
fragment): ``#N``, ``OWNER/REPO#N``, ``…/pull/N`` and lines of bare numbers count, nothing else.
A pull URL on another host than the target's upstream is refused.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from patchset.commands.importer import choose_target, read_source
from patchset.errors import InputError, Location
from patchset.ledger import store as ledger_mod
from patchset.ledger.lock import sha256_bytes
from patchset.ledger.model import Target
from patchset.rebase.regen import FileChange, render_changes
from patchset.upstream.refs import PRRef, pull_hosts, url_host
from patchset.upstream.repo import GitRepo

MAX_PRS = 1000
_PULL = re.compile(
    r"(?:(?:(?P<scheme>[A-Za-z][\w+.-]*)://(?:[^@/\s]*@)?(?P<host>[^/\s:]+)(?::\d*)?/|(?<![\w.-])(?P<bare>github\.com)/)"
    r"(?P<repo>[\w.-]+/[\w.-]+?)(?:\.git)?/)?\bpulls?/(?P<n>\d{1,7})\b"
)
_TOKEN = re.compile(r"(?<![\w/.#-])(?:(?P<repo>[\w.-]+/[\w.-]+)#|#)(?P<n>\d{1,7})(?![\w.])")
# a line of bare numbers, or a variable named for PRs holding them (ARG PRS="1 2", VLLM_PRS=(1 2)):
# a number under any other name (ARG MAX_JOBS=4, head_ready=0) is a setting, not a PR
_NUMBER_LIST = re.compile(
    r"^\s*(?:(?:[A-Za-z]+\s+)?(?:[A-Za-z]\w*_)?PRS?(?:_\w*)?=)?[\s\"'(),;]*[1-9]\d{0,6}"
    r"(?:[\s\"'(),;]+[1-9]\d{0,6})*[\s\"'(),;]*$",
    re.IGNORECASE,
)
_SUBJECT_PR = re.compile(r"\(#(\d+)\)\s*$")


def _pull_hit(
    m: re.Match[str], line: str, value: str, hosts: frozenset[str], where: Location | None
) -> tuple[str, str]:
    host = m["host"] or m["bare"] or ""
    url = bool(m["repo"])
    if not url:  # ``pull/N`` alone, or in a URL whose path is not OWNER/REPO/pull/N
        before = line[: m.start()]
        token = before.rsplit(None, 1)[-1] if before and not before[-1].isspace() else ""
        scheme, sep, rest = token.partition("://")
        if sep and re.search(r"[A-Za-z][\w+.-]*$", scheme):
            url = True
            host = url_host("x://" + rest)
    host = host.lower().removeprefix("www.")
    if url and host not in hosts:
        shown = value if where is None else m.group(0)
        raise InputError(
            f"--pr {shown!r}: a pull request on {host or 'no host'}, not on {' or '.join(sorted(hosts))} "
            "(where the target's upstream is); nothing was imported",
            where=where,
            hint="a change from another host is a patch file: download its diff and `patchset import FILE`; "
            "a PR of the target's upstream is N, OWNER/REPO#N or its URL there",
        )
    return m["repo"] or "", m["n"]


def pr_refs(values: list[str], github: str, hosts: frozenset[str] = frozenset({"github.com"})) -> list[PRRef]:
    """PR references from ``--pr`` values: ``N``, ``#N``, ``OWNER/REPO#N``, a pull URL on one of
    ``hosts`` (``refs.pull_hosts``), or a file holding any of them (one PR each time, in order,
    duplicates dropped). A pull URL on another host is refused."""
    found: list[PRRef] = []
    for value in values:
        path = Path(value)
        texts: list[tuple[str, Location | None]]
        try:
            is_file = not re.fullmatch(r"#?\d+|[\w.-]+/[\w.-]+#\d+|https?://\S+", value) and path.is_file()
        except OSError:
            is_file = False
        if is_file:
            text = read_source(path, what="list of PRs").decode("utf-8", "replace")
            texts = [(ln, Location(path, i)) for i, ln in enumerate(text.splitlines(), start=1)]
        else:
            texts = [(value, None)]
        for line, where in texts:
            if len(line) > 4096 or (where is not None and re.match(r"^\s*#\s", line)):
                continue  # a comment line ("# PRs we carry")
            hits = [_pull_hit(m, line, value, hosts, where) for m in _PULL.finditer(line)]
            rest = _PULL.sub(" ", line)
            hits += [(m["repo"], m["n"]) for m in _TOKEN.finditer(rest)]
            if _NUMBER_LIST.match(rest) or (where is None and re.fullmatch(r"\s*\d{1,7}\s*", rest)):
                hits += [("", n) for n in re.findall(r"\d{1,7}", rest)]  # a bare list: 12345 23456
            if where is None and not hits:
                raise InputError(f"--pr {value!r}: not a PR number, OWNER/REPO#N, a pull URL or a file of them")
            for repo, n in hits:
                repo = repo or github
                if not repo:
                    raise InputError(
                        f"PR #{n}: the target has no GitHub repository to number it in",
                        where=where,
                        hint="write OWNER/REPO#N, or `patchset target add` with --github",
                    )
                ref = PRRef(repo, int(n))
                if ref not in found:
                    found.append(ref)
            if len(found) > MAX_PRS:
                raise InputError(f"more than {MAX_PRS} PRs: is this the right list?", where=where)
    if not found:
        raise InputError("no PR numbers found", hint="--pr N, --pr OWNER/REPO#N, or --pr FILE holding them")
    return found


def import_prs(ledger_path: Path, values: list[str], target: str | None) -> dict[str, Any]:
    """Record one upstream-origin entry per PR (``pr-N``), its source the PR, not fetched yet."""
    ledger = ledger_mod.load_ledger(ledger_path)
    t = choose_target(ledger, target)
    refs = pr_refs(values, t.github, pull_hosts(t.upstream, t.github))
    out: dict[str, Any] = {"target": t.name, "added": [], "unchanged": [], "not_fetched": []}
    with ledger_mod.edit(ledger_path) as e:
        for ref in refs:
            pid = f"pr-{ref.number}" if ref.repo == t.github else f"pr-{ref.repo.replace('/', '-')}-{ref.number}"
            name = f"{ref.repo}#{ref.number}"
            existing = e.patch_table(pid)
            if existing is not None:
                src = existing.get("source", {})
                if src.get("kind") == "pr" and src.get("ref") == name:
                    out["unchanged"].append(pid)
                    continue
                raise InputError(
                    f"patch {pid!r} exists and is not PR {name}; nothing was imported", hint="rename that patch first"
                )
            notes = "recorded from a PR list; the body is not fetched yet (`patchset fetch` pins it to the PR's head)"
            entry = {"id": pid, "target": t.name, "title": f"Upstream PR {name}", "origin": "upstream", "notes": notes}
            table = e.add_patch(entry)
            e.set_path(table, "upstream.prs", [name])
            e.set_path(table, "source.kind", "pr")
            e.set_path(table, "source.ref", name)
            out["added"].append(pid)
            out["not_fetched"].append(pid)
        if not out["added"]:
            e.cancelled = True
    return out


# --------------------------------------------------------------------------- reverts


def _repo_for(t: Target, upstream: Path | None) -> GitRepo:
    from patchset.upstream.bases import local_repo

    if upstream is not None:
        local = local_repo(upstream)
        if local is None:
            raise InputError(f"--upstream {upstream}: not a git repository")
        return GitRepo(local)
    local = local_repo(t.upstream) if t.upstream else None
    if local is not None:
        return GitRepo(local)
    if t.package:
        from patchset.upstream.history import ReleaseHistory

        return ReleaseHistory.for_project(t.package)
    raise InputError(
        f"target {t.name!r} has no local upstream clone and no package release history to find the commit in",
        hint="pass --upstream DIR (a local clone holding the commit)",
    )


def import_revert(ledger_path: Path, sha: str, target: str | None, upstream: Path | None = None) -> dict[str, Any]:
    """Record the reverse of upstream commit ``sha`` as a patch of origin ``revert``."""
    if not re.fullmatch(r"[0-9a-fA-F]{7,40}", sha):
        raise InputError(f"--revert {sha!r}: a commit sha (7-40 hex digits)")
    ledger = ledger_mod.load_ledger(ledger_path)
    t = choose_target(ledger, target)
    with _repo_for(t, upstream) as repo:
        full = repo.rev(sha.lower())
        if full is None:
            raise InputError(
                f"commit {sha} is not in {repo.git_dir}",
                hint="pass --upstream DIR (a clone that holds it), or fetch it into the target's clone",
            )
        parents = repo.git("rev-list", "--parents", "-n", "1", full).stdout.decode().split()[1:]
        if not parents:
            raise InputError(f"commit {full[:12]} has no parent: there is nothing to revert it to")
        subject = repo.git("log", "-1", "--format=%s", full).stdout.decode().strip()
        names = repo.git("diff", "--name-only", "-z", "--no-renames", parents[0], full).stdout
        changes = []
        for raw in filter(None, names.split(b"\0")):
            path = raw.decode("utf-8", "surrogateescape")
            after, before = repo.read_blob(parents[0], path), repo.read_blob(full, path)
            changes.append(
                FileChange(path if before is not None else None, path if after is not None else None, before, after)
            )
    if not changes:
        raise InputError(f"commit {full[:12]} changes no file: nothing to revert")
    pid = f"revert-{full[:12]}"
    head = f'Subject: [PATCH] Revert "{subject}"\n\nThis reverts commit {full}.\n\n'
    body = head.encode("utf-8", "surrogateescape") + render_changes(changes)
    rel = f"patchset/series/{t.name}/{pid}.patch"
    files = [ch.new_path or ch.old_path for ch in changes]
    out: dict[str, Any] = {"id": pid, "target": t.name, "commit": full, "subject": subject, "files": files}
    with ledger_mod.edit(ledger_path) as e:
        existing = e.patch_table(pid)
        if existing is not None:
            same = e.same_body(pid, existing.get("body") or rel, body)
            out["outcome"] = "unchanged" if same else "updated"
            if same:
                e.cancelled = True
                return out
        else:
            values = {
                "id": pid,
                "target": t.name,
                "title": f'Revert "{subject}"'[:200],
                "origin": "revert",
                "files": files,
            }
            table = e.add_patch(values)
            e.set_path(table, "upstream.commits", [full])
            m = _SUBJECT_PR.search(subject)
            if m and t.github:
                e.set_path(table, "upstream.reverts", [f"{t.github}#{m.group(1)}"])
            out["outcome"] = "added"
        e.write_file(rel, body)
        e.lock.bodies[pid] = sha256_bytes(body)
    return out

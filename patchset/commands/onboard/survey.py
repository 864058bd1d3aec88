"""``patchset import REPO``: the inventory of a build repository, before anything is written.

The walk is bounded, skips dot folders, docs and images, and never follows a link. Everything it
meets becomes one ``Finding``: what it becomes (a patch of target T) or why it is not imported.
Files belong to the target whose package their paths name (after an install prefix), never to a
target named after a folder; a target the ledger lacks is created only from a preset.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from patchset.commands.apply.target import Word
from patchset.commands.importer import PATCH_SUFFIXES, read_series_file, read_source
from patchset.commands.onboard import bodies, recipes
from patchset.commands.upstream_import import pr_refs
from patchset.errors import InputError
from patchset.ledger.model import Target
from patchset.ledger.presets import PRESETS, target_values
from patchset.ledger.store import target_from
from patchset.patchfmt.reader import diff_start
from patchset.upstream.stock import StockBase

MAX_DEPTH = 14  # overlay/usr/local/lib/python3.12/dist-packages/vllm/v1/attention/backends/mla/x.py
MAX_FILES = 20000
MAX_READ = 1 << 20  # bytes read from a file that is not a diff, to tell what it is
SKIP_DIRS = {"docs", "doc", "node_modules", "__pycache__", "images", "img"}
SKIP_SUFFIXES = {".md", ".rst", ".png", ".jpg", ".jpeg", ".gif", ".svg", ".ico", ".webp", ".pdf", ".pyc", ".whl"}
SCRIPT_SUFFIXES = (".sh", ".bash", ".py")
CHANGE_DIRS = {"patches", "mods", "hotfixes", "fixes"}  # a script here is a change or is said not to be one
SOURCE_SUFFIXES = (".py", ".pyi", ".cu", ".cuh", ".h", ".hpp", ".c", ".cc", ".cpp")
INSTALL_PATH = re.compile(r"/(?:usr/(?:local/)?)?lib/python3\.\d+/(?:site|dist)-packages(?=/)")
_EDITS = re.compile(r"\.replace\(|re\.sub\(|\bsed\s+-i\b|write_text\(|os\.replace\(|open\([^)]*['\"][wa]")
_HEREDOC = re.compile(r"^RUN\b.*<<-?\s*['\"]?(\w+)['\"]?", re.M)
_PR_MARK = re.compile(r"/pull/\d+|(?<![\w/])#\d{3,7}\b|\bPRS?\b", re.I)
_FORK_REF = re.compile(r"^\s*ARG\s+(VLLM_(?:REF|COMMIT|SHA|BRANCH|VERSION))=(\S+)", re.M)
_CHECKOUT = re.compile(r"\bgit\s+(?:-C\s+\S+\s+)?checkout\s+([0-9a-f]{7,40}|\$\{?\w+\}?)")
_CLONE = re.compile(r"\bgit\s+clone\b[^\n]*?(https?://\S+|git@\S+)")


class Kind(Word):
    """What the survey found."""

    DIFF = "diff"
    RECIPE = "recipe"
    OVERLAY = "overlay"
    SCRIPT = "edit script"
    HEREDOC = "Dockerfile RUN heredoc"
    PR_LIST = "PR list"
    SUBMODULE = "submodule"
    FORK = "fork"


@dataclass
class Finding:
    """One thing the repository carries, and what it becomes (``target``) or why not (``reason``)."""

    kind: Kind
    path: str
    target: str = ""
    reason: str = ""
    note: str = ""  # how it was read (-p6 (vllm/x.py)), which recipe applies it
    reading: bodies.Reading | None = None
    refused: bool = False  # a diff of a target whose body apply would refuse

    def becomes(self) -> str:
        if self.kind == Kind.RECIPE and not self.reason:
            return "its diffs, as below"
        if self.target and not self.reason:
            return f"a patch of {self.target}"
        return ("refused: " if self.refused else "not imported: ") + self.reason

    def to_json(self) -> dict[str, object]:
        shown = {k: v for k, v in vars(self).items() if k != "reading"}
        return {**shown, "kind": str(self.kind), "imported": bool(self.target and not self.reason)}


@dataclass
class Survey:
    """One survey: the repository, the targets its files may belong to, the base (when given)."""

    repo: Path
    targets: dict[str, Target]  # the ledger's, then the presets it lacks
    known: set[str]  # the ledger's target names
    stock: StockBase | None = None
    findings: list[Finding] = field(default_factory=list)
    unread: int = 0  # files past the bounds
    claimed: set[str] = field(default_factory=set)  # diffs a recipe applies

    def say(self, kind: Kind, path: str, reason: str) -> None:
        """A finding that is not imported, and why."""
        self.findings.append(Finding(kind, path, reason=reason))

    def claim(self, diff: str, note: str) -> None:
        """The diff ``diff`` (relative to the repository) in a script's or a series' order, once."""
        if diff not in self.claimed:
            self.claimed.add(diff)
            add_diff(self, self.repo / diff, note)

    @property
    def diffs(self) -> list[Finding]:
        return [f for f in self.findings if f.kind == Kind.DIFF]

    @property
    def imported(self) -> list[Finding]:
        return [f for f in self.diffs if f.target and not f.reason]

    @property
    def overlays(self) -> list[Finding]:
        """Overlay folders read against the base given: imported after the diffs."""
        return [f for f in self.findings if f.kind == Kind.OVERLAY and f.target and not f.reason]

    @property
    def refused(self) -> list[Finding]:
        return [f for f in self.findings if f.refused]

    @property
    def created(self) -> list[str]:
        return sorted({f.target for f in self.imported + self.overlays if f.target not in self.known})

    def to_json(self) -> dict[str, object]:
        return {
            "repository": str(self.repo),
            "findings": [f.to_json() for f in self.findings],
            "created": self.created,
            "counts": {
                "imported": len(self.imported),
                "overlays": len(self.overlays),
                "refused": len(self.refused),
                "found": len(self.findings),
            },
            "unread": self.unread,
        }


def candidate_targets(ledger_targets: dict[str, Target], named: str | None) -> dict[str, Target]:
    """The ledger's targets, then the presets it lacks (a named target the user asks for, too)."""
    out = dict(ledger_targets)
    for name in PRESETS:
        out.setdefault(name, target_from(name, target_values(name)))
    if named and named not in out:
        out[named] = target_from(named, target_values(named))
    return out


def walk(repo: Path) -> list[Path]:
    """The files to look at, in a stable order, within the bounds."""
    found: list[Path] = []
    top = len(repo.parts)
    for dirpath, dirnames, filenames in os.walk(repo, followlinks=False):
        here = Path(dirpath)
        depth = len(here.parts) - top
        dirnames[:] = sorted(
            d for d in dirnames if not d.startswith(".") and d.lower() not in SKIP_DIRS and depth < MAX_DEPTH
        )
        for n in sorted(filenames):
            p = here / n
            if (n.startswith(".") and n != ".gitmodules") or p.suffix.lower() in SKIP_SUFFIXES or p.is_symlink():
                continue
            found.append(p)
        if len(found) > MAX_FILES:
            break
    return found


def _head(p: Path) -> bytes:
    try:
        with open(p, "rb") as fh:
            return fh.read(MAX_READ)
    except OSError:
        return b""


def _is_diff(p: Path, head: bytes) -> bool:
    if p.suffix in PATCH_SUFFIXES or p.suffix == ".mbox":
        return True
    return not p.name.endswith(SCRIPT_SUFFIXES) and bool(head) and diff_start(head)[0] < min(len(head), 4096)


def _owner(s: Survey, written: list[str]) -> list[bodies.Reading]:
    files = set(s.stock.files()) if s.stock is not None else None
    out = []
    for t in s.targets.values():
        base = files if s.stock is not None and s.stock.target.name == t.name else None
        r = bodies.read_as(written, t, base)
        if r is not None:
            out.append(r)
    return out


def _repo_folder(s: Survey, r: bodies.Reading) -> str:
    """The repository's own folder the names are rooted at (``overlays/`` of ``a/overlays/vllm/x.py``)."""
    if r.prefix and not bodies.INSTALL_PREFIX.search(r.prefix + "/") and (s.repo / r.prefix).is_dir():
        return r.prefix
    return ""


def add_diff(s: Survey, p: Path, note: str = "") -> None:
    rel = p.relative_to(s.repo).as_posix()
    f = Finding(Kind.DIFF, rel, note=note)
    s.findings.append(f)
    try:
        body = read_source(p)
    except InputError as exc:
        f.reason = exc.message
        return
    written = bodies.names(body)
    if not written:
        f.reason = "no diff in it (no 'diff --git' or '---'/'+++' header)"
        return
    fits = _owner(s, written)
    if not fits:
        roots = ", ".join(sorted({r for t in s.targets.values() for r in bodies.package_roots(t)}))
        f.reason = f"its files ({', '.join(written[:2])}) are in no target's package ({roots})"
        return
    r = fits[0]
    f.target, f.reading = r.target, r
    under = f" under {r.root}" if r.root else ""
    read = f"read as -p{r.strip}{under} ({', '.join(r.paths[:2])}{', …' if len(r.paths) > 2 else ''})"
    f.note = f"{note}; {read}" if note else read
    folder = _repo_folder(s, r)
    if folder:
        f.reason = (
            f"its file names are rooted at this repository's own folder {folder}/ ({written[0]}): "
            f"not names of {r.target}'s files"
        )
        f.refused = True
        return
    why = bodies.refusal(body, r, s.targets[r.target], s.stock, rel)
    if why:
        f.reason, f.refused = why, True


def add_series(s: Survey, p: Path) -> None:
    """A quilt ``series`` file below the top: its diffs in its order (names confined to its folder)."""
    rel = p.relative_to(s.repo).as_posix()
    try:
        items = read_series_file(p)
    except InputError as exc:
        s.say(Kind.DIFF, rel, exc.message)
        return
    top = os.path.realpath(s.repo)
    for item in items:
        diff = Path(os.path.relpath(item.path, top)).as_posix()
        if not diff.startswith(".."):
            s.claim(diff, f"in the order of {rel}")


def _script_target(s: Survey, text: str) -> str:
    for t in s.targets.values():
        for root in bodies.package_roots(t):
            if re.search(rf"(?:^|[/\s'\"{{}}]){re.escape(root)}", text):
                return t.name
    return ""


def _edit_lines(p: Path, diff_lines: set[int]) -> list[int]:
    """The lines of a recipe, other than its ``patch``/``git apply`` lines, that edit files."""
    text = p.read_bytes()[: recipes.MAX_SCRIPT_BYTES].decode("utf-8", "replace")
    return [
        n
        for n, line in enumerate(text.splitlines(), start=1)
        if n not in diff_lines and not line.lstrip().startswith("#") and _EDITS.search(line)
    ]


def add_script(s: Survey, p: Path, head: bytes) -> None:
    """A script: a recipe (its diffs are imported), an edit script, or a script said to do neither."""
    rel = p.relative_to(s.repo).as_posix()
    steps = recipes.steps(s.repo, p)
    if steps:
        s.say(Kind.RECIPE, rel, "" if any(st.diff for st in steps) else "its diffs are not in the repository")
        s.findings[-1].note = f"applies {len(steps)} diff(s): imported as those diffs, in its order"
        for st in steps:
            if st.diff:
                how = f"applied by {rel}:{st.line}" + (f" (-p{st.strip}" if st.strip is not None else " (")
                how += f" -d {st.directory})" if st.directory else ")"
                s.claim(st.diff, how.replace(" ()", ""))
            elif st.problem:
                s.say(Kind.DIFF, f"{rel}:{st.line}", st.problem)
        edits = _edit_lines(p, {st.line for st in steps})
        if edits:
            s.say(
                Kind.SCRIPT,
                f"{rel}:{edits[0]}",
                f"besides its diffs it edits files (line {', '.join(map(str, edits))}): those edits are not "
                "imported; put them in a script of their own and make it a generated patch with "
                "`patchset import --script ...`",
            )
        return
    text = head.decode("utf-8", "replace")
    if _EDITS.search(text):
        t = _script_target(s, text) or "vllm"
        run = "python3" if p.suffix == ".py" else "bash"
        bind = INSTALL_PATH.search(text)
        how = f"'{run} {p}' --bind {bind.group(0)}" if bind else f"'{run} {p} {{root}}/…'"
        said = " (it hard-codes the install path)" if bind else ""
        s.say(
            Kind.SCRIPT,
            rel,
            f"an edit script of {t}: make it a generated patch with "
            f"`patchset import --script {how} --id ID --target {t} --base SPEC`{said}",
        )
    elif re.match(r"(?:hot)?fix|patch", p.name) or any(part in CHANGE_DIRS for part in Path(rel).parts[:-1]):
        s.say(Kind.SCRIPT, rel, "it neither applies a diff nor edits a file (read it)")


def add_dockerfile(s: Survey, p: Path, head: bytes) -> None:
    rel = p.relative_to(s.repo).as_posix()
    text = head.decode("utf-8", "replace")
    for m in _HEREDOC.finditer(text):
        end = text.find(f"\n{m.group(1)}", m.end())
        block = text[m.end() : end if end > 0 else None]
        if _EDITS.search(block):
            line = text.count("\n", 0, m.start()) + 1
            t = _script_target(s, block) or "vllm"
            s.say(
                Kind.HEREDOC,
                f"{rel}:{line}",
                f"an edit of {t} inside the image build: make it a generated patch with "
                f"`patchset import --script {shlex.quote(str(p) + ':' + str(line))} --id ID --target {t} --base SPEC`",
            )
    for m in _FORK_REF.finditer(text):
        s.say(Kind.FORK, f"{rel}: {m.group(1)}={m.group(2)}", _fork_reason(text, m.group(2)))
    if not _FORK_REF.search(text):
        for m in _CHECKOUT.finditer(text):
            s.say(Kind.FORK, f"{rel}: git checkout {m.group(1)}", _fork_reason(text, m.group(1)))
    add_pr_list(s, p, text)
    for st in recipes.steps(s.repo, p):
        if st.diff:
            s.claim(st.diff, f"applied by {rel}:{st.line}")


def _fork_reason(text: str, ref: str) -> str:
    clone = _CLONE.search(text)
    where = clone.group(1) if clone else "an upstream the file does not name"
    if clone and re.fullmatch(r"[0-9a-f]{7,40}", ref):
        how = f"`patchset import --fork {shlex.quote(clone.group(1) + '@' + ref)} --target vllm` (needs the fork reachable)"
    else:
        how = "`patchset import --fork URL@SHA --target vllm` with the fork's URL and the commit the build takes"
    return f"vllm built from {where} at {ref}: import its commits above upstream with {how}"


def add_pr_list(s: Survey, p: Path, text: str) -> None:
    if not _PR_MARK.search(text):
        return
    try:
        refs = pr_refs([str(p)], "vllm-project/vllm")
    except InputError:
        return
    rel = p.relative_to(s.repo).as_posix()
    shown = ", ".join(f"#{r.number}" for r in refs[:5]) + (", …" if len(refs) > 5 else "")
    s.say(
        Kind.PR_LIST,
        rel,
        f"{len(refs)} upstream PR(s) ({shown}): record them with `patchset import --pr {p} --target vllm`",
    )


def add_submodules(s: Survey, p: Path, head: bytes) -> None:
    text = head.decode("utf-8", "replace")
    for block in re.split(r"^\s*\[submodule\b", text, flags=re.M)[1:]:
        path = re.search(r"^\s*path\s*=\s*(\S+)", block, re.M)
        url = re.search(r"^\s*url\s*=\s*(\S+)", block, re.M)
        if not path:
            continue
        sha = _gitlink(s.repo, path.group(1))
        what = f"{url.group(1) if url else 'no url'} at {sha or 'a commit this checkout does not record'}"
        if url and "vllm" in url.group(1).lower():
            fork = shlex.quote(f"{url.group(1)}@{sha or 'SHA'}")
            reason = f"a vllm fork: {what}; import its commits above upstream with `patchset import --fork {fork} --target vllm`"
        else:
            reason = f"{what}: not a change to a target"
        s.say(Kind.SUBMODULE, path.group(1), reason)


def _gitlink(repo: Path, path: str) -> str:
    if not (repo / ".git").exists():
        return ""
    try:
        r = subprocess.run(
            ["git", "-C", str(repo), "ls-tree", "HEAD", "--", path],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    parts = r.stdout.split()
    return parts[2] if len(parts) >= 3 and parts[1] == "commit" else ""


def add_overlays(s: Survey, sources: list[Path]) -> set[Path]:
    """Source files mirrored under a target's package folder (``overlays/vllm/config/cache.py``), by
    overlay folder: candidates for ``import --overlay`` (a whole file is imported against a base).
    Returns the files taken (they are not scripts, whatever they hold)."""
    files = set(s.stock.files()) if s.stock is not None else None
    kits: dict[tuple[str, str], list[str]] = {}
    taken: set[Path] = set()
    checkout = any((s.repo / n).is_file() for n in ("setup.py", "pyproject.toml"))  # vllm/ at the top: a fork
    for p in sources:
        rel = p.relative_to(s.repo).as_posix()
        parts = rel.split("/")
        for t in s.targets.values():
            roots = {r.rstrip("/") for r in bodies.package_roots(t) if "/" not in r.rstrip("/")}
            hit = next((i for i, part in enumerate(parts[:-1]) if (i > 0 or not checkout) and part in roots), None)
            if hit is None:
                continue
            key = "/".join(parts[hit:])
            if files is not None and s.stock is not None and s.stock.target.name == t.name and key not in files:
                continue
            kits.setdefault(("/".join(parts[:hit]), t.name), []).append(key)
            taken.add(p)
            break
    for (folder, name), keys in kits.items():
        shown = ", ".join(keys[:2]) + (", …" if len(keys) > 2 else "")
        f = Finding(Kind.OVERLAY, f"{folder}/" if folder else "./", target=name)
        if s.stock is not None and s.stock.target.name == name:
            f.note = f"{len(keys)} whole file(s) ({shown}): one patch per file, the diff from {s.stock.label}"
        else:
            f.reason = (
                f"{len(keys)} whole file(s) of {name} ({shown}): an overlay is read against a base: give --base, "
                f"or `patchset import --overlay {s.repo / folder if folder else s.repo} --target {name} --base SPEC`"
            )
        s.findings.append(f)
    return taken


def survey(s: Survey) -> Survey:
    """Fill ``s.findings``: recipes and their diffs first (in each script's order), then the other
    diffs by path, then scripts, overlays, PR lists, submodules and forks."""
    files = walk(s.repo)
    s.unread = max(0, len(files) - MAX_FILES)
    files = files[:MAX_FILES]
    heads = {p: _head(p) for p in files}
    diffs = [p for p in files if _is_diff(p, heads[p])]
    overlays = add_overlays(s, [p for p in files if p.suffix in SOURCE_SUFFIXES and p not in diffs])
    for p in files:
        if p.name.endswith(SCRIPT_SUFFIXES) and p not in diffs and p not in overlays:
            add_script(s, p, heads[p])
    for p in files:
        if p.name.startswith(("Dockerfile", "Containerfile")) or p.suffix == ".dockerfile":
            add_dockerfile(s, p, heads[p])
        elif p.name == ".gitmodules":
            add_submodules(s, p, heads[p])
        elif p.suffix in (".txt", "") and p not in diffs and re.search(r"pr", p.name, re.I):
            add_pr_list(s, p, heads[p].decode("utf-8", "replace"))
    for p in files:
        if p.name == "series":
            add_series(s, p)
    for p in diffs:
        if p.relative_to(s.repo).as_posix() not in s.claimed:
            add_diff(s, p)
    order = {k: i for i, k in enumerate(Kind)}
    recipe_first = [f for f in s.findings if f.kind in (Kind.RECIPE, Kind.DIFF)]
    rest = sorted((f for f in s.findings if f.kind not in (Kind.RECIPE, Kind.DIFF)), key=lambda f: order[f.kind])
    s.findings = recipe_first + rest
    return s


def beside_folders(repo: Path, folders: dict[str, Path]) -> list[str]:
    """What a build repository of per-target folders holds beside them (not surveyed: the folders
    say what to import), within the walk's bounds; ``EXPECTED.sha256`` files are the import's own."""
    inside = [os.path.realpath(d) + os.sep for d in folders.values()]
    return [
        p.relative_to(repo).as_posix()
        for p in walk(repo)
        if p.name != "EXPECTED.sha256" and not any(os.path.realpath(p).startswith(d) for d in inside)
    ][:MAX_FILES]

"""The ledger model: plain data classes for targets, patches, tests and the lock.

Every capability (apply, rebase, status, verify, gate) reads these classes and nothing else; the
TOML reading and writing live in ``store`` and ``lock``. The rules that follow from the data live
here too, once, and the commands ask for them: a patch's ``-p`` level (``Patch.strip_on``,
``Ledger.strip_of``), how a target's paths map between the source and the installed layout
(``Target.lock_key``, ``tree_path``, ``key_in``, ``from_installed``, ``mapper``, ``canonical``),
how a patch's body is made (``Patch.kind``). Closed sets of words are ``Word`` enums.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from patchset.text import Word

SCHEMA_VERSION = 1


class Origin(Word):
    """Where a patch's change comes from."""

    UPSTREAM = "upstream"  # an upstream PR or commit, taken as it is
    UPSTREAM_PARTIAL = "upstream-partial"  # part of one
    PORT = "port"  # an upstream change rewritten for this base
    OURS = "ours"  # written here
    REVERT = "revert"  # the reverse of an upstream commit

    @property
    def verbatim(self) -> bool:
        """Is the body upstream's own diff (so it can drift from upstream and names their authors)?"""
        return self in (Origin.UPSTREAM, Origin.UPSTREAM_PARTIAL, Origin.REVERT)


class PatchState(Word):
    ACTIVE = "active"
    HELD = "held"
    DROPPED = "dropped"


class Layout(Word):
    """How a tree lays out a target's files: as its source repository or as installed (site-packages)."""

    SOURCE = "source"
    INSTALLED = "installed"

    @property
    def artifact(self) -> str:
        """The release file a base of this layout is unpacked from."""
        return "sdist" if self is Layout.SOURCE else "wheel"


class WatchScope(Word):
    """What the verify plan watches of a module a patched file imports (docs/verify-plan.md)."""

    NAMES = "names"  # the definitions of the names the patched file uses from it
    FILES = "files"  # the whole file


class PullState(Word):
    """An upstream PR's state, as last recorded."""

    OPEN = "open"
    DRAFT = "draft"
    MERGED = "merged"
    CLOSED = "closed"
    UNKNOWN = "unknown"


class SourceKind(Word):
    """Where ``patchset fetch`` takes a body from."""

    PR = "pr"
    COMMIT = "commit"
    REPO_FILE = "repo-file"
    URL = "url"
    LOCAL = "local"


class TestKind(Word):
    """What a per-patch test runs: a command, long-context checks or serving measurements."""

    __test__ = False  # not a pytest class

    COMMAND = "command"
    LONGCTX = "longctx"
    SERVING = "serving"


# Engines: how a test's server is started from a build tree (docs/engines.md; patchset.verify.engines).
class Preset(Word):
    """The presets an ``[engines.NAME]`` table builds on (``preset = ...``)."""

    VLLM_CPU = "vllm-cpu"
    DOCKER = "docker"
    COMMAND = "command"


class Delivery(Word):
    """How the patched code reaches the engine (``delivers = ...``)."""

    PYTHONPATH = "pythonpath"  # the build tree first on PYTHONPATH
    OVERLAY = "overlay"  # the patched files, bind-mounted over the image's install root
    TREE = "tree"  # the launcher is given the build tree


ORIGINS = tuple(o.value for o in Origin)
STATES = tuple(s.value for s in PatchState)
LAYOUTS = tuple(x.value for x in Layout)
WATCH_SCOPES = tuple(x.value for x in WatchScope)
PR_STATES = tuple(s.value for s in PullState)
SOURCE_KINDS = tuple(k.value for k in SourceKind)
ENGINE_PRESETS = tuple(p.value for p in Preset)
DELIVERS = tuple(d.value for d in Delivery)
# What an engine's templates may name; {args} and {mounts} stand for several argv elements and must
# be whole elements of `start`.
ENGINE_PLACEHOLDERS = (
    "tree",  # the patched build tree
    "overlay",  # a directory of only the patched files under the install root (as `build overlay` lays it out)
    "port",
    "host",
    "model",
    "name",  # a name unique to this start (a container name)
    "logdir",  # a directory for this start's logs
    "args",  # the test's engine_args (whole element)
    "mounts",  # one read-only bind mount per overlay file: -v SRC:DEST:ro ... (whole element)
    "image",  # the engine's image (default: the target's base_image)
    "root",  # the target's installed_root
    "python",  # the engine venv's python (ci/setup_engine.sh)
    "venv",  # the engine venv
    "ledger",  # the ledger's directory
)
SPLICED_PLACEHOLDERS = ("args", "mounts")
# What a generate command may name (replaced as text in each argument: other braces are the script's)
GENERATE_PLACEHOLDERS = (
    "root",  # a private copy of the base tree
    "ledger",  # the ledger's directory
)
TEST_KINDS = tuple(k.value for k in TestKind)
SERVING_CHECKS = ("decode", "concurrent", "ttft-resume", "cache-hits", "spec-accept")


@dataclass
class PathMap:
    """Maps paths between the source-repo layout (what patches name) and the installed layout.

    ``prefixes`` is an ordered list of (source prefix, installed prefix); the longest source prefix
    wins. A path no prefix matches maps to itself.
    """

    prefixes: list[tuple[str, str]] = field(default_factory=list)

    def to_installed(self, path: str) -> str:
        best = max((p for p in self.prefixes if path.startswith(p[0])), key=lambda p: len(p[0]), default=None)
        return best[1] + path[len(best[0]) :] if best else path

    def to_source(self, path: str) -> str:
        best = max((p for p in self.prefixes if path.startswith(p[1])), key=lambda p: len(p[1]), default=None)
        return best[0] + path[len(best[1]) :] if best else path


@dataclass
class Target:
    """An upstream repository the series patches (vllm, flashinfer, nccl)."""

    name: str
    upstream: str = ""  # the repository URL (informational; rebase takes --upstream or release history)
    github: str = ""  # OWNER/REPO on GitHub, when upstream lives there ("" : status reads full refs only)
    branch: str = "main"
    base: str = ""
    base_version: str = ""
    strip: int = 1
    layout: Layout = Layout.SOURCE
    package: str = ""
    installed_root: str = ""
    base_image: str = ""  # the stock image the installed layout comes from (build overlay)
    path_map: PathMap = field(default_factory=PathMap)
    notes: str = ""
    watch: WatchScope = WatchScope.NAMES  # of the modules patched files import (the verify plan)

    def __post_init__(self) -> None:
        self.layout = Layout(self.layout)
        self.watch = WatchScope(self.watch)

    @property
    def series_dir(self) -> str:
        return f"patchset/series/{self.name}"

    def lock_key(self, path: str) -> str:
        """The key a file's hash is stored under in the lock: always the source layout, whichever
        layout the tree has and wherever that layout was given (``layout`` in the ledger,
        ``apply --layout``, an ``EXPECTED.sha256`` written in the installed layout)."""
        return self.path_map.to_source(path)

    def tree_path(self, key: str, layout: str) -> str:
        """Where the file a lock key names lives in a tree of ``layout``."""
        return self.path_map.to_installed(key) if layout == "installed" else key

    def spellings(self, path: str, key: str) -> tuple[str, str, str]:
        """Every way a file may be written (``EXPECTED.sha256`` lines, bodies): as given, as its lock
        key, as its installed path."""
        return path, key, self.path_map.to_installed(key)

    def strip_for(self, own: int | None) -> int:
        """The ``-p`` level of a body: its own when it has one, else the target's."""
        return own if own is not None else self.strip

    def key_in(self, path: str, layout: str) -> str:
        """The lock key of ``path`` as a tree of ``layout`` names it (a source tree's names are keys)."""
        return self.lock_key(path) if layout == "installed" else path

    def from_installed(self, path: str, layout: str) -> str:
        """Where a file named in the installed layout (``EXPECTED.sha256``, an overlay) lives in a
        tree of ``layout``."""
        return path if layout == "installed" else self.path_map.to_source(path)

    def mapper(self, layout: str) -> Callable[[str], str] | None:
        """How the engine renames a body's source paths for a tree of ``layout`` (None: as written)."""
        return self.path_map.to_installed if layout == "installed" and self.path_map.prefixes else None

    def layout_or(self, layout: str | None) -> str:
        """The layout asked for (``--layout``), else the ledger's."""
        return layout or self.layout

    @property
    def root_rel(self) -> str:
        """``installed_root`` without its slashes: where the installed layout sits in an image or overlay."""
        return self.installed_root.strip("/")

    def canonical(self, path: str) -> str:
        """The one spelling of a file path that every comparison uses: the source layout.

        Declared files, body paths, lock keys and ``EXPECTED.sha256`` lines may be in the source or the
        installed layout; the leading ``./`` and the installed root are dropped, then the path map takes
        installed prefixes back to source prefixes."""
        path = path.strip()
        while path.startswith("./"):
            path = path[2:]
        root = self.root_rel
        if root and path.lstrip("/").startswith(root + "/"):
            path = path.lstrip("/")[len(root) + 1 :]
        return self.path_map.to_source(path)


@dataclass
class Upstream:
    """Upstream references of a patch: PRs taken, the PR a port ports, issues, commits, reverts."""

    prs: list[str] = field(default_factory=list)
    ports: list[str] = field(default_factory=list)
    reverts: list[str] = field(default_factory=list)
    issues: list[str] = field(default_factory=list)
    commits: list[str] = field(default_factory=list)
    based_on: list[str] = field(default_factory=list)

    def all_refs(self) -> list[str]:
        return [*self.prs, *self.ports, *self.reverts, *self.issues, *self.based_on]


@dataclass
class Source:
    """Where a patch body comes from, for ``patchset fetch``."""

    kind: SourceKind = SourceKind.LOCAL
    ref: str = ""
    pin: str = ""
    include: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    strip: int | None = None
    sha256: str = ""
    root: str = ""  # the directory the original diff's paths were relative to (import re-rooted them)

    def __post_init__(self) -> None:
        self.kind = SourceKind(self.kind)


@dataclass
class Switches:
    """What a patch needs to act: environment variables and command-line flags."""

    env: dict[str, str] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    independent: bool = False  # does not interact with other independent switches: may share a start

    def __bool__(self) -> bool:
        return bool(self.env or self.flags)


@dataclass
class TestSpec:
    """One per-patch regression test: a command run in the build tree (``kind = "command"``),
    long-context checks (``kind = "longctx"``) or serving measurements (``kind = "serving"``) against
    an engine started from the build tree (``engine``: a name from ``[engines]`` or a preset)."""

    command: str = ""
    kind: TestKind = TestKind.COMMAND
    checks: list[str] = field(default_factory=list)
    model: str = ""
    mode: str = "fixed"
    baseline: str = ""
    engine_args: list[str] = field(default_factory=list)
    name: str = ""
    cwd: str = "."
    env: dict[str, str] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    timeout: int = 600
    engine: str = ""  # "" : the vllm-cpu preset (or `verify --engine`)
    repeats: int = 0  # serving: measured repeats (0: the default); longctx control mode: resume trials
    warmup: int = 1  # serving: unmeasured repeats first
    streams: int = 0  # serving `concurrent`: parallel streams (0: the default)
    max_tokens: int = 0  # serving: tokens per reply (0: the default)
    tolerance: float = 0.03  # serving: a ratio within 1 +- tolerance is never a regression
    tolerances: dict[str, float] = field(default_factory=dict)  # per check

    def __post_init__(self) -> None:
        self.kind = TestKind(self.kind)


@dataclass
class RecordedStatus:
    """The last upstream status a human or ``patchset status --refresh`` recorded."""

    pr_state: PullState = PullState.UNKNOWN
    recorded: dt.date | None = None
    merged_at: dt.date | None = None
    merge_commit: str = ""
    head: str = ""
    note: str = ""
    # later upstream work naming the patch's PRs, as `status --refresh` last read it:
    # "<class> <their ref> of <our ref>" (class: reverted, follow-up-merged, follow-up-open)
    followups: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.pr_state = PullState(self.pr_state)


# ---- onboarding: generated patches and overlays (issue #25) -----------------------------------
@dataclass(frozen=True)
class Generate:
    """A patch whose body is made by running a command (an anchored edit script) on a private copy
    of the target's base: ``{root}`` in ``command`` is that copy, ``{ledger}`` the ledger directory.
    ``script`` (relative to the ledger directory) is the file whose sha256 the lock keeps;
    ``bind`` an absolute path the copy is also mounted at (for scripts that hard-code one)."""

    command: list[str]
    script: str = ""
    bind: str = ""
    timeout: int = 300

    def ledger_files(self) -> list[str]:
        """The files under the ledger directory the command reads (``script`` and every argument
        ``{ledger}/…``), relative to it: what a copy of the ledger must carry for the command to run."""
        named = [a.removeprefix("{ledger}/") for a in self.command if a.startswith("{ledger}/")]
        return list(dict.fromkeys([self.script, *named] if self.script else named))


@dataclass(frozen=True)
class OverlayOrigin:
    """Where an overlay patch came from: the overlay files (as the kit names them) and its manifest."""

    files: list[str]
    manifest: str = ""


class PatchKind(enum.Enum):
    """How a patch's body is made, as the ledger records it. Every command takes every kind
    (``tests/test_kind_matrix.py`` walks them all): a new member needs its row there.

    A plain diff, a format-patch mail and a quilt patch are one kind: a body file, kept byte for
    byte (the mail's author becomes ``authors``, a quilt ``-pN`` the source's strip)."""

    DIFF = "diff"  # a body file written by hand or by any diff tool
    OVERLAY = "overlay"  # the diff from the base's stock file to a whole-file overlay
    GENERATED = "generated"  # the diff an edit script makes on a copy of the base
    REVERT = "revert"  # the reverse of an upstream commit
    PR = "pr"  # an upstream pull request, fetched (pinned to its head) or not yet


@dataclass
class Patch:
    """One entry of the series."""

    id: str
    target: str
    title: str
    origin: Origin
    body: str = ""
    description: str = ""
    files: list[str] = field(default_factory=list)
    authors: list[str] = field(default_factory=list)
    porter: str = ""
    state: PatchState = PatchState.ACTIVE
    reason: str = ""
    optional: bool = False
    upstream: Upstream = field(default_factory=Upstream)
    source: Source = field(default_factory=Source)
    switches: Switches = field(default_factory=Switches)
    tests: list[TestSpec] = field(default_factory=list)
    status: RecordedStatus = field(default_factory=RecordedStatus)
    notes: str = ""
    dep3: dict[str, str] = field(default_factory=dict)  # DEP-3 fields kept from the header, as written
    tags: list[str] = field(default_factory=list)  # named subsets (an overlay manifest's sets)
    generate: Generate | None = None
    overlay: OverlayOrigin | None = None
    line: int = 0

    def __post_init__(self) -> None:
        self.origin, self.state = Origin(self.origin), PatchState(self.state)

    @property
    def body_path(self) -> str:
        return self.body or f"patchset/series/{self.target}/{self.id}.patch"

    @property
    def active(self) -> bool:
        return self.state is PatchState.ACTIVE

    def strip_on(self, target: Target | None) -> int:
        """The ``-p`` level its body is read with: its own (a quilt series line ``x.patch -p0``),
        else its target's, else 1 (a patch naming a target the ledger lacks)."""
        if target is None:
            return self.source.strip if self.source.strip is not None else 1
        return target.strip_for(self.source.strip)

    @property
    def kind(self) -> PatchKind:
        """What makes the body: a command, an overlay, an upstream commit or PR, or the body itself."""
        if self.generate is not None:
            return PatchKind.GENERATED
        if self.overlay is not None:
            return PatchKind.OVERLAY
        if self.origin is Origin.REVERT:
            return PatchKind.REVERT
        if self.source.kind is SourceKind.PR:
            return PatchKind.PR
        return PatchKind.DIFF


@dataclass
class TargetLock:
    """Per-target lock: the base it was computed on, and sha256 of files before and after the series."""

    base: str = ""
    files: dict[str, str] = field(default_factory=dict)
    base_files: dict[str, str] = field(default_factory=dict)


@dataclass
class Lock:
    """What the tool wrote: hashes of patch bodies, of patched files, and pinned source heads."""

    bodies: dict[str, str] = field(default_factory=dict)
    heads: dict[str, str] = field(default_factory=dict)
    targets: dict[str, TargetLock] = field(default_factory=dict)
    scripts: dict[str, str] = field(default_factory=dict)  # generated patch id -> sha256 of its script

    def target(self, name: str) -> TargetLock:
        return self.targets.setdefault(name, TargetLock())


@dataclass
class Ledger:
    """The whole ledger: where it lives, its targets, its ordered patches, its lock."""

    path: Path
    targets: dict[str, Target]
    patches: list[Patch]
    lock: Lock
    schema: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)
    # [engines.NAME] tables as validated (patchset.ledger.schema), with "line": the table's line;
    # patchset.verify.engines turns them into engine definitions with their preset's defaults
    engines: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def root(self) -> Path:
        return self.path.parent

    @property
    def lock_path(self) -> Path:
        return self.path.with_suffix(".lock")

    def get(self, patch_id: str) -> Patch:
        for p in self.patches:
            if p.id == patch_id:
                return p
        import difflib

        from patchset.errors import InputError

        near = difflib.get_close_matches(patch_id, [p.id for p in self.patches], n=1)
        raise InputError(
            f"no patch with id {patch_id!r} in {self.path}",
            hint=f"did you mean {near[0]!r}?" if near else "see `patchset list` for the ids",
        )

    def series(self, target: str | None = None, *, states: tuple[str, ...] = ("active",)) -> list[Patch]:
        return [p for p in self.patches if p.state in states and (target is None or p.target == target)]

    def body_file(self, patch: Patch) -> Path:
        return self.root / patch.body_path

    def strip_of(self, patch: Patch) -> int:
        """``patch.strip_on`` its target, as this ledger defines it."""
        return patch.strip_on(self.targets.get(patch.target))

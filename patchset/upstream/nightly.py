"""Which upstream commit a build tree or an image says it was built from (vLLM nightlies).

Each vLLM main commit is published as wheels and as ``vllm/vllm-openai:nightly-<commit>``; the
build's version (``0.30.1rc1.dev48+g7f1a539``) names a commit prefix after ``+g``. The clues are
read from a tree (``_version.py``, dist-info, ``PKG-INFO``), an image reference and ``docker image
inspect``, and a prefix is resolved against the recorded base or an upstream clone; never from
version numbers (``devN`` counts commits on some branch). Tree data is untrusted: files through
``confine``, regular and at most ``MAX_READ`` bytes, every value matched by a strict pattern.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from patchset.confine import confine
from patchset.errors import EnvironmentFailure, InputError, UnsafePathError
from patchset.ledger.schema import SHA_RE
from patchset.text import json_fields
from patchset.upstream.repo import FULL_SHA, GitRepo

MAX_READ = 64 << 10  # bytes of one version file (real ones: _version.py ~700 B, METADATA ~20 KB)
MAX_ENTRIES = 100_000  # directory entries scanned for dist-info folders (a site-packages has thousands)
MAX_INSPECT = 4 << 20  # bytes of `docker image inspect` output read
DOCKER_TIMEOUT_S = 30.0
LABEL = "ai.vllm.build.commit"  # vLLM's Dockerfile labels the image with its commit
ENV_COMMIT = "VLLM_BUILD_COMMIT"

_VERSION = re.compile(r"^[0-9][0-9A-Za-z.!+_-]{0,127}$")
_LOCAL_G = re.compile(r"^g([0-9a-f]{7,40})$")
_DIRTY = re.compile(r"^d\d{8}$")
_VERSION_PY = re.compile(
    r"""^__version__\s*(?::\s*str\s*)?=\s*(?:version\s*(?::\s*str\s*)?=\s*)?(['"])([^'"\\\n]*)\1""", re.M
)
_VERSION_PY_PLAIN = re.compile(r"""^version\s*(?::\s*str\s*)?=\s*(['"])([^'"\\\n]*)\1""", re.M)
_COMMIT_PY = re.compile(
    r"""^__commit_id__\s*(?::\s*\S+\s*)?=\s*(?:commit_id\s*(?::\s*\S+\s*)?=\s*)?(['"])([^'"\\\n]*)\1""", re.M
)
_NIGHTLY_TAG = re.compile(r"(?:^|-)nightly-([0-9a-f]{7,40})$")


@dataclass
class Clue:
    """One place that names the build's version or commit, and what it says."""

    source: str  # where: "vllm/_version.py", "image tag nightly-<sha>", "docker label ai.vllm.build.commit"
    version: str = ""  # the version written there (checked: a version's characters only)
    commit: str = ""  # the commit hex it names: a prefix (after +g) or a full commit
    note: str = ""  # why the place was not used, or a remark (a dirty build)

    def to_json(self) -> dict[str, str]:
        return dict(self.__dict__)


@dataclass
class Detected:
    """What the clues of a tree or an image agree on."""

    clues: list[Clue] = field(default_factory=list)
    version: str = ""  # the first version named
    commit: str = ""  # the longest commit hex named (every other one is a prefix of it, unless ``disagree``)
    disagree: list[str] = field(default_factory=list)  # clues naming another commit than ``commit``

    @property
    def found(self) -> bool:
        return bool(self.version or self.commit)

    def to_json(self) -> dict[str, Any]:
        return json_fields(self, "version commit disagree clues")


@dataclass
class Resolved:
    """A commit prefix as a full commit, and how that was found."""

    commit: str = ""  # 40 hex, or "" when it could not be resolved
    how: str = ""
    candidates: list[str] = field(default_factory=list)  # an ambiguous prefix: every commit it names

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


# ---- versions ------------------------------------------------------------------------------------
def clean_version(text: str) -> str | None:
    """``text`` when it looks like a version (PEP 440's characters, at most 128), else None."""
    text = text.strip()
    return text if _VERSION.match(text) else None


def commit_prefix(version: str) -> str:
    """The commit prefix a setuptools-scm version names after ``+g``: ``0.30.1rc1.dev48+g7f1a539``
    -> ``7f1a539``; ``0.30.1rc1.dev48+g7f1a539.cu130`` too; ``""`` when there is none."""
    local = version.partition("+")[2].lower()  # "" without a "+": no part matches
    return next((m.group(1) for part in local.split(".") if (m := _LOCAL_G.match(part))), "")


def public_version(version: str) -> str:
    """The version without its local part: ``0.30.1rc1.dev48+g7f1a539`` -> ``0.30.1rc1.dev48``."""
    return version.partition("+")[0]


def _version_clue(source: str, raw: str | None) -> Clue:
    if raw is None:
        return Clue(source, note="no version in it")
    version = clean_version(raw)
    if version is None:
        return Clue(source, note=f"its version {raw[:60]!r} is not a version")
    dirty = any(_DIRTY.match(p) for p in version.partition("+")[2].split("."))
    note = "built from a tree with uncommitted changes (.dYYYYMMDD)" if dirty else ""
    return Clue(source, version=version, commit=commit_prefix(version), note=note)


def parse_version_py(data: bytes) -> tuple[str | None, str | None]:
    """``(version, commit id)`` a setuptools-scm ``_version.py`` assigns (read as text, never
    run): ``__version__ = version = '…'`` and ``__commit_id__ = commit_id = 'g…'``."""
    text = data.decode("utf-8", "replace")
    m = _VERSION_PY.search(text) or _VERSION_PY_PLAIN.search(text)
    c = _COMMIT_PY.search(text)
    return (m.group(2) if m else None), (c.group(2) if c else None)


def parse_metadata(data: bytes) -> str | None:
    """The ``Version:`` of a ``METADATA`` / ``PKG-INFO`` header block."""
    head = data.decode("utf-8", "replace").replace("\r\n", "\n").split("\n\n", 1)[0]
    for line in head.split("\n"):
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() == "version":
            return value.strip()
    return None


def parse_direct_url(data: bytes) -> str | None:
    """The full commit a ``direct_url.json`` names: ``vcs_info.commit_id`` (installed from git), or
    a 40-hex folder of the wheel's URL (vLLM's wheel server keeps each commit's wheels in a folder
    named by the full commit). None when it names none, or is not JSON."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    vcs = doc.get("vcs_info")
    if isinstance(vcs, dict) and isinstance(vcs.get("commit_id"), str) and FULL_SHA.match(vcs["commit_id"].lower()):
        return str(vcs["commit_id"]).lower()
    url = doc.get("url")
    if isinstance(url, str) and len(url) <= 4096:
        path = url.split("://", 1)[-1].split("?", 1)[0].split("#", 1)[0]
        folders = [p.lower() for p in path.split("/")[1:-1] if FULL_SHA.match(p.lower())]
        if len(folders) == 1:
            return folders[0]
    return None


# ---- trees ---------------------------------------------------------------------------------------
def read_small(tree: Path, rel: str, *, what: str, limit: int = MAX_READ) -> bytes:
    """The bytes of ``tree/rel`` when it is a regular file of at most ``limit`` bytes inside the
    tree. Raises ``InputError`` (``UnsafePathError`` for a link out of the tree) saying why not;
    ``FileNotFoundError`` when it is absent."""
    path = confine(tree, rel, what=what)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens at once, and is refused below
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{what}: {rel} is not a regular file")
        if st.st_size > limit:
            raise InputError(f"{what}: {rel} is {st.st_size} bytes, more than the {limit} a version file may be")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise InputError(f"{what}: {rel} grew past {limit} bytes while it was read")
    return data


def _read(tree: Path, rel: str, clues: list[Clue]) -> bytes | None:
    """The bytes of ``rel`` in ``tree``; None when it is absent, or when it cannot be used (then
    ``clues`` gains one whose note says why)."""
    try:
        return read_small(tree, rel, what=f"--tree {tree}")
    except FileNotFoundError:
        return None
    except UnsafePathError:
        why = "it links out of the tree: not read"
    except InputError as exc:
        why = exc.message.split(": ", 1)[-1]
    except OSError as exc:
        why = f"cannot be read: {exc.strerror or exc}"
    clues.append(Clue(rel, note=why))
    return None


def _dist_infos(tree: Path, package: str) -> list[str]:
    """The names of ``<package>-*.dist-info`` folders at the top of ``tree`` (sorted)."""
    norm = canonicalize_name(package).replace("-", "_")
    found: list[str] = []
    try:
        with os.scandir(tree) as it:
            for n, entry in enumerate(it):
                if n >= MAX_ENTRIES:
                    break
                name = entry.name
                if not name.endswith(".dist-info") or not name.isprintable():
                    continue
                stem = canonicalize_name(name[: -len(".dist-info")].split("-", 1)[0]).replace("-", "_")
                if stem == norm:
                    found.append(name)
    except OSError:
        return []
    return sorted(found)


def import_names(package: str, target_name: str = "") -> list[str]:
    """Where a package's ``_version.py`` may be: ``vllm`` -> ``vllm``; ``flashinfer-python`` ->
    ``flashinfer_python``, and the target's name."""
    return list(dict.fromkeys(canonicalize_name(name).replace("-", "_") for name in (package, target_name) if name))


def tree_clues(tree: Path, package: str, target_name: str = "") -> list[Clue]:
    """Every version clue of ``tree`` (a source checkout, an unpacked sdist or wheel, a copy of
    site-packages): ``<module>/_version.py``, ``<package>-*.dist-info/METADATA`` and
    ``direct_url.json``, ``PKG-INFO``. Files that are absent are left out; files that could not
    be used are kept with a note saying why."""
    clues: list[Clue] = []
    for mod in import_names(package, target_name):
        rel = f"{mod}/_version.py"
        data = _read(tree, rel, clues)
        if data is None:
            continue
        version, commit_id = parse_version_py(data)
        clue = _version_clue(rel, version)
        if commit_id is not None and not clue.commit:
            m = _LOCAL_G.match(commit_id.strip().lower()) or re.match(r"^([0-9a-f]{7,40})$", commit_id.strip().lower())
            if m:
                clue.commit = m.group(1)
        clues.append(clue)
    for info in _dist_infos(tree, package) if package else []:
        for name in ("METADATA", "direct_url.json"):
            rel = f"{info}/{name}"
            data = _read(tree, rel, clues)
            if data is None:
                continue
            if name == "METADATA":
                clues.append(_version_clue(rel, parse_metadata(data)))
            else:
                full = parse_direct_url(data)
                if full:
                    clues.append(Clue(rel, commit=full))
    data = _read(tree, "PKG-INFO", clues)
    if data is not None:
        clues.append(_version_clue("PKG-INFO", parse_metadata(data)))
    return clues


# ---- images --------------------------------------------------------------------------------------
def image_tag_clue(ref: str) -> Clue | None:
    """The commit an image reference's tag names: ``vllm/vllm-openai:nightly-<commit>`` (also
    ``cu130-nightly-<commit>``); None for other tags (``nightly``, ``v0.30.0``, ``latest``)."""
    name = ref.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" not in last:
        return None
    tag = last.rsplit(":", 1)[1].lower()
    m = _NIGHTLY_TAG.search(tag)
    return Clue(f"image tag {m.group(0).lstrip('-')}", commit=m.group(1)) if m else None


def parse_inspect(data: bytes) -> list[Clue]:
    """The commits ``docker image inspect`` names (its JSON: a list of image objects): the label
    ``ai.vllm.build.commit`` and the ``VLLM_BUILD_COMMIT`` variable of ``Config``. Raises
    ``InputError`` when the output is not that JSON."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"docker image inspect printed something that is not JSON ({exc})") from None
    if not isinstance(doc, list):
        raise InputError("docker image inspect printed JSON that is not a list of images")
    clues: list[Clue] = []
    for image in doc:
        config = image.get("Config") if isinstance(image, dict) else None
        if not isinstance(config, dict):
            continue
        labels = config.get("Labels")
        if isinstance(labels, dict) and LABEL in labels:
            value = labels[LABEL]
            value = value.strip().lower() if isinstance(value, str) else ""
            if SHA_RE.match(value):
                clues.append(Clue(f"docker label {LABEL}", commit=value))
            else:
                clues.append(Clue(f"docker label {LABEL}", note="its value is not a commit"))
        env = config.get("Env")
        for item in env if isinstance(env, list) else []:
            if isinstance(item, str) and item.startswith(ENV_COMMIT + "="):
                value = item.split("=", 1)[1].strip().lower()
                if SHA_RE.match(value):
                    clues.append(Clue(f"docker env {ENV_COMMIT}", commit=value))
    return clues


def inspect_image(ref: str, *, docker: str | None = None, timeout: float = DOCKER_TIMEOUT_S) -> list[Clue]:
    """``docker image inspect REF`` (the local image's metadata: no layer is pulled), parsed.

    Without a ``docker`` command, a note saying so. The output is read up to ``MAX_INSPECT``
    bytes, the command stopped after ``timeout`` seconds; a docker that cannot answer (no engine
    running, an unknown image) is a note with docker's first line, not an error."""
    source = "docker image inspect"
    if not ref or ref.startswith("-") or not ref.isprintable() or any(c.isspace() for c in ref):
        raise InputError(f"--image {ref!r} is not an image reference", hint="e.g. vllm/vllm-openai:nightly-<commit>")
    exe = docker or shutil.which("docker")
    if exe is None:
        return [Clue(source, note="no docker command here: only the image's tag was read")]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.run(
                [exe, "image", "inspect", ref], stdout=out, stderr=err, stdin=subprocess.DEVNULL, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            return [Clue(source, note=f"docker did not answer within {timeout:g} s")]
        except OSError as exc:
            raise EnvironmentFailure(f"cannot run {exe}: {exc.strerror or exc}") from exc
        out.seek(0)
        data = out.read(MAX_INSPECT + 1)
        err.seek(0)
        first = err.read(4096).decode("utf-8", "replace").strip().splitlines()
    if proc.returncode != 0:
        why = "".join(ch for ch in (first[0] if first else "") if ch.isprintable())[:200]
        return [Clue(source, note=f"docker exited {proc.returncode}" + (f": {why}" if why else ""))]
    if len(data) > MAX_INSPECT:
        return [Clue(source, note=f"its output is larger than {MAX_INSPECT} bytes: not read")]
    return parse_inspect(data) or [Clue(source, note=f"the image has no {LABEL} label")]


# ---- agreeing, resolving -------------------------------------------------------------------------
def combine(clues: list[Clue]) -> Detected:
    """What the clues say together: the first version, the longest commit hex (each other one
    must be a prefix of it; those that are not are listed in ``disagree``)."""
    d = Detected(clues=clues)
    d.version = next((c.version for c in clues if c.version), "")
    hexes = [c for c in clues if c.commit]
    if hexes:
        longest = max(hexes, key=lambda c: len(c.commit))
        d.commit = longest.commit
        d.disagree = [f"{c.source} names {c.commit}" for c in hexes if not longest.commit.startswith(c.commit)]
    return d


def resolve_prefix(prefix: str, *, base: str = "", repo: GitRepo | None = None) -> Resolved:
    """``prefix`` as a full commit: itself when it is 40 hex; in ``repo`` (``git rev-parse
    PREFIX^{commit}``; an ambiguous prefix lists its candidates, ``git rev-parse --disambiguate``);
    else the ledger's ``base`` when the prefix is a prefix of it. Never from a version number."""
    prefix = prefix.lower()
    if not SHA_RE.match(prefix):
        return Resolved(how=f"{prefix!r} is not a commit prefix")
    if repo is not None:
        sha = repo.rev(prefix)
        if sha and sha.startswith(prefix):
            return Resolved(sha, f"git rev-parse {prefix}^{{commit}} in {repo.git_dir}")
        candidates = _commits_named(repo, prefix)
        if len(candidates) > 1:
            return Resolved(how=f"{prefix} is ambiguous in {repo.git_dir}", candidates=candidates)
        if len(candidates) == 1:
            return Resolved(candidates[0], f"git rev-parse --disambiguate={prefix} in {repo.git_dir}")
    if FULL_SHA.match(prefix):
        return Resolved(prefix, "named in full")
    if base and FULL_SHA.match(base.lower()) and base.lower().startswith(prefix):
        return Resolved(base.lower(), "a prefix of the target's recorded base")
    where = f"not in {repo.git_dir}" if repo is not None else "no upstream clone given (--upstream PATH|URL)"
    return Resolved(how=f"{prefix} is not a prefix of the recorded base; {where}")


def _commits_named(repo: GitRepo, prefix: str) -> list[str]:
    """Every commit whose sha starts with ``prefix`` (``git rev-parse --disambiguate``)."""
    proc = repo.git("rev-parse", f"--disambiguate={prefix}", check=False)
    names = [s for s in proc.stdout.decode(errors="replace").split() if FULL_SHA.match(s)]
    return sorted(s for s in names if repo.git("cat-file", "-t", s, check=False).stdout.decode().strip() == "commit")


# ---- the image of another base -------------------------------------------------------------------
_TAG_NIGHTLY = re.compile(r"^(?P<pre>(?:[A-Za-z0-9_.]+-)?nightly-)(?P<hex>[0-9a-f]{7,40})$")


def image_for(
    base_image: str, *, base: str, base_version: str, base_commit: str, version: str, commit: str
) -> tuple[str, str]:
    """The stock image of another base, derived from the target's ``base_image`` when its tag names
    the recorded base: ``(image, "")``, or ``("", why not)``.

    ``…:nightly-<base commit>`` becomes ``…:nightly-<commit>``, ``…:v<base version>`` becomes
    ``…:v<version>``; a moving tag, a digest, a tag that does not name the base, or a tag of the
    other kind (nightly for a release, release for a commit) is refused with the reason."""
    if not base_image:
        return "", "the target names no base_image"
    same_commit = bool(commit and base_commit and commit == base_commit)
    if same_commit or (version and base_version and _same_release(version, base_version)):
        return base_image, ""
    if "@" in base_image:
        return "", f"base_image {base_image} is pinned by digest: the image of another base is not known"
    name, tag = _split_tag(base_image)
    if not tag:
        return "", f"base_image {base_image} has no tag naming the base: the image of another base is not known"
    m = _TAG_NIGHTLY.match(tag)
    if m:
        named = m.group("hex")
        if not (base_commit.startswith(named) or base.lower().startswith(named)):
            return "", f"base_image {base_image} names the nightly {named}, not the base {base}"
        if version or not commit:
            return "", (
                f"base_image {base_image} is a nightly of the base; the new base is a release ({version or 'no commit'}), "
                "which has no nightly tag of its own"
            )
        return f"{name}:{m.group('pre')}{commit}", ""
    bare = tag[1:] if tag[:1] == "v" else tag
    if base_version and _same_release(bare, base_version):
        if not version:
            return (
                "",
                f"base_image {base_image} is the release {base_version}; the new base {commit[:12]} is a commit between releases",
            )
        return f"{name}:{tag[:1] if tag[:1] == 'v' else ''}{version}", ""
    return "", (
        f"base_image {base_image} does not name the base {base} in its tag (neither v<version> nor nightly-<commit>): "
        "the image of another base is not known"
    )


def _split_tag(image: str) -> tuple[str, str]:
    head, slash, last = image.rpartition("/")
    if ":" not in last:
        return image, ""
    repo, tag = last.rsplit(":", 1)
    return f"{head}{slash}{repo}", tag


def _same_release(a: str, b: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b

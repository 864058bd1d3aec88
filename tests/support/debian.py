"""Debian source packages as a real-world corpus: real quilt series no one here wrote.

Downloads go through apt (``apt-get source --download-only PKG=VERSION``; the ``deb-src`` lines
are added by ``.ci/run``) into ``<patchset cache>/debian/<suite>/``; extracted trees are cached
under ``<patchset cache>/debian/trees/``. The reference result is ``dpkg-source -x`` (it applies
the series with ``patch -F0 -E``); the upstream tree is ``dpkg-source -x --skip-patches`` with
``debian/`` set aside. Used by ``tests/test_corpus.py`` and ``bench/corpus.py``.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.ownstate import material_root

# (package, has a trixie counterpart of the same source name)
PACKAGES = ["bash", "coreutils", "tar", "nginx", "openssh", "curl", "openssl", "vim", "python3.11", "glibc"]
SMALL = ["tar", "bash"]  # the default (CI) tier
IGNORED = ("debian", ".pc", "patches")  # never compared: packaging, quilt's state, the exported series


class Unavailable(Exception):
    """The package (or the tools) cannot be had here; the message says why."""


def _debian_dir() -> Path:
    """Debian sources the corpus tests fetch (apt checks them against the signed archive indexes), kept across sessions."""
    d = material_root() / "debian"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _run(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, env={**os.environ, **(env or {})})


def tools_missing() -> str | None:
    for tool in ("apt-get", "apt-cache", "dpkg-source", "patch"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


def versions(pkg: str, suite: str) -> list[str]:
    """The source versions ``suite`` lists for ``pkg`` (``apt-cache madison``), newest first. A suite's
    Sources index can list several (older ones stay for Built-Using)."""
    proc = _run(["apt-cache", "madison", pkg])
    found = []
    for line in proc.stdout.decode(errors="replace").splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) == 3 and parts[0] == pkg and parts[2].endswith("Sources") and f" {suite}/" in parts[2]:
            found.append(parts[1])
    if not found:
        raise Unavailable(f"no deb-src entry for {pkg} in {suite} (add `deb-src` lines for {suite}; see .ci/run)")

    def newer(a: str, b: str) -> int:
        return -1 if _run(["dpkg", "--compare-versions", a, "gt", b]).returncode == 0 else 1

    return sorted(dict.fromkeys(found), key=functools.cmp_to_key(newer))


def fetch(pkg: str, suite: str) -> tuple[Path, str]:
    """(``.dsc``, version) of the newest version of ``pkg`` in ``suite`` that the mirror serves,
    downloaded once into the cache."""
    where = _debian_dir() / suite
    where.mkdir(parents=True, exist_ok=True)
    listed = versions(pkg, suite)
    for ver in listed:  # the cache first: no download when any listed version is there
        dsc = where / f"{pkg}_{ver.split(':', 1)[-1]}.dsc"
        if dsc.is_file() and _complete(dsc):
            return dsc, ver
    errors = []
    for ver in listed:  # a mirror can lag behind its index: take the newest it serves
        dsc = where / f"{pkg}_{ver.split(':', 1)[-1]}.dsc"
        proc = _run(["apt-get", "source", "--download-only", "-qq", f"{pkg}={ver}"], cwd=where)
        if dsc.is_file() and _complete(dsc):
            return dsc, ver
        errors.append(f"{ver}: {(proc.stderr.decode(errors='replace').strip().splitlines() or ['?'])[-1]}")
    raise Unavailable(f"cannot download {pkg} ({suite}): " + "; ".join(errors))


def _complete(dsc: Path) -> bool:
    names = []
    in_files = False
    for line in dsc.read_text(errors="replace").splitlines():
        if line.startswith("Files:"):
            in_files = True
            continue
        if in_files:
            if not line.startswith(" "):
                break
            names.append(line.split()[-1])
    return bool(names) and all((dsc.parent / n).is_file() for n in names)


@dataclass
class Source:
    """One source package, extracted: the reference (patched) tree, the upstream tree, the series."""

    pkg: str
    suite: str
    version: str
    reference: Path  # dpkg-source -x
    upstream: Path  # dpkg-source -x --skip-patches, without debian/
    patches: Path  # debian/patches (series + bodies)
    extract_seconds: float = 0.0

    @property
    def series(self) -> list[str]:
        return series_names(self.patches / "series")


def series_names(series: Path) -> list[str]:
    out = []
    for raw in series.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            out.append(line.split()[0])
    return out


def extract(pkg: str, suite: str) -> Source:
    """Both trees of ``pkg`` in ``suite`` (extracted once, cached)."""
    dsc, ver = fetch(pkg, suite)
    ver = ver.split(":", 1)[-1]
    base = _debian_dir() / "trees" / f"{pkg}_{ver}"
    ref, up, pat = base / "ref", base / "upstream", base / "patches"
    done = base / ".done"
    t0 = time.perf_counter()
    if not done.is_file():
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir(parents=True)
        for args, dest in ((["-x"], ref), (["-x", "--skip-patches"], up)):
            proc = _run(["dpkg-source", "--no-check", *args, str(dsc), str(dest)])
            if proc.returncode != 0:
                raise Unavailable(f"dpkg-source {' '.join(args)} {dsc.name} failed: {proc.stderr.decode()[-300:]}")
        if (up / "debian" / "patches" / "series").is_file():
            shutil.copytree(up / "debian" / "patches", pat, symlinks=True)
        else:
            pat.mkdir()
            (pat / "series").write_text("")
        shutil.rmtree(up / "debian")
        done.write_text(ver)
    return Source(pkg, suite, ver, ref, up, pat, time.perf_counter() - t0)


def copy_tree(src: Path, dest: Path) -> Path:
    """A fresh copy of a tree (modes and symlinks kept)."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(src, dest, symlinks=True)
    return dest


def snapshot(root: Path) -> dict[str, tuple[str, bytes]]:
    """``{path: (kind+mode, content)}`` of every file and symlink, outside ``debian/``, ``.pc/`` and
    ``patches/``. Regular files compare by bytes and permission bits; symlinks by target."""
    out: dict[str, tuple[str, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root)
        if rel_dir == Path("."):
            dirnames[:] = [d for d in dirnames if d not in IGNORED]
        for name in filenames + [d for d in dirnames if (Path(dirpath) / d).is_symlink()]:
            p = Path(dirpath) / name
            rel = (rel_dir / name).as_posix()
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p).encode())
            elif stat.S_ISREG(st.st_mode):
                out[rel] = (oct(stat.S_IMODE(st.st_mode)), p.read_bytes())
    return out


def differences(a: dict[str, tuple[str, bytes]], b: dict[str, tuple[str, bytes]]) -> list[str]:
    """What differs between two snapshots, one line per path (empty: byte-identical, modes included)."""
    out = []
    for path in sorted(set(a) | set(b)):
        if path not in a:
            out.append(f"only in the reference: {path}")
        elif path not in b:
            out.append(f"only in ours: {path}")
        elif a[path][0] != b[path][0]:
            out.append(f"mode {a[path][0]} vs {b[path][0]}: {path}")
        elif a[path][1] != b[path][1]:
            out.append(f"content differs: {path}")
    return out


LEDGER = """schema = 1

[targets.deb]
upstream = "https://deb.debian.org/debian/{pkg}"
github = "debian/{pkg}"
strip = 1
base = "{base}"
"""


def new_ledger(root: Path, pkg: str, base: Path | str = "") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    path = root / "patches.toml"
    path.write_text(LEDGER.format(pkg=pkg, base=base))
    return path


@dataclass
class Timing:
    patchset: float
    gnu_patch: float
    quilt: float | None = None


@dataclass
class ApplyCheck:
    """What one package gave: the comparisons and the timings."""

    pkg: str
    version: str
    patches: int
    identical: bool
    diffs: list[str] = field(default_factory=list)
    quilt_identical: bool | None = None
    quilt_diffs: list[str] = field(default_factory=list)
    roundtrip_identical: bool = False
    roundtrip_diffs: list[str] = field(default_factory=list)
    timing: Timing | None = None


def gnu_patch_loop(tree: Path, patches: Path, names: list[str]) -> float:
    """Apply the series the way dpkg-source does (``patch -F0 -E -N -p1`` per patch); seconds."""
    t0 = time.perf_counter()
    for name in names:
        with open(patches / name, "rb") as fh:
            proc = subprocess.run(
                ["patch", "-s", "-t", "-F", "0", "-N", "-p1", "-u", "-V", "never", "-E", "--no-backup-if-mismatch"],
                cwd=tree,
                stdin=fh,
                capture_output=True,
            )
        if proc.returncode != 0:
            raise RuntimeError(f"GNU patch failed on {name}: {proc.stdout.decode(errors='replace')[-300:]}")
    return time.perf_counter() - t0


def quilt_push(tree: Path, series_dir: Path) -> tuple[float, str]:
    """``quilt push -a`` of ``series_dir`` (copied to ``tree/patches``), with ``-E`` as dpkg-source."""
    shutil.copytree(series_dir, tree / "patches")
    env = {"QUILT_PATCHES": "patches", "QUILT_PATCH_OPTS": "-E", "QUILTRC": os.devnull}
    t0 = time.perf_counter()
    proc = _run(["quilt", "--quiltrc", os.devnull, "push", "-a", "-q"], cwd=tree, env=env)
    took = time.perf_counter() - t0
    if proc.returncode not in (0,):
        return took, (proc.stdout + proc.stderr).decode(errors="replace")[-400:]
    return took, ""


def import_series(src: Source, root: Path, base: Path | str = "") -> Path:
    """A new ledger at ``root`` with ``src``'s series imported through ``patchset import``."""
    from patchset.commands.importer import import_sources

    led = new_ledger(root, src.pkg, base)
    import_sources(led, [src.patches], "deb")
    return led


def check_apply(src: Source, work: Path, *, quilt: bool = True, timing: bool = True) -> ApplyCheck:
    """Import, apply to the upstream tree, compare with ``dpkg-source -x``; export, ``quilt push -a``
    the export on a fresh tree, compare again; compare the exported bodies with the originals; time
    patchset against a GNU patch loop and quilt."""
    from patchset.commands.apply import run as run_apply
    from patchset.commands.apply.target import ApplyRun, TreeArg
    from patchset.commands.exporter import export
    from patchset.ledger.store import load_ledger

    work.mkdir(parents=True, exist_ok=True)
    led = import_series(src, work / "ledger")
    ledger = load_ledger(led)
    check = ApplyCheck(src.pkg, src.version, len(ledger.series("deb")), False)
    reference = snapshot(src.reference)
    ours = copy_tree(src.upstream, work / "ours")
    t0 = time.perf_counter()
    [report] = run_apply(ApplyRun(ledger, remove_empty=True), {"deb": TreeArg("tree", ours)})
    took = time.perf_counter() - t0
    if not report.ok:
        check.diffs = [f"apply: {report.outcome}: {report.message}"]
    else:
        check.diffs = differences(reference, snapshot(ours))
    check.identical = not check.diffs
    shutil.rmtree(ours)

    exported = work / "export"
    export(ledger, "quilt", exported, "deb")
    rt = []
    want = [ln.split("#", 1)[0].split() for ln in (src.patches / "series").read_text().splitlines()]
    got = [ln.split() for ln in (exported / "series").read_text().splitlines()]
    if [w for w in want if w] != got:
        rt.append("series file differs")
    for name in src.series:
        if (exported / name).read_bytes() != (src.patches / name).read_bytes():
            rt.append(f"body differs: {name}")
    check.roundtrip_identical, check.roundtrip_diffs = not rt, rt

    quilt_took = None
    if quilt and shutil.which("quilt"):
        qtree = copy_tree(src.upstream, work / "quilt")
        quilt_took, err = quilt_push(qtree, exported)
        check.quilt_diffs = [f"quilt push -a failed: {err}"] if err else differences(reference, snapshot(qtree))
        check.quilt_identical = not check.quilt_diffs
        shutil.rmtree(qtree)
    if timing:
        gtree = copy_tree(src.upstream, work / "gnu")
        gnu_took = gnu_patch_loop(gtree, src.patches, src.series)
        shutil.rmtree(gtree)
        check.timing = Timing(took, gnu_took, quilt_took)
    shutil.rmtree(exported)
    return check


# --------------------------------------------------------------------------- rebase vs Debian's own move

DEBIAN_KEPT, DEBIAN_REFRESHED, DEBIAN_DROPPED = "kept", "refreshed", "dropped"


@dataclass
class RebaseCheck:
    pkg: str
    old: str
    new: str
    rows: list[tuple[str, str, str]] = field(default_factory=list)  # (patch, patchset verdict, Debian's action)
    false_upstream: list[str] = field(default_factory=list)
    compared_files: int = 0
    equal_files: int = 0
    unequal: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def table(self) -> dict[tuple[str, str], int]:
        out: dict[tuple[str, str], int] = {}
        for _, verdict, action in self.rows:
            out[(verdict, action)] = out.get((verdict, action), 0) + 1
        return out


def check_rebase(old: Source, new: Source, work: Path) -> RebaseCheck:
    """Rebase ``old``'s series onto ``new``'s upstream tree and hold the result against what Debian's
    maintainers did (``new``'s series): what patchset calls already upstream must be a patch Debian
    dropped; where Debian kept a patch unchanged, the carried files must equal ``new``'s."""
    from patchset.engine.results import SeriesItem
    from patchset.engine.tree import apply_series
    from patchset.ledger.store import load_ledger
    from patchset.patchfmt.diffs import files_touched
    from patchset.rebase.session import RebaseRun, rebase, skip

    check = RebaseCheck(old.pkg, old.version, new.version)
    led = import_series(old, work / "ledger", base=old.upstream)
    ids = {p.id: Path(p.body_path).relative_to("patchset/series/deb").as_posix() for p in load_ledger(led).patches}
    t0 = time.perf_counter()
    # stop at each conflict and set it aside (`rebase --skip`: held), carrying the rest, as a human would
    rep = rebase(RebaseRun(led, str(new.upstream), target="deb", interactive=True))
    while rep.status == "stopped":
        rep = skip(led)
    verdicts = {r.id: ("conflict" if r.verdict == "skipped" else r.verdict) for r in rep.patches}
    check.seconds = time.perf_counter() - t0
    kept = set(new.series)
    for pid, verdict in verdicts.items():
        name = ids[pid]
        if name not in kept:
            action = DEBIAN_DROPPED
        elif (old.patches / name).read_bytes() == (new.patches / name).read_bytes():
            action = DEBIAN_KEPT
        else:
            action = DEBIAN_REFRESHED
        check.rows.append((name, verdict, action))
        if verdict in ("already-upstream", "superseded") and action != DEBIAN_DROPPED:
            check.false_upstream.append(name)
    # the carried series on the new upstream tree vs Debian's own result there
    ledger = load_ledger(led)
    carried = [p for p in ledger.series("deb")]
    tree = copy_tree(new.upstream, work / "carried")
    items = [
        SeriesItem(p.id, ledger.body_file(p).read_bytes(), p.source.strip if p.source.strip is not None else 1)
        for p in carried
    ]
    res = apply_series(tree, items, remove_empty=True)
    if not res.ok:
        check.unequal.append(f"the carried series does not apply: {res.failed_patch}")
        return check
    ours_touch: dict[str, set[str]] = {}
    for p, item in zip(carried, items, strict=True):
        for f in files_touched(item.body, item.strip):
            ours_touch.setdefault(f, set()).add(ids[p.id])
    theirs_touch: dict[str, set[str]] = {}
    for name in new.series:
        try:
            for f in files_touched((new.patches / name).read_bytes(), 1):
                theirs_touch.setdefault(f, set()).add(name)
        except Exception:  # a body patchset cannot read: its files are simply not compared
            continue
    unchanged = {n for n, v, a in check.rows if v == "carried" and a == DEBIAN_KEPT}
    for f, names in sorted(ours_touch.items()):
        if not (names & unchanged) or theirs_touch.get(f) != names:
            continue  # only files whose patches are the same on both sides
        check.compared_files += 1
        a, b = tree / f, new.reference / f
        if (a.read_bytes() if a.exists() else None) == (b.read_bytes() if b.exists() else None):
            check.equal_files += 1
        else:
            check.unequal.append(f)
    shutil.rmtree(tree)
    return check

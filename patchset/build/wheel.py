"""``patchset build wheel``: a wheel with the series applied, that pip installs and can undo.

Patching files after ``pip install`` leaves a RECORD that no longer matches. This writes a new
wheel: the series applied to the files the wheel installs, a local version label naming the series
(``+ps.<short hash of the lock>``), RECORD rewritten, every other member unchanged. PyPA's
libraries handle the format (``wheel`` reads and writes, ``installer`` checks the result,
``packaging`` the names). The input wheel is data: member names are confined, links refused and
sizes bounded (``archives.check_zip``) before a byte is inflated; unchanged members are streamed
(docs/build.md).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from installer.sources import WheelFile as WheelSource
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version
from wheel.wheelfile import WheelError, WheelFile, urlsafe_b64encode

from patchset import atomic, outdir
from patchset.build.series import BuildReport, SeriesFacts, series_facts
from patchset.commands.apply.target import ApplyRun, TreeKind
from patchset.commands.apply.tree import apply_to_tree
from patchset.confine import check_relative, confine
from patchset.errors import EnvironmentFailure, InputError, UnsafePathError
from patchset.ledger.model import Ledger, Target
from patchset.progress import Progress
from patchset.upstream.archives import check_zip

SIGNATURES = ("RECORD.jws", "RECORD.p7s")  # signatures of the old RECORD: meaningless for the new one
_BLOCK = 1 << 20  # bytes copied at a time between members


@dataclass
class WheelBuild(BuildReport):
    """What ``build wheel`` did (or refused to do) for one target."""

    target: str
    source: str
    outcome: str  # built | failed | mismatch | already | partial
    message: str
    version: str = ""
    new_version: str = ""
    label: str = ""
    wheel: str | None = None
    patched: list[dict] = field(default_factory=list)  # {path, sha256, size, op}
    mismatched: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # members left out (signatures of the old RECORD)
    hashes: dict[str, dict[str, str | None]] = field(default_factory=dict)  # mismatched path -> expected, actual


# --------------------------------------------------------------------------- names


def new_names(filename: str, label: str) -> tuple[str, str, str, str]:
    """(old version, new version, new wheel filename, dist-info prefix name) for ``filename``.

    ``label`` replaces any local label the wheel already has (a patched wheel is rebuilt from the
    stock one, never stacked).
    """
    try:
        _name, version, _build, _tags = parse_wheel_filename(filename)
    except InvalidWheelFilename as exc:
        raise InputError(f"{filename}: not a wheel file name ({exc})") from None
    new_version = Version(f"{version.public}+{label}")
    stem = filename[: -len(".whl")].split("-")
    # PEP 427: name-version[-build]-python-abi-platform; keep the name and tags exactly as given
    return str(version), str(new_version), "-".join([stem[0], str(new_version), *stem[2:]]) + ".whl", stem[0]


def _rewrite_metadata(data: bytes, old: str, new: str, where: str) -> bytes:
    """METADATA with its ``Version:`` header (in the header block) set to ``new``; nothing else moves."""
    lines = data.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.strip() == b"":
            break  # end of the headers: the rest is the description
        if line.lower().startswith(b"version:"):
            value = line.split(b":", 1)[1].strip().decode("utf-8", "replace")
            if Version(value) != Version(old):
                raise InputError(f"{where}: Version {value} does not match the wheel's file name ({old})")
            ending = line[len(line.rstrip(b"\r\n")) :]
            lines[i] = b"Version: " + new.encode() + ending
            return b"".join(lines)
    raise InputError(f"{where}: no Version header", hint="the wheel's METADATA is malformed")


def _member_info(src: zipfile.ZipInfo, name: str, mode: int | None = None) -> zipfile.ZipInfo:
    """A fresh entry carrying the original's name (or its new name), time, mode and compression."""
    info = zipfile.ZipInfo(name, date_time=src.date_time)
    info.compress_type = src.compress_type
    info.create_system = src.create_system
    info.external_attr = src.external_attr
    if mode is not None:
        info.external_attr = ((src.external_attr >> 16) & ~0o7777 | (mode & 0o7777)) << 16
    return info


class _Writer(WheelFile):
    """``WheelFile`` that writes RECORD with the original RECORD's entry time and mode (so the
    same inputs give the same bytes) instead of the clock."""

    record_template: zipfile.ZipInfo | None = None

    def writestr(self, zinfo_or_arcname, data, compress_type=None):
        name = zinfo_or_arcname.filename if isinstance(zinfo_or_arcname, zipfile.ZipInfo) else zinfo_or_arcname
        if name == self.record_path and self.record_template is not None:
            zinfo_or_arcname = _member_info(self.record_template, self.record_path)
        super().writestr(zinfo_or_arcname, data, compress_type)

    def copy_member(self, src: zipfile.ZipFile, info: zipfile.ZipInfo, dest: zipfile.ZipInfo) -> None:
        """Copy the member ``info`` of ``src`` (read through ``WheelFile``: checked against its
        RECORD line as it is read) into this archive as ``dest``, a block at a time, and record
        its hash and size for the new RECORD, as ``writestr`` does."""
        digest, size = hashlib.sha256(), 0
        dest.file_size = info.file_size  # known up front: zipfile decides on zip64 from it
        with src.open(info) as fin, zipfile.ZipFile.open(self, dest, "w") as fout:
            while block := fin.read(_BLOCK):
                fout.write(block)
                digest.update(block)
                size += len(block)
        self._file_hashes[dest.filename] = ("sha256", urlsafe_b64encode(digest.digest()).decode("ascii"))
        self._file_sizes[dest.filename] = size


# --------------------------------------------------------------------------- the build


def _validate(path: Path, what: str) -> str:
    """installer's RECORD validation (names, hashes, sizes); returns the dist-info directory."""
    try:
        with WheelSource.open(path) as src:
            src.validate_record()
            return src.dist_info_dir
    except zipfile.BadZipFile as exc:
        raise InputError(f"{path}: not a zip archive ({exc})") from None
    except ValueError as exc:  # installer's validation errors are ValueErrors
        issues = getattr(exc, "issues", None) or [str(exc)]
        raise InputError(
            f"{what} {path} does not match its RECORD: " + "; ".join(issues[:3]) + (" …" if len(issues) > 3 else ""),
            hint="the wheel is damaged: download it again",
        ) from None


@contextmanager
def _source(path: Path) -> Iterator[WheelFile]:
    """The input wheel, read through ``WheelFile``: every member read is checked against its
    RECORD line (a member RECORD does not name is refused), so the rewrite itself validates it."""
    try:
        with WheelFile(path) as zf:
            yield zf
    except (WheelError, zipfile.BadZipFile) as exc:
        raise InputError(
            f"the wheel {path} does not match its RECORD: {exc}", hint="the wheel is damaged: download it again"
        ) from None


def check_members(path: Path) -> None:
    """Refuse the wheel at ``path`` whole when it is past the archive limits (``check_zip``) or any
    member is hostile: a name that is absolute, climbs out, names ``.git`` or patchset's state
    (``check_relative``), appears twice, or a member that is not a regular file or a directory (a
    symlink, a device). Reads only the zip's directory."""
    infos = check_zip(path)
    seen: set[str] = set()
    hint = "the wheel is malformed or hostile: use one from the package index or your own build"
    for info in infos:
        what = f"the wheel {path}: member"
        try:
            name = check_relative(info.filename, what=what)
        except UnsafePathError as exc:
            raise UnsafePathError(f"{exc.message}; nothing was written", hint=hint) from None
        kind = stat.S_IFMT(info.external_attr >> 16)
        if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
            shown = "a symbolic link" if kind == stat.S_IFLNK else f"not a regular file (type {oct(kind)})"
            raise UnsafePathError(f"{what} {info.filename!r} is {shown}; nothing was written", hint=hint)
        if name in seen:
            raise UnsafePathError(f"{what} {info.filename!r} appears twice; nothing was written", hint=hint)
        seen.add(name)


def _extract(zf: zipfile.ZipFile, names: set[str], wanted: list[str], into: Path) -> None:
    for rel in wanted:
        if rel in names:
            dest = confine(into, rel, what="the series' file")
            dest.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(rel) as src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out, _BLOCK)


@dataclass
class _Job:
    """One wheel being rebuilt: the stock wheel, its names old and new, and what the series made of it."""

    source: Path
    old_info: str  # the stock wheel's .dist-info directory
    version: str
    new_version: str
    new_file: str
    dist_name: str
    changed: dict[str, str | None] = field(default_factory=dict)  # installed path -> sha256 after (None: removed)
    contents: dict[str, bytes] = field(default_factory=dict)
    modes: dict[str, int | None] = field(default_factory=dict)

    @property
    def new_info(self) -> str:
        return f"{self.dist_name}-{self.new_version}.dist-info"


def build_wheel(
    ledger: Ledger,
    target: Target,
    wheel_path: Path,
    out_dir: Path,
    *,
    progress: Progress | None = None,
) -> WheelBuild:
    """Apply ``target``'s series to ``wheel_path`` and write the patched wheel into ``out_dir``.

    Nothing is written unless the series applies with zero fuzz and every patched file matches the
    lock; the report says why otherwise (outcome ``failed``/``mismatch``/``already``/``partial``).
    """
    steps = 3

    def say(what: str, done: int) -> None:
        if progress is not None:
            progress(what, done, steps)

    if not wheel_path.is_file():
        raise InputError(f"--wheel {wheel_path}: no such file")
    outdir.check(out_dir, option="--out")
    facts = series_facts(ledger, target)
    check_members(wheel_path)
    version, new_version, new_file, dist_name = new_names(wheel_path.name, facts.label)
    report = WheelBuild(target.name, str(wheel_path), "failed", "", version, new_version, facts.label)
    job = _Job(wheel_path, "", version, new_version, new_file, dist_name)
    say(f"apply {target.name} ({len(facts.touched)} files)", 0)
    if not _apply(ledger, target, job, facts, report):
        return report
    final = _write_checked(job, out_dir, facts, report, say)
    if final is None:
        return report
    report.wheel = str(final)
    report.outcome = "built"
    report.patched = [
        {
            "path": p,
            "sha256": sha,
            "size": len(job.contents[p]) if sha else None,
            "op": "removed" if sha is None else "patched",
        }
        for p, sha in sorted(job.changed.items())
    ]
    report.message = (
        f"{final.name}: {len(ledger.series(target.name))} patches, {len(job.changed)} file(s) changed, "
        "every patched file matches the lock"
    )
    return report


def _apply(ledger: Ledger, target: Target, job: _Job, facts: SeriesFacts, report: WheelBuild) -> bool:
    """The series onto the files of the wheel it touches, in a scratch directory: what it changed
    goes into ``job``; False (and the reason in ``report``) when it does not apply."""
    with tempfile.TemporaryDirectory(prefix="patchset-wheel-") as scratch:
        tree = Path(scratch) / "tree"
        tree.mkdir()
        with _source(job.source) as zf:
            names = set(zf.namelist())
            job.old_info = zf.dist_info_path
            _extract(zf, names, facts.touched, tree)
        applied = apply_to_tree(ApplyRun(ledger), target, tree, "installed", TreeKind.WHEEL)
        if applied.outcome != "applied":
            report.outcome = applied.outcome if applied.outcome in ("mismatch", "already", "partial") else "failed"
            report.mismatched = applied.mismatched
            report.hashes = dict(applied.hashes)
            detail = applied.result.patches if applied.result else []
            failed = next((p.describe() for p in detail if p.status == "failed"), "")
            report.message = (
                f"{job.source.name}: {applied.message}" + (f"\n{failed}" if failed else "") + "; no wheel was written"
            )
            return False
        assert applied.result is not None
        job.changed = applied.result.files
        job.modes = applied.result.modes
        job.contents = {p: (tree / p).read_bytes() for p, sha in job.changed.items() if sha is not None}
    return True


def _write_checked(
    job: _Job, out_dir: Path, facts: SeriesFacts, report: WheelBuild, say: Callable[[str, int], None]
) -> Path | None:
    """The new wheel written under a temporary name in ``out_dir``, validated, read back against the
    lock and only then renamed into place; None (the reason in ``report``) when it does not match."""
    created_out = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / job.new_file
    work = Path(tempfile.mkdtemp(prefix=".patchset-build-", dir=out_dir))
    try:
        tmp = work / job.new_file  # WheelFile derives the dist-info name from the file name
        say(f"write {job.new_file}", 1)
        _write(job, tmp, report)
        say(f"check {job.new_file}", 2)
        new_info = _validate(tmp, "the patched wheel")
        _check_against_lock(tmp, facts, report)
        if report.mismatched:
            report.outcome = "mismatch"
            report.message = (
                f"{len(report.mismatched)} file(s) in the written wheel do not match the lock; no wheel was written"
            )
            return None
        if new_info != job.new_info:  # pragma: no cover - guards the renaming above
            raise EnvironmentFailure(f"wrote {new_info}, expected {job.new_info}")
        atomic.fsync_path(tmp)
        os.replace(tmp, final)
        atomic.fsync_path(final.parent, directory=True)
        outdir.mark(out_dir, command="build wheel")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if created_out and not final.exists():
            shutil.rmtree(out_dir, ignore_errors=True)
    return final


def _write(job: _Job, dest: Path, report: WheelBuild) -> None:
    """Write the new archive to ``dest``: member order kept, new files just before the
    ``.dist-info`` members, RECORD last (written by ``WheelFile`` on close)."""
    old_info, new_info, changed, contents, modes = job.old_info, job.new_info, job.changed, job.contents, job.modes
    prefix = old_info + "/"
    with _source(job.source) as zin, _Writer(dest, "w") as out:
        infos = zin.infolist()
        have = {i.filename for i in infos}
        pending = sorted(p for p, sha in changed.items() if sha is not None and p not in have)
        template = next((i for i in infos if i.filename.startswith(prefix)), infos[-1])

        def add_new() -> None:
            for p in pending:
                out.writestr(_member_info(template, p, modes.get(p) or 0o644), contents[p])
            pending.clear()

        for info in infos:
            name = info.filename
            if name.startswith(prefix):
                add_new()
            if name == prefix + "RECORD":
                out.record_template = info
                continue
            if name.startswith(prefix) and name.rsplit("/", 1)[-1] in SIGNATURES:
                report.dropped.append(name)
                continue
            new_name = new_info + name[len(old_info) :] if name.startswith(prefix) else name
            if name.endswith("/"):  # a directory entry: no RECORD line
                zipfile.ZipFile.writestr(out, _member_info(info, new_name), b"")
            elif name in changed:
                if changed[name] is not None:  # None: the series removes it
                    out.writestr(_member_info(info, new_name, modes.get(name)), contents[name])
            elif name == prefix + "METADATA":
                data = _rewrite_metadata(zin.read(info), job.version, job.new_version, f"{job.source.name}: {name}")
                out.writestr(_member_info(info, new_name), data)
            else:
                out.copy_member(zin, info, _member_info(info, new_name))
        add_new()


def _check_against_lock(path: Path, facts: SeriesFacts, report: WheelBuild) -> None:
    """Read every locked file back from the written archive and compare with the lock; a file
    that differs is reported with both sha256 (``report.hashes``)."""
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
        for rel, sha in facts.expected.items():
            got = _member_sha256(zf, rel) if rel in names else None
            if got != sha:
                report.mismatched.append(rel)
                report.hashes[rel] = {"expected": sha, "actual": got}


def _member_sha256(zf: zipfile.ZipFile, name: str) -> str:
    digest = hashlib.sha256()
    with zf.open(name) as fh:
        while block := fh.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def fetch_wheel(spec: str, platform: str | None = None, *, progress: Progress | None = None) -> Path:
    """The release's wheel from the package index (cached): a pure wheel, else the wheel of
    ``platform`` (default this machine's, see ``releases.download_wheel``). ``progress`` gets
    the bytes of a download."""
    from patchset.upstream.releases import download_wheel  # the index client (~10 ms): only a download loads it

    return download_wheel(spec, platform, progress=progress)

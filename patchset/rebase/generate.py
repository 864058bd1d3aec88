"""Generated patches: an anchored edit script run on a private copy of a base, its result a diff.

Many Spark build repositories carry vLLM changes as scripts that replace an exact anchor in an
installed file. ``[patch.generate]`` keeps such a script as it is: ``command`` runs on a private
copy of the base (``{root}``), never on the user's tree, and the files it changed become the body.
On a rebase it runs again on the new base; a failure (the anchor is gone) is a conflict with the
script's own message.

The command is untrusted code: it runs only with the user's consent (``patchset.ledger.consent``),
with a minimal environment, in a network namespace of its own where ``unshare -rn`` works, in an
empty scratch directory, bounded in time and output; a command that touched the ledger directory
or left a symlink under ``{root}`` is refused. ``bind`` mounts the copy at an absolute path in a
private mount namespace (bubblewrap or ``unshare``), never the real path (docs/security.md).
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import stat
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from patchset.confine import check_relative, confine, regular_file
from patchset.errors import EnvironmentFailure, InputError, UnsafePathError
from patchset.ledger.model import GENERATE_PLACEHOLDERS, Generate, Target
from patchset.rebase.regen import FileChange
from patchset.text import read_tail, terminal
from patchset.upstream.bases import Bases
from patchset.upstream.stock import materialise_commit

ROOT, LEDGER = (f"{{{name}}}" for name in GENERATE_PLACEHOLDERS)  # checked at load (ledger.schema)
MAX_OUTPUT = 64 << 10  # what is kept of a command's stdout/stderr (the tail)
MAX_LEDGER_ENTRIES = 200_000  # a ledger directory larger than this is not snapshotted entry by entry
_IGNORED_DIRS = {"__pycache__"}
_IGNORED_SUFFIXES = (".pyc", ".pyo", ".orig")  # bytecode; the backup GNU patch leaves after a fuzzy hunk
_EPOCH = 315532800  # 1980-01-01: every file of the copy gets this mtime, so a write always shows


class ScriptFailed(InputError):
    """A generate command exited non-zero (or was killed): its own message is in ``output``."""

    def __init__(self, message: str, output: str, *, hint: str | None = None) -> None:
        self.output = output
        super().__init__(message + (f":\n{output}" if output else ""), hint=hint)


@dataclass(frozen=True)
class Generated:
    """What a command changed under ``{root}``: one change per file, in path order."""

    changes: list[FileChange]
    output: str  # the tail of what the command printed
    ignored: list[str]  # bytecode and patch backups (.orig) left out of the diff


def expand(command: list[str], root: Path, ledger: Path) -> list[str]:
    return [a.replace(ROOT, str(root)).replace(LEDGER, str(ledger)) for a in command]


# --------------------------------------------------------------------------- snapshots


def _stat_tree(root: Path, limit: int) -> dict[str, tuple[int, int, int, str]] | None:
    """``{rel: (size, mtime_ns, mode, link)}`` of every entry under ``root``; None past ``limit``."""
    out: dict[str, tuple[int, int, int, str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            full = os.path.join(dirpath, name)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            link = os.readlink(full) if stat.S_ISLNK(st.st_mode) else ""
            size = 0 if stat.S_ISDIR(st.st_mode) else st.st_size
            mtime = 0 if stat.S_ISDIR(st.st_mode) else st.st_mtime_ns
            out[os.path.relpath(full, root)] = (size, mtime, st.st_mode, link)
            if len(out) > limit:
                return None
    return out


def _changed(before: dict[str, tuple[int, int, int, str]], after: dict[str, tuple[int, int, int, str]]) -> list[str]:
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))


# --------------------------------------------------------------------------- isolation for `bind`


# Mounts ``$1`` (the copy) at ``$2`` when ``$2`` does not exist: its deepest existing ancestor ``$3``
# is covered by a tmpfs holding binds of what ``$3`` held (kept reachable at ``$4``), and ``$2`` is
# made on that tmpfs. Only in the private mount namespace: the machine's directories are untouched.
_MAKE_MOUNT_POINT = """set -e
root=$1 bind=$2 anc=$3 keep=$4; shift 4
mount --rbind "$anc" "$keep"
mount -t tmpfs tmpfs "$anc"
for e in "$keep"/* "$keep"/.[!.]* "$keep"/..?*; do
  [ -e "$e" ] || [ -L "$e" ] || continue
  n=${e##*/}
  if [ -L "$e" ]; then cp -P "$e" "$anc/$n"
  elif [ -d "$e" ]; then mkdir "$anc/$n"; mount --rbind "$e" "$anc/$n"
  else : > "$anc/$n"; mount --bind "$e" "$anc/$n"; fi
done
mkdir -p "$bind"
mount --bind "$root" "$bind"
exec "$@"
"""


def _bind_prefix(root: Path, bind: str) -> list[str]:
    """argv that runs the rest with ``root`` mounted at ``bind`` in a private mount namespace (a
    ``bind`` the machine lacks is made there, under ``unshare``)."""
    exists = os.path.isdir(bind)
    net = not network_missing_reason()
    if exists and shutil.which("bwrap"):
        return ["bwrap", "--dev-bind", "/", "/", "--bind", str(root), bind, *(["--unshare-net"] if net else []), "--"]
    unshare = shutil.which("unshare")
    if unshare:
        probe = subprocess.run(
            [unshare, "--user", "--map-root-user", "--mount", "true"], capture_output=True, timeout=30
        )
        if probe.returncode == 0:
            flags = ["--user", "--map-root-user", "--mount", *(["--net"] if net else [])]
            if exists:
                script = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'
                return [unshare, *flags, "--", "sh", "-c", script, "sh", str(root), bind]
            anc = Path(bind)
            while not anc.is_dir():
                anc = anc.parent
            if anc != Path("/") and not anc.is_symlink():
                keep = root.parent / "bind-keep"
                keep.mkdir(exist_ok=True)
                return [
                    unshare,
                    *flags,
                    "--",
                    "sh",
                    "-c",
                    _MAKE_MOUNT_POINT,
                    "sh",
                    str(root),
                    bind,
                    str(anc),
                    str(keep),
                ]
    raise EnvironmentFailure(
        f"bind = {bind!r} needs bubblewrap (bwrap) or unshare with user namespaces"
        + ("" if exists else " (unshare, to make the directory, which this machine lacks, in a private namespace)")
        + ", and that does not work here",
        hint="install bubblewrap, or rewrite the script's path as {root}/… (patchset never runs it against the real path)",
    )


# --------------------------------------------------------------------------- what a command is given

_ENV_KEPT = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ")


@functools.cache
def network_missing_reason() -> str | None:
    """None when a command can run in a network namespace of its own (``unshare -rn`` works
    here); else why not, said in the command's output."""
    unshare = shutil.which("unshare")
    if not unshare:
        return "unshare is not installed"
    try:
        probe = subprocess.run([unshare, "-rn", "true"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare -rn cannot run: {exc}"
    return None if probe.returncode == 0 else "unshare -rn does not work here (no user namespaces)"


def script_environment(root: Path, ledger: Path) -> dict[str, str]:
    """A minimal environment (none of the user's secrets): PATH, HOME, the locale, and the
    placeholders as ``PATCHSET_ROOT`` and ``PATCHSET_LEDGER_DIR``."""
    env = {k: os.environ[k] for k in _ENV_KEPT if k in os.environ}
    env.setdefault("PATH", os.defpath)
    env.setdefault("LANG", "C.UTF-8")
    env.update({"PATCHSET_ROOT": str(root), "PATCHSET_LEDGER_DIR": str(ledger), "PYTHONDONTWRITEBYTECODE": "1"})
    return env


def _isolated(argv: list[str], bound: bool) -> tuple[list[str], str]:
    """``argv`` in a network namespace of its own when the platform allows it (a ``bind`` prefix
    makes one itself); else ``argv`` and a note for the output."""
    reason = network_missing_reason()
    if reason:
        return argv, f"patchset: the command ran with the network ({reason})"
    if bound:
        return argv, ""
    unshare = shutil.which("unshare") or "unshare"
    return [unshare, "-rn", "--", *argv], ""


# --------------------------------------------------------------------------- running


def _tail(path: Path) -> str:
    text, cut = read_tail(path, MAX_OUTPUT)
    return ("…" if cut else "") + "\n".join(terminal(ln, block=True) for ln in text.rstrip("\n").splitlines())


def _normalise_times(root: Path) -> None:
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            full = os.path.join(dirpath, name)
            if not os.path.islink(full):
                os.utime(full, (_EPOCH, _EPOCH))


def _scratch_dir() -> str | None:
    """Memory-backed scratch space when the machine has it (a whole base is thousands of small
    files: written to tmpfs in a fraction of the time), else the default temporary directory."""
    shm = "/dev/shm"
    try:
        st = os.statvfs(shm)
    except OSError:
        return None
    return shm if os.access(shm, os.W_OK) and st.f_bavail * st.f_frsize > 2 << 30 else None


class Workspace:
    """A private copy of one base, written once and reused: each run starts from the base plus the
    world's changes (``set_world``), and what a run changed is put back afterwards, so a rebase
    that runs several generated patches copies the (8,000-file) base only once."""

    def __init__(self, make_base: Callable[[Path], None], base_read: Callable[[str], bytes | None], target: Target):
        self._tmp = Path(tempfile.mkdtemp(prefix="patchset-generate-", dir=_scratch_dir()))
        self.root, self.work = self._tmp / "root", self._tmp / "work"
        self.make_base, self.base_read, self.target = make_base, base_read, target
        self._made = False
        self._world: dict[str, tuple[bytes | None, str | None]] = {}

    def _rel(self, key: str) -> str:
        return self.target.tree_path(key, self.target.layout)

    def _key(self, rel: str) -> str:
        return self.target.key_in(rel, self.target.layout)

    def _put(self, rel: str, data: bytes | None, mode: str | None) -> None:
        f = self.root / rel
        if f.is_symlink() or f.is_file():
            f.unlink()
        elif f.is_dir():
            shutil.rmtree(f)
        if data is None:
            return
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(data)
        os.chmod(f, 0o755 if mode == "100755" else 0o644)
        os.utime(f, (_EPOCH, _EPOCH))

    def set_world(self, changes: dict[str, tuple[bytes | None, str | None]]) -> None:
        """The copy becomes the base with ``changes`` (source-layout path -> bytes or None, mode)."""
        if not self._made:
            if self.root.exists():
                shutil.rmtree(self.root)
            self.make_base(self.root)
            _normalise_times(self.root)
            self.work.mkdir(exist_ok=True)
            self._made, self._world = True, {}
        for key in set(self._world) - set(changes):
            self._put(self._rel(key), self.base_read(key), None)
        for key, (data, mode) in changes.items():
            if self._world.get(key) != (data, mode):
                self._put(self._rel(key), data, mode)
        self._world = dict(changes)

    def content(self, key: str) -> bytes | None:
        """What the copy holds at ``key`` before a run: the world's change, else the base's file."""
        return self._world[key][0] if key in self._world else self.base_read(key)

    def _reset(self, snap: dict[str, tuple[int, int, int, str]]) -> None:
        """Put back what a run changed (new entries removed, changed or removed files restored)."""
        try:
            after = _stat_tree(self.root, 10**7) or {}
            for rel in sorted(set(after) - set(snap), key=len):
                f = self.root / rel
                if f.is_symlink() or f.is_file():
                    f.unlink()
                elif f.is_dir():
                    shutil.rmtree(f, ignore_errors=True)
            for rel in _changed(snap, after):
                old = snap.get(rel)
                if old is not None and not stat.S_ISDIR(old[2]):
                    key = self._key(rel.replace(os.sep, "/"))
                    mode = self._world[key][1] if key in self._world else ("100755" if old[2] & 0o111 else "100644")
                    self._put(rel, self.content(key), mode)
            for name in os.listdir(self.work):
                left = self.work / name
                if left.is_dir() and not left.is_symlink():
                    shutil.rmtree(left, ignore_errors=True)
                else:
                    left.unlink()
        except OSError:
            self._made = False  # made again from the base next time

    def close(self) -> None:
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_generate(
    gen: Generate,
    ledger_root: Path,
    ws: Workspace,
    *,
    label: str = "the base",
) -> Generated:
    """Run ``gen.command`` on the workspace's copy (as ``set_world`` left it) and return what it
    changed, as file changes in the source layout. ScriptFailed when it exits non-zero or times
    out; InputError when it touched the ledger directory, left files in its working directory or
    left symlinks under ``{root}``. The copy is put back either way."""
    if not gen.command:
        raise InputError("the generate command is empty")
    if not ws._made:
        ws.set_world({})
    ledger_root = ledger_root.resolve()
    root, work = ws.root, ws.work
    snap = _stat_tree(root, 10**7) or {}
    try:
        ledger_snap = _stat_tree(ledger_root, MAX_LEDGER_ENTRIES)
        shown_root = Path(gen.bind) if gen.bind else root
        argv = expand(gen.command, shown_root, ledger_root)
        env = script_environment(shown_root, ledger_root)
        if ROOT not in gen.command[0] and not shutil.which(
            argv[0], path=env["PATH"]
        ):  # said here: under unshare it is unshare's exit status
            raise InputError(
                f"the generate command's program {argv[0]!r} is not found", hint="check the first word of the command"
            )
        if gen.bind:
            argv = _bind_prefix(root, gen.bind) + argv
        argv, note = _isolated(argv, bool(gen.bind))
        out_path = ws._tmp / "output"
        try:
            with open(out_path, "wb") as out:
                proc = subprocess.Popen(
                    argv, cwd=work, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env, start_new_session=True
                )
                try:
                    code = proc.wait(timeout=gen.timeout)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    raise ScriptFailed(
                        f"the generate command did not finish within {gen.timeout} s on {label} (it was killed)",
                        "\n".join(x for x in (note, _tail(out_path)) if x),
                        hint="raise `timeout` in [patch.generate] if it is only slow",
                    ) from None
        except FileNotFoundError:
            raise InputError(
                f"the generate command's program {argv[0]!r} is not found", hint="check the first word of the command"
            ) from None
        output = "\n".join(x for x in (note, _tail(out_path)) if x)
        if ledger_snap is not None:
            touched = _changed(ledger_snap, _stat_tree(ledger_root, MAX_LEDGER_ENTRIES) or {})
            if touched:
                raise InputError(
                    f"the generate command changed files outside {{root}}, in the ledger directory {ledger_root}: "
                    + ", ".join(terminal(t) for t in touched[:10])
                    + (" …" if len(touched) > 10 else ""),
                    hint="a script may write only below {root}; patchset did not undo what it did there",
                )
        left = sorted(os.listdir(work))
        if left:
            raise InputError(
                f"the generate command left files in its working directory: {', '.join(terminal(x) for x in left[:10])}",
                hint="a script may write only below {root} (its working directory is a scratch directory)",
            )
        if code != 0:
            raise ScriptFailed(f"the generate command exited with status {code} on {label}", output)
        changes, ignored = _diff(root, snap, ws.content, ws.target, ws.target.layout)
        return Generated(changes, output=output, ignored=ignored)
    finally:
        ws._reset(snap)


def _diff(
    root: Path,
    snap: dict[str, tuple[int, int, int, str]],
    before: Callable[[str], bytes | None],
    target: Target,
    layout: str,
) -> tuple[list[FileChange], list[str]]:
    after = _stat_tree(root, 10**7) or {}
    changes: list[FileChange] = []
    ignored: list[str] = []
    for rel in _changed(snap, after):
        new = after.get(rel)
        old = snap.get(rel)
        if (new and stat.S_ISDIR(new[2])) or (old and stat.S_ISDIR(old[2]) and new is None):
            continue
        parts = rel.split(os.sep)
        if any(p in _IGNORED_DIRS for p in parts) or rel.endswith(_IGNORED_SUFFIXES):
            ignored.append(rel)
            continue
        if new is not None and stat.S_ISLNK(new[2]):
            raise InputError(
                f"the generate command left a symbolic link at {{root}}/{terminal(rel)}: a patch carries files",
                hint="write the file's content instead of a link",
            )
        posix = rel.replace(os.sep, "/")
        try:
            check_relative(posix, what="a file the generate command left below {root}")
        except UnsafePathError as exc:
            raise InputError(
                exc.message, hint="a patch carries files with plain names; rename it in the script"
            ) from None
        key = target.key_in(posix, layout)
        was = before(key)
        now = (root / rel).read_bytes() if new is not None else None
        if was == now:
            continue  # rewritten with the same bytes
        mode = "100755" if new is not None and new[2] & 0o111 else "100644"
        old_mode = "100755" if old is not None and old[2] & 0o111 else "100644"
        changes.append(
            FileChange(key if was is not None else None, key if now is not None else None, was, now, old_mode, mode)
        )
    changes.sort(key=lambda c: c.new_path or c.old_path or "")
    return changes, ignored


def copy_tree(src: Path, dest: Path) -> None:
    """A private copy of a directory base (symlinks kept as links, ``.git`` left out)."""
    shutil.copytree(src, dest, symlinks=True, ignore=shutil.ignore_patterns(".git"))


def base_workspace(bases: Bases, new_base: Callable[[str], bytes | None], target: Target) -> Workspace:
    """The ``Workspace`` of a rebase's new base. A plain-directory base is copied and read as it is
    (in the patches' layout, as the rebase reads it; its throwaway history holds only the files the
    series touches); any other is written from its commit, and a file read through ``new_base``."""
    if bases.kind != "dirs":
        return Workspace(lambda dest: materialise_commit(bases.repo, bases.new, dest), new_base, target)
    root = Path(bases.location["new"])

    def read(key: str) -> bytes | None:
        try:
            f = confine(root, key, what=f"file {key!r} of the new base")
        except UnsafePathError:
            return None
        return f.read_bytes() if regular_file(f) else None

    return Workspace(lambda dest: copy_tree(root, dest), read, target)

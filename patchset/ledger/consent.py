"""Consent for the commands a ledger carries, direnv-style: nothing a ledger says to run runs until
the user allowed exactly that.

A ledger is cloned, forked and received in pull requests, and it carries commands (edit scripts,
engine templates, test commands). As direnv does for an ``.envrc``, patchset keeps per ledger path
the digest of each command and of every ledger file it names, sealed in the user's state directory
(``consent/<sha256 of the path>.json``). A command that is new or changed since is refused before
anything runs (:func:`require`, exit 2), naming what changed. :func:`without_credentials` is the
environment less the user's credentials, which engine commands get unless listed in ``pass_env``
(docs/security.md).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from patchset.errors import ForeignState, InputError
from patchset.ledger.lock import sha256_file
from patchset.ledger.model import Ledger

RECORD_KIND = "ledger-consent"
RECORD_DIR = "consent"
MAX_NAMED_FILES = 2000  # files of one named directory digested entry by entry
_LEDGER_REF = re.compile(r"\{ledger\}/([^\s'\";:|&<>()]+)")
_SHELL_REF = re.compile(r"\$\{?PATCHSET_LEDGER_DIR\}?/([^\s'\";:|&<>()]+)")


class Kind(Enum):
    """What runs a command: ``rebase``/``gate`` run edit scripts; ``verify``/``gate`` the rest."""

    GENERATE = "generate"
    ENGINE = "engine"
    TEST = "test"


TESTS = (Kind.ENGINE, Kind.TEST)
EVERY = (Kind.GENERATE, Kind.ENGINE, Kind.TEST)


@dataclass(frozen=True)
class Command:
    """One command a ledger carries: ``key`` names it (``generate ID``, ``engine NAME``,
    ``test ID#N``), ``shown`` is how it reads, ``fields`` what of the ledger makes it and
    ``files`` the sha256 of each file it names under the ledger directory."""

    key: str
    kind: Kind
    shown: str
    fields: dict[str, Any]
    files: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # worth reading before allowing it (not part of the digest)

    @property
    def digest(self) -> str:
        """The digest of the command's own text (its files are kept one by one)."""
        text = json.dumps(self.fields, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    def record(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "shown": self.shown, "command": self.digest, "files": dict(self.files)}


@dataclass(frozen=True)
class Verdict:
    """A command compared with the record: ``new`` (never allowed), or what changed since."""

    command: Command
    new: bool
    changed: list[str]  # "the command", "file patchset/scripts/x.py"

    def describe(self) -> str:
        what = "not allowed yet" if self.new else "changed since allowed: " + ", ".join(self.changed)
        notes = "".join(f"; note: {n}" for n in self.command.notes)
        return f"{self.command.key} ({what}): {self.command.shown}{notes}"


# --------------------------------------------------------------------------- a ledger's commands


def _file_digest(root: Path, rel: str) -> dict[str, str]:
    """``{rel: sha256}`` of the file ``rel`` names under ``root`` (every file, for a directory);
    a missing or escaping path is recorded as such, so it appearing later is a change."""
    from patchset.confine import confine
    from patchset.errors import PatchsetError

    rel = rel.rstrip("/")
    try:
        path = confine(root, rel, what="a file a ledger command names")
    except PatchsetError:
        return {rel: "<outside the ledger directory>"}
    try:
        st = os.stat(path)
    except OSError:
        return {rel: "<missing>"}
    if stat.S_ISREG(st.st_mode):
        return {rel: _sha256(path)}
    if not stat.S_ISDIR(st.st_mode):
        return {rel: "<not a file>"}
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            full = Path(dirpath) / name
            sub = full.relative_to(root).as_posix()
            out[sub] = _sha256(full) if full.is_file() and not full.is_symlink() else "<not a file>"
            if len(out) >= MAX_NAMED_FILES:
                out[rel + "/…"] = "<too many files>"
                return out
    return out


def _sha256(path: Path) -> str:
    try:
        return sha256_file(path)
    except OSError:
        return "<unreadable>"


def _named(root: Path, texts: Iterable[str], pattern: re.Pattern[str] = _LEDGER_REF) -> dict[str, str]:
    out: dict[str, str] = {}
    for text in texts:
        for m in pattern.finditer(text):
            out.update(_file_digest(root, m.group(1)))
    return out


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


def _argv(words: Iterable[str]) -> str:
    import shlex

    return shlex.join(list(words))


def ledger_commands(ledger: Ledger, kinds: Iterable[Kind] = EVERY) -> list[Command]:
    """Every command ``ledger`` carries of ``kinds``, with its digests, in ledger order."""
    kinds = set(kinds)
    root = ledger.root.resolve()
    return [
        *(_generate_commands(ledger, root) if Kind.GENERATE in kinds else []),
        *(_engine_commands(ledger, root) if Kind.ENGINE in kinds else []),
        *(_test_commands(ledger, root) if Kind.TEST in kinds else []),
    ]


def _generate_commands(ledger: Ledger, root: Path) -> list[Command]:
    out = []
    for p in ledger.patches:
        g = p.generate
        if g is None:
            continue
        fields: dict[str, Any] = {"command": list(g.command), "bind": g.bind, "script": g.script}
        files = _named(root, g.command)
        notes: tuple[str, ...] = ()
        if g.script:
            files.update(_file_digest(root, g.script))
            if g.script.startswith("patchset/scripts/"):  # the files import staged beside it are run too
                files.update(_file_digest(root, str(Path(g.script).parent)))
            locked = ledger.lock.scripts.get(p.id)
            if locked and files.get(g.script) != locked:
                notes = (f"{g.script} is not the script its body was made with (the lock has sha256 {locked[:16]})",)
        shown = _argv(g.command) + (f"  (bind {g.bind})" if g.bind else "")
        out.append(Command(f"generate {p.id}", Kind.GENERATE, shown, fields, files, notes))
    return out


def _engine_commands(ledger: Ledger, root: Path) -> list[Command]:
    """One per ``[engines.NAME]`` (every key but ``notes``: ``image``, ``env``, ``url`` are part of
    what runs), and the bare ``docker`` preset when engine tests may run the targets' images."""
    out = []
    images = sorted({t.base_image for t in ledger.targets.values() if t.base_image})
    for name, table in ledger.engines.items():
        fields: dict[str, Any] = {k: v for k, v in table.items() if k not in ("line", "notes")}
        if fields.get("preset") == "docker" and "image" not in fields:
            fields["base_images"] = images  # the image it runs is the target's
        start = table.get("start")
        shown = _argv(start) if start else f"preset {table.get('preset', 'command')}"
        out.append(Command(f"engine {name}", Kind.ENGINE, shown, fields, _named(root, _strings(fields))))
    engine_tests = any(t.kind != "command" for p in ledger.patches for t in p.tests)
    if images and "docker" not in ledger.engines and engine_tests:
        shown = "preset docker: docker run of " + ", ".join(images)
        out.append(Command("engine docker", Kind.ENGINE, shown, {"preset": "docker", "base_images": images}))
    return out


def _test_commands(ledger: Ledger, root: Path) -> list[Command]:
    """A command test's shell line (with its ``cwd`` and ``env``); an engine test's own
    ``engine_args`` and ``env`` (its engine is an entry of its own)."""
    out = []
    for p in ledger.patches:
        for j, t in enumerate(p.tests):
            label = f"test {p.id}#{j + 1}" + (f" ({t.name})" if t.name else "")
            fields: dict[str, Any]
            if t.kind == "command":
                fields = {"command": t.command, "cwd": t.cwd, "env": dict(t.env)}
                files = _named(root, [t.command, *t.env.values()], _SHELL_REF)
                shown = t.command
            elif t.engine_args or t.env:
                fields = {"kind": t.kind, "engine": t.engine, "engine_args": list(t.engine_args), "env": dict(t.env)}
                files = _named(root, [*t.engine_args, *t.env.values()])
                parts = [f"{t.engine or 'vllm-cpu'} engine"]
                parts += [f"args {_argv(t.engine_args)}"] if t.engine_args else []
                parts += [f"env {_argv(f'{k}={v}' for k, v in t.env.items())}"] if t.env else []
                shown = ", ".join(parts)
            else:
                continue  # nothing of the ledger's own: the engine's entry covers it
            out.append(Command(label, Kind.TEST, shown, fields, files))
    return out


# --------------------------------------------------------------------------- the record


def record_path(ledger_path: Path) -> Path:
    from patchset.journal.seal import state_dir

    key = hashlib.sha256(str(ledger_path.resolve()).encode()).hexdigest()[:32]
    return state_dir() / RECORD_DIR / f"{key}.json"


def _read(path: Path) -> dict[str, Any] | None:
    """A record's body, or None when there is none; a record this installation did not seal
    allows nothing (it is reported, never trusted)."""
    from patchset.sealed import read_sealed

    body = read_sealed(
        path,
        RECORD_KIND,
        what="a record of allowed ledger commands",
        hint="remove it and run `patchset allow` again",
        max_bytes=16 << 20,
    )
    if body is not None and not (isinstance(body.get("allowed"), dict) and isinstance(body.get("ledger"), str)):
        return None
    return body


def allowed(ledger_path: Path) -> dict[str, Any]:
    """``{key: record}`` of the commands allowed for the ledger at ``ledger_path``."""
    try:
        body = _read(record_path(ledger_path))
    except ForeignState:
        return {}
    if body is None or body["ledger"] != str(ledger_path.resolve()):
        return {}
    return {k: v for k, v in body["allowed"].items() if isinstance(v, dict)}


def compare(ledger: Ledger, kinds: Iterable[Kind] = EVERY) -> list[Verdict]:
    """Each command of ``kinds`` that is not allowed as it is now, with what changed."""
    record = allowed(ledger.path)
    out = []
    for c in ledger_commands(ledger, kinds):
        was = record.get(c.key)
        if was is None:
            out.append(Verdict(c, True, []))
            continue
        changed = [] if was.get("command") == c.digest else ["the command"]
        files = was.get("files") if isinstance(was.get("files"), dict) else {}
        changed += [f"file {rel}" for rel in sorted(set(files) | set(c.files)) if files.get(rel) != c.files.get(rel)]
        if changed:
            out.append(Verdict(c, False, changed))
    return out


class NotAllowed(InputError):
    """A ledger command is not allowed, or changed since it was: nothing ran, nothing was written."""

    def __init__(self, ledger_path: Path, verdicts: list[Verdict]) -> None:
        from patchset.text import terminal

        self.verdicts = verdicts
        lines = "\n".join("  " + terminal(v.describe()) for v in verdicts)
        super().__init__(
            f"{ledger_path}: the ledger carries commands you have not allowed to run on this machine; "
            f"nothing was run or written:\n{lines}",
            hint=f"read them (and the files they name), then `patchset --ledger {ledger_path} allow`; "
            "docs/security.md, 'Commands a ledger carries'",
        )


def require(ledger: Ledger, kinds: Iterable[Kind] = EVERY) -> None:
    """Raise :class:`NotAllowed` unless every command of ``kinds`` is allowed as it is now."""
    verdicts = compare(ledger, kinds)
    if verdicts:
        raise NotAllowed(ledger.path, verdicts)


def require_at(ledger_path: Path, kinds: Iterable[Kind] = EVERY) -> None:
    """:func:`require` for the ledger at ``ledger_path``, at a command's edge, before it writes or
    runs anything. A ledger that does not load is left to the command (it runs nothing of it)."""
    from patchset.errors import LedgerError
    from patchset.ledger.store import load_ledger

    try:
        ledger = load_ledger(ledger_path)
    except (LedgerError, FileNotFoundError):
        return
    require(ledger, kinds)


def allow(ledger: Ledger, keys: Iterable[str] | None = None) -> list[Command]:
    """Record the ledger's commands as allowed (``keys``: only those, the others kept as they
    were recorded); atomically, in the user's state directory. Returns what was recorded."""
    from patchset.sealed import write_sealed

    commands = ledger_commands(ledger)
    wanted = None if keys is None else set(keys)
    record = allowed(ledger.path) if wanted is not None else {}
    chosen = [c for c in commands if wanted is None or c.key in wanted]
    record.update({c.key: c.record() for c in chosen})
    live = {c.key for c in commands}
    record = {k: v for k, v in record.items() if k in live}
    path = record_path(ledger.path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    body = {"ledger": str(ledger.path.resolve()), "allowed": record, "at": dt.datetime.now(dt.timezone.utc).isoformat()}
    write_sealed(path, RECORD_KIND, body)
    return chosen


def revoke(ledger_path: Path) -> bool:
    """Forget what was allowed for the ledger at ``ledger_path``; False when nothing was."""
    path = record_path(ledger_path)
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def records() -> list[dict[str, Any]]:
    """Every ledger with allowed commands on this machine: ``{"ledger", "at", "allowed"}``, by path;
    a record this installation did not seal is listed as ``{"record", "problem"}``."""
    from patchset.journal.seal import state_dir

    out: list[dict[str, Any]] = []
    folder = state_dir() / RECORD_DIR
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".json"))
    except OSError:
        return []
    for name in names:
        try:
            body = _read(folder / name)
        except ForeignState as exc:
            out.append({"record": str(folder / name), "problem": exc.message})
            continue
        if body is not None:
            out.append({"ledger": body["ledger"], "at": str(body.get("at", "")), "allowed": body["allowed"]})
    return sorted(out, key=lambda r: r.get("ledger", r.get("record", "")))


# --------------------------------------------------------------------------- what a command is given

_CREDENTIAL_PARTS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "API_KEY", "APIKEY", "PRIVATE_KEY")
_CREDENTIAL_PREFIXES = ("GITHUB_", "AWS_", "AZURE_", "GOOGLE_", "GCP_", "ACTIONS_", "DOCKER_AUTH")
_CREDENTIAL_SUFFIXES = ("_KEY", "_KEY_ID", "_PASS", "_AUTH")
_CREDENTIAL_NAMES = ("SSH_AUTH_SOCK", "NETRC", "KRB5CCNAME", "GPG_AGENT_INFO", "VAULT_ADDR")


def is_credential(name: str) -> bool:
    """Whether an environment variable looks like a credential (by its name)."""
    up = name.upper()
    return (
        any(p in up for p in _CREDENTIAL_PARTS)
        or up.startswith(_CREDENTIAL_PREFIXES)
        or up.endswith(_CREDENTIAL_SUFFIXES)
        or up in _CREDENTIAL_NAMES
    )


def without_credentials(env: Mapping[str, str], keep: Iterable[str] = ()) -> dict[str, str]:
    """``env`` less every credential variable except those in ``keep`` (an engine's ``pass_env``)."""
    kept = set(keep)
    return {k: v for k, v in env.items() if k in kept or not is_credential(k)}

"""``import --script`` for scripts as build repositories carry them: a ``run.sh`` beside the diff it
applies, an edit that ends with ``pip install`` or ``python -c 'import vllm'``, a Dockerfile ``RUN``
heredoc (``--script Dockerfile:LINE``).

The script and the files beside it that it names (``fix.patch``, ``helper.py``) are staged in the
ledger directory (``patchset/scripts/<id>/``) before it runs, so it finds them there on every run,
a rebase's too; a failed import takes back what was staged. A shell script's installs, clones,
downloads and import checks are not edits: they are replaced by ``true`` in the staged copy and
reported (they would need the network the script is denied, and are no part of the patch).
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from patchset.commands.importer import MAX_PATCH_BYTES, read_source
from patchset.commands.onboard.survey import INSTALL_PATH
from patchset.commands.script_import import ScriptReport, import_script
from patchset.confine import regular_file
from patchset.errors import InputError
from patchset.ledger import store as ledger_mod
from patchset.ledger.schema import ID_RE
from patchset.rebase.generate import LEDGER, ScriptFailed
from patchset.text import terminal

MAX_HELPERS = 50
SHELL_SUFFIXES = (".sh", ".bash")
_NAMED = re.compile(r"[\w.\-/]*[\w\-]\.(?:patch|diff|py|sh|bash|txt|json|ya?ml|toml|cfg|ini|cu|cuh|h|cpp)\b")
_AFTER_EDIT = re.compile(
    r"(?:^|&&|\|\||;)\s*(?:sudo\s+)?(?P<cmd>(?:uv\s+)?pip3?\s+install\b|python3?(?:\.\d+)?\s+-m\s+pip\s+install\b"
    r"|git\s+clone\b|apt(?:-get)?\s+(?:-\S+\s+)*install\b|(?:curl|wget)\b"
    r"|python3?(?:\.\d+)?\s+-c\s+['\"]\s*(?:import|from)\s)"
)
_DOCKER_REF = re.compile(r"^(?P<file>.*(?:Dockerfile|Containerfile)[^/:]*|.*\.dockerfile):(?P<line>\d+)$")
_RUN_HEREDOC = re.compile(r"^RUN\b(?P<before>.*?)<<(?P<dash>-?)\s*['\"]?(?P<word>\w+)['\"]?(?P<after>.*)$")


@dataclass
class Staged:
    """What goes into ``patchset/scripts/<id>/`` before the run, and what was said about it."""

    command: str
    files: dict[str, bytes] = field(default_factory=dict)  # relative to the ledger directory
    bind: str | None = None
    notes: list[str] = field(default_factory=list)


def import_real_script(
    ledger_path: Path, command_text: str, patch_id: str | None, target: str | None, *, bind: str | None, **opts: Any
) -> ScriptReport:
    """Stage the script (and what it reads beside it), run it as ``import --script`` does, say what
    was left out; nothing staged stays behind when the import fails."""
    root = ledger_mod.load_ledger(ledger_path).root.resolve()
    staged = stage(command_text, patch_id, bind, root)
    undo: dict[Path, bytes | None] = {}  # each file staged: what it held (None: it is new)
    made: list[Path] = []  # the directories staging made
    try:
        for rel, data in staged.files.items():
            f = root / rel
            undo.setdefault(f, f.read_bytes() if regular_file(f) else None)
            made += [d for d in [f.parent, *f.parent.parents] if not d.exists()]
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(data)
        rep = import_script(ledger_path, staged.command, patch_id, target, bind=staged.bind, **opts)
    except ScriptFailed as exc:
        _take_back(undo, made)
        raise InputError(
            exc.message,
            hint="nothing was imported; pass --keep-diff to keep the diff it made before it failed",
        ) from None
    except BaseException:
        _take_back(undo, made)
        raise
    rep.notes = staged.notes + rep.notes
    return rep


def _take_back(undo: dict[Path, bytes | None], made: list[Path]) -> None:
    for f, data in undo.items():
        if data is None:
            f.unlink(missing_ok=True)
        else:
            f.write_bytes(data)
    for d in sorted(set(made), key=lambda d: len(d.parts), reverse=True):
        try:
            d.rmdir()
        except OSError:
            pass  # not empty: something else was put there


def stage(command_text: str, patch_id: str | None, bind: str | None, ledger_root: Path) -> Staged:
    """The command to run and the files to stage: a Dockerfile heredoc made a script, a script from
    outside the ledger directory copied in with the files it names beside it."""
    try:
        argv = shlex.split(command_text)
    except ValueError as exc:
        raise InputError(f"--script {command_text!r}: {exc}", hint="quote it as a shell would") from None
    if patch_id is None or not ID_RE.match(patch_id):
        return Staged(command_text, bind=bind)  # import_script says what is wrong
    home = f"patchset/scripts/{patch_id}"
    if len(argv) == 1 and (m := _DOCKER_REF.match(argv[0])) and os.path.isfile(m.group("file")):
        return _heredoc(Path(m.group("file")), int(m.group("line")), home, bind)
    for i, a in enumerate(argv):
        if (i == 0 and "/" not in a) or a.startswith(("-", LEDGER)) or "{" in a or not os.path.isfile(a):
            continue
        path = Path(a)
        if str(Path(os.path.realpath(path))).startswith(str(ledger_root) + os.sep):
            break  # already in the ledger directory: run where it is
        data = read_source(path, what="script")
        st = Staged("", bind=bind)
        if path.suffix in SHELL_SUFFIXES or data.startswith((b"#!/bin/bash", b"#!/bin/sh", b"#!/usr/bin/env bash")):
            data = _checks_left_out(data, path.name, st.notes)
        st.files[f"{home}/{path.name}"] = data
        _helpers(path, data, f"{home}/", st)
        argv[i] = f"{LEDGER}/{home}/{path.name}"
        st.command = shlex.join(argv)
        return st
    return Staged(command_text, bind=bind)


def _helpers(script: Path, data: bytes, dest: str, st: Staged) -> None:
    """The files beside ``script`` that it names (confined to its folder, links never followed)."""
    here = Path(os.path.realpath(script.parent))
    seen: set[str] = set()
    for m in _NAMED.finditer(data.decode("utf-8", "replace")):
        written = m.group(0).lstrip("/")
        for rel in (written, written.split("/")[-1]):  # as written, else beside it ("$HERE/x.diff")
            f = here / rel
            if ".." not in rel.split("/") and not f.is_symlink() and f.is_file() and f != script:
                break
        else:
            continue
        if rel in seen or not str(Path(os.path.realpath(f))).startswith(str(here) + os.sep):
            continue
        if len(seen) == MAX_HELPERS or sum(map(len, st.files.values())) + f.stat().st_size > MAX_PATCH_BYTES:
            st.notes.append(f"{script.name} names more files beside it than are carried: the rest were not")
            break
        seen.add(rel)
        st.files[dest + rel] = read_source(f, what="file beside the script")
    if seen:
        st.notes.append(f"carried beside the script (it reads them): {', '.join(terminal(s) for s in sorted(seen))}")


def _checks_left_out(data: bytes, name: str, notes: list[str]) -> bytes:
    """The shell script with each install, clone, download or import check replaced by ``true``."""
    lines = data.decode("utf-8", "surrogateescape").splitlines(keepends=True)
    cont = False
    for i, line in enumerate(lines):
        if cont:  # the rest of a command left out
            cont = line.rstrip("\n").endswith("\\")
            lines[i] = "\n"
            continue
        m = None if line.lstrip().startswith("#") else _AFTER_EDIT.search(line)
        if m is None:
            continue
        cut = m.start("cmd")
        cont = line.rstrip("\n").endswith("\\")
        shown = terminal(line.strip().rstrip("\\").strip())
        lines[i] = line[:cut] + f"true  # patchset: not run: {line[cut:].strip().rstrip(chr(92)).strip()}\n"
        notes.append(
            f"{name}:{i + 1}: `{shown}` left out (an install, download or check, not part of the patch; "
            "the script runs without the network)"
        )
    return "".join(lines).encode("utf-8", "surrogateescape")


def _heredoc(dockerfile: Path, line: int, home: str, bind: str | None) -> Staged:
    """``--script Dockerfile:LINE``: the heredoc of the ``RUN`` at LINE as a script of its own."""
    text = read_source(dockerfile, what="Dockerfile").decode("utf-8", "replace")
    lines = text.splitlines()
    where = f"{terminal(dockerfile)}:{line}"
    m = _RUN_HEREDOC.match(lines[line - 1]) if 0 < line <= len(lines) else None
    if m is None:
        raise InputError(
            f"{where}: not a RUN with a heredoc (<<EOF)",
            hint="give the line of the RUN that starts the heredoc, as `patchset import REPO --dry-run` lists it",
        )
    body: list[str] = []
    for ln in lines[line:]:
        if (ln.lstrip("\t") if m.group("dash") else ln) == m.group("word"):
            break
        body.append(ln.lstrip("\t") if m.group("dash") else ln)
    else:
        raise InputError(f"{where}: the heredoc is not closed by a line {m.group('word')!r}")
    run = m.group("before")
    into = re.search(r"\b(?:cat|tee)\s+>?\s*(\S+)", run)
    python = re.search(r"\bpython3?\b", run) or (into and into.group(1).endswith(".py"))
    if not run.strip() and body and body[0].startswith("#!"):
        python = "python" in body[0]
    suffix, program = (".py", "python3") if python else (".sh", "bash")
    st = Staged("")
    data = ("\n".join(body) + "\n").encode()
    if program == "bash":
        data = _checks_left_out(data, f"{dockerfile.name}:{line}", st.notes)
    name = f"heredoc-{line}{suffix}"
    st.files[f"{home}/{name}"] = data
    found = INSTALL_PATH.search("\n".join(body))
    st.bind = bind or (found.group(0) if found else None)
    if st.bind is None:
        raise InputError(
            f"{where}: the heredoc names no install path (…/site-packages, …/dist-packages) to bind the copy at",
            hint="give --bind PATH: where the heredoc's edits land in the image",
        )
    st.command = shlex.join([program, f"{LEDGER}/{home}/{name}"])
    rest = m.group("after").strip() or (run[into.end() :].strip() if into else "")
    st.notes.append(
        f"made from the heredoc at {where} ({len(body)} line(s)), run by {program} with the copy at {st.bind}"
        + (f"; the rest of the RUN ({terminal(rest)}) was not run" if rest else "")
    )
    return st

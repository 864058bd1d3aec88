"""An engine from the ledger's ``[engines.NAME]`` started for one build tree (``EngineProcess``), and
the default engine factory of ``patchset verify``.

An engine that cannot be started, does not become ready in ``ready_timeout`` or exits with a non-zero
status before it is ready raises ``EngineDied`` (an environment failure: the test is an ``error``,
never a pass or a fail) carrying the tail of its logs. A start command that exits 0 before the server
is ready is a launcher that detached (``docker run -d`` on every node): readiness is then polled until
the timeout. Stop runs ``logs`` (saved beside the start log), then ``stop``, then ends the start
command's process group (SIGTERM, SIGKILL after 20 s) in every case.
"""

from __future__ import annotations

import os
import string
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from patchset.errors import EnvironmentFailure
from patchset.ledger.consent import without_credentials
from patchset.ledger.model import SPLICED_PLACEHOLDERS
from patchset.verify.engines.definition import Delivery, EngineDef, Preset, StartDir
from patchset.verify.engines.launch import (
    Engine,
    EngineDied,
    EngineLaunch,
    check_import_origin,
    end_group,
    free_port,
    start_group,
    wait_ready,
)
from patchset.verify.engines.vllm_cpu import engine_missing_reason, engine_venv, venv_python, vllm_cpu_engine

TAIL_LINES = 40
LOG_LIMIT = 8 * 1024 * 1024  # bytes of a `logs` command's output kept


def ledger_engine(launch: EngineLaunch) -> Engine:
    """The default factory: the engine the ledger defines; none: the CPU vLLM server."""
    if launch.engine is None:
        return vllm_cpu_engine(launch)
    return EngineProcess(launch)


def overlay_mounts(overlay: Path) -> list[str]:
    """``-v SRC:/DEST:ro`` for every file of an overlay directory (its paths are image paths)."""
    out: list[str] = []
    for path in sorted(p for p in overlay.rglob("*") if p.is_file()):
        rel = path.relative_to(overlay).as_posix()
        out += ["-v", f"{path}:/{rel}:ro"]
    return out


class EngineProcess:
    """A started engine (the ``Engine`` protocol of ``verify.longctx.runs``): ``start``, ``url``, ``stop``."""

    def __init__(self, launch: EngineLaunch) -> None:
        assert launch.engine is not None, "an EngineProcess starts a ledger's engine definition"
        self.launch = launch
        self.engine: EngineDef = launch.engine
        self.port = self.engine.port or free_port()
        self.values = self._values()
        url = expand_environment(self.expand(self.engine.url), {**self._outer_env(), **launch.env}, self.engine.name)
        self.url = url.rstrip("/")
        self.log_path = launch.log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_seconds: float | None = None
        self.vllm_origin: str | None = None
        self.gathered: Path | None = None

    # -- templates

    def _values(self) -> dict[str, str]:
        python, venv = str(venv_python()), str(engine_venv())
        lp = self.launch
        return {
            "tree": str(lp.tree),
            "overlay": str(lp.overlay or ""),
            "port": str(self.port),
            "host": self.engine.host,
            "model": str(lp.model),
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
                "PATCHSET_MODEL": str(lp.model),
            }
        )
        for key, value in self.engine.env.items():
            expanded = self.expand(value)
            if key == "LD_PRELOAD" and not Path(expanded).exists():
                continue  # the preset's libiomp5 preload, where the venv has none
            env[key] = expanded
        extra_path = env.pop("PYTHONPATH", None)
        env.update(lp.env)
        if self.engine.delivers == Delivery.PYTHONPATH:
            parts = [str(lp.tree)] + [p for p in (extra_path, lp.env.get("PYTHONPATH")) if p]
            env["PYTHONPATH"] = os.pathsep.join(parts)
        elif extra_path:
            env["PYTHONPATH"] = extra_path
        return env

    # -- life cycle

    def preflight(self) -> None:
        if self.engine.preset == Preset.VLLM_CPU:
            reason = engine_missing_reason(faults=False)
            if reason:
                raise EnvironmentFailure(reason)
        if self.engine.import_check:
            python = self.argv(self.engine.start[:1])[0]
            self.vllm_origin = check_import_origin(
                python, self.engine.import_check, self.launch.tree, self.environment()
            )

    def start(self) -> EngineProcess:
        self.preflight()
        lp = self.launch
        lp.logdir.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = self.argv(self.engine.start)
        cwd = lp.logdir if self.engine.cwd == StartDir.LOGDIR else lp.ledger_dir
        t0 = time.monotonic()
        with open(self.log_path, "wb") as log:
            log.write(f"# patchset: engine {self.engine.describe()}: {' '.join(argv)}\n".encode())
            log.flush()
            try:
                self.proc = start_group(argv, log, self.environment(), cwd)
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
        probe = self.url + self.engine.ready
        try:
            code = wait_ready(self.proc, probe, t0 + timeout, detach_ok=True)  # exit 0: a launcher that detached
        except TimeoutError:
            self.gather_logs()
            raise EngineDied(
                f"engine {self.engine.name} not ready at {probe} after {timeout:.0f} s; "
                f"log {self.log_path}:\n{self.log_tail()}"
            ) from None
        if code is not None:
            self.gather_logs()
            raise EngineDied(
                f"engine {self.engine.name} exited with code {code} during start-up; "
                f"log {self.log_path}:\n{self.log_tail()}"
            )

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
        for path in (self.gathered, self.log_path):
            if path is None:
                continue
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            if text.strip():
                return "\n".join(text.splitlines()[-lines:])
        return "(no log)"

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
        end_group(proc)

    def __enter__(self) -> EngineProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def expand_environment(text: str, env: Mapping[str, str], engine: str) -> str:
    """``$NAME`` / ``${NAME}`` in an engine's ``url`` from the environment verify runs in (a runner's
    ``SPARK_HEAD``); an unset variable is an environment failure naming it, never a guessed URL."""
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

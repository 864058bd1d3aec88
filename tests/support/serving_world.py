"""A ledger whose engine is the completions double, started by launcher scripts from each build tree.

The double (``tests.support.completions_double``) reads its speed and cache behaviour from
``fakeengine/*.py`` *in the tree*, so the patches below change what it serves exactly as patches to
vLLM change a real engine: ``s1`` triples the time per generated token, ``s2`` keys the prefix cache
by prompt length (new turns miss), ``s3`` changes a banner. The engines are ``[engines.*]`` tables of
the ledger, started through ``patchset.verify.engines`` like a cluster's launcher:

* ``double`` — ``launch.sh TREE PORT``: execs the double in the foreground;
* ``detached`` — ``start-detached.sh``: starts the double in the background and exits 0 (as a
  launcher that runs ``docker run -d`` on every node), with ``stop`` and ``logs`` commands;
* ``broken`` — a launcher that prints a message and exits 3;
* ``box`` — the ``docker`` preset, with a ``docker`` executable of this module first on ``PATH``
  (``fake_docker``) that "mounts" every ``-v SRC:DEST:ro`` over a copy of the pristine base.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from tests.support.diffgen import unified_diff

REPO = Path(__file__).resolve().parents[2]
ROOT = "/usr/local/lib/python3.12/dist-packages"  # the "image" install root of the docker case

BASE = {
    "fakeengine/__init__.py": '"""A stand-in engine package: the completions double reads its behaviour from here."""\n',
    "fakeengine/speed.py": "TOKEN_DELAY = 0.001\n",
    "fakeengine/cache.py": "LENGTH_KEYED = False\n",
    "fakeengine/notes.py": 'BANNER = "fakeengine"\n',
    "fakeengine/faults.py": (
        "from fakeengine import cache, speed\n\n"
        "FAULTS = {'token_delay': speed.TOKEN_DELAY, 'length_keyed_cache': cache.LENGTH_KEYED, "
        "'prefill_delay': 0.00002}\n"
    ),
}
# (id, file, old, new, checks)
PATCHES = [
    ("s1-slow-decode", "fakeengine/speed.py", "0.001", "0.004", ["decode"]),
    ("s2-cache-miss", "fakeengine/cache.py", "False", "True", ["cache-hits"]),
    ("s3-banner", "fakeengine/notes.py", '"fakeengine"', '"fakeengine 2"', ["decode", "cache-hits"]),
]
EXTRA = (
    "s4-docstring",
    "fakeengine/__init__.py",
    "stand-in engine",
    "stand-in serving engine",
    ["decode", "cache-hits"],
)

DOUBLE = f'"{sys.executable}" -m tests.support.completions_double --port "$PORT" --faults-from fakeengine.faults'

LAUNCH = f"""#!/bin/sh
# launch.sh TREE PORT: the double from the tree, in the foreground
export PYTHONPATH="$1:{REPO}" PORT="$2"
exec {DOUBLE}
"""
START_DETACHED = f"""#!/bin/sh
# start-detached.sh TREE PORT LOGDIR: the double in the background; returns at once
export PYTHONPATH="$1:{REPO}" PORT="$2"
mkdir -p "$3"
nohup {DOUBLE} > "$3/server.log" 2>&1 &
echo $! > "$3/server.pid"
exit 0
"""
STOP_DETACHED = """#!/bin/sh
# stop-detached.sh LOGDIR: what a cluster's stop does on every node
kill "$(cat "$1/server.pid")" 2>/dev/null
echo stopped > "$1/stopped"
"""
BROKEN = """#!/bin/sh
echo "launcher: node spark-3 does not answer (exit 3)"
exit 3
"""
FAKE_DOCKER = f'''#!{sys.executable}
"""A docker stand-in: `run` copies the "image" (FAKE_DOCKER_IMAGE) and lays every -v SRC:DEST:ro file over it."""
import os, shutil, sys, tempfile
args = sys.argv[1:]
state = os.environ["FAKE_DOCKER_STATE"]
os.makedirs(state, exist_ok=True)
with open(os.path.join(state, "calls"), "a") as fh:
    fh.write(" ".join(args) + "\\n")
if args[0] == "run":
    name = args[args.index("--name") + 1]
    root = tempfile.mkdtemp(prefix="container-", dir=state)
    site = root + "{ROOT}"
    shutil.copytree(os.environ["FAKE_DOCKER_IMAGE"], site)
    mounts = [args[i + 1] for i, a in enumerate(args) if a == "-v"]
    for m in mounts:
        src, dest, mode = m.rsplit(":", 2)
        assert mode == "ro", m
        shutil.copyfile(src, root + dest)
    with open(os.path.join(state, name + ".mounts"), "w") as fh:
        fh.write("\\n".join(mounts) + "\\n")
    port = args[args.index("--port") + 1]
    os.environ["PYTHONPATH"] = site + os.pathsep + "{REPO}"
    with open(os.path.join(state, name + ".pid"), "w") as fh:
        fh.write(str(os.getpid()))
    os.execv(sys.executable, [sys.executable, "-m", "tests.support.completions_double", "--port", port,
                              "--faults-from", "fakeengine.faults"])
elif args[0] == "rm":
    try:
        os.kill(int(open(os.path.join(state, args[-1] + ".pid")).read()), 15)
    except (OSError, ValueError):
        pass
elif args[0] == "logs":
    print("container " + args[-1] + " logs")
'''


def _script(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def write_world(
    root: Path,
    *,
    patches: list[tuple[str, str, str, str, list[str]]] | None = None,
    engine: str = "double",
    repeats: int = 6,
    tolerance: float = 0.15,
) -> tuple[Path, Path]:
    """(ledger path, pristine base tree) under ``root``; every patch has one serving test on ``engine``."""
    base, led = root / "base", root / "ledger"
    for rel, text in BASE.items():
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_text(text)
    series = led / "patchset" / "series" / "fake"
    series.mkdir(parents=True, exist_ok=True)
    _script(led / "launch.sh", LAUNCH)
    _script(led / "start-detached.sh", START_DETACHED)
    _script(led / "stop-detached.sh", STOP_DETACHED)
    _script(led / "broken.sh", BROKEN)
    toml = [
        'schema = 1\ntitle = "serving tests on the completions double"\n',
        f'[targets.fake]\nupstream = "x"\nbase_image = "fake/engine:1"\ninstalled_root = "{ROOT}"\n',
        '[engines.double]\nstart = ["{ledger}/launch.sh", "{tree}", "{port}"]\nmax_parallel = 2\nready_timeout = 60\n',
        '[engines.single]\nstart = ["{ledger}/launch.sh", "{tree}", "{port}"]\nmax_parallel = 1\nready_timeout = 60\n',
        '[engines.detached]\nstart = ["{ledger}/start-detached.sh", "{tree}", "{port}", "{logdir}"]\n'
        'stop = ["{ledger}/stop-detached.sh", "{logdir}"]\nlogs = ["cat", "{logdir}/server.log"]\n'
        "max_parallel = 2\nready_timeout = 60\n",
        '[engines.broken]\nstart = ["{ledger}/broken.sh"]\nready_timeout = 30\n',
        '[engines.box]\npreset = "docker"\nmax_parallel = 2\nready_timeout = 60\nmodel = "double"\n',
    ]
    current = dict(BASE)
    for pid, rel, old, new, checks in patches if patches is not None else PATCHES:
        before = current[rel]
        assert old in before, (pid, rel)
        after = before.replace(old, new)
        current[rel] = after
        (series / f"{pid}.patch").write_bytes(unified_diff(before.encode(), after.encode(), rel))
        toml.append(f'[[patch]]\nid = "{pid}"\ntarget = "fake"\ntitle = "{pid}"\norigin = "ours"\nfiles = ["{rel}"]\n')
        toml.append(
            f'[[patch.tests]]\nkind = "serving"\nname = "serve"\nchecks = {checks!r}\nengine = "{engine}"\n'
            f'repeats = {repeats}\nwarmup = 0\nmax_tokens = 8\nstreams = 2\ntolerance = {tolerance}\ntags = ["cpu"]\n'
            "timeout = 120\n".replace("'", '"')
        )
    path = led / "patches.toml"
    path.write_text("\n".join(toml))
    return path, base


def fake_docker(root: Path, image: Path) -> dict[str, str]:
    """A ``docker`` stand-in first on PATH; the environment to run verify with."""
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    _script(bin_dir / "docker", FAKE_DOCKER)
    return {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "FAKE_DOCKER_STATE": str(root / "docker-state"),
        "FAKE_DOCKER_IMAGE": str(image),
    }

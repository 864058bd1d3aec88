"""The reliability suite of issue #16: concurrency, kills at every step, full disks, hostile input.

Every case runs the real CLI in separate processes. The heavy tiers are marked ``stress`` (and
``slow``, so the default ``-m "not slow"`` run skips them): ``python -m pytest -m stress -s``
prints the counts that ``docs/reliability.md`` records. A small subset of each family runs in the
default suite.

What "survived" means after a kill, checked *before* anything repairs the tree or the ledger:

* the tree is byte for byte the old tree or the new tree, or
* an apply was killed while renaming (the only window where a multi-file commit cannot be
  atomic on a POSIX file system): then ``validate`` names the tree, ``apply --dry-run`` refuses
  it without writing, and ``recover`` gives exactly the new tree (``--back``: the old one).
  These are counted separately ("interrupted, reported").
* a ledger is loadable, ``validate`` finds no problem, and its patches are the old or new set.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from patchset.engine import txn
from patchset.journal.txndir import JOURNAL
from patchset.ledger.store import load_ledger
from tests.support import smallfs
from tests.support.child import cli_argv, popen_cli, run_cli
from tests.support.diffgen import unified_diff
from tests.support.trees import snapshot

LEDGER_HEAD = """\
schema = 1
[targets.t]
upstream = "https://example.invalid/t.git"
github = "example/t"
"""


def run(*args: object, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """The CLI in its own process, SIGINT at its default disposition (``tests.support.child``)."""
    return run_cli(*args, env=env, timeout=timeout)


def module(i: int, lines: int = 12) -> bytes:
    return b"".join(b"value_%d_%d = %d\n" % (i, k, k) for k in range(lines))


def ledger_with(where: Path, bodies: dict[str, bytes]) -> Path:
    where.mkdir(parents=True)
    (where / "patches.toml").write_text(LEDGER_HEAD)
    inc = where / "incoming"
    inc.mkdir()
    for pid, body in bodies.items():
        (inc / f"{pid}.patch").write_bytes(body)
    if bodies:
        r = run("-C", where, "import", *sorted(inc.iterdir()))
        assert r.returncode == 0, r.stderr
    return where


def series_tree(tmp: Path, n: int) -> tuple[Path, Path, dict[str, bytes]]:
    """A ledger with two patches over ``n`` files (one also deletes a file and makes a directory
    of its name), and the tree they apply to. Returns (ledger dir, tree, new file contents)."""
    files = {f"pkg/m{i:04d}.py": module(i) for i in range(n)}
    files["pkg/d"] = b"a file that becomes a directory\n"
    p1 = b"".join(unified_diff(d, d.replace(b" = 3\n", b" = 33\n"), rel) for rel, d in files.items() if rel != "pkg/d")
    p1 += unified_diff(files["pkg/d"], None, "pkg/d")
    p2 = unified_diff(None, b"inside the new directory\n", "pkg/d/inner.py")
    p2 += unified_diff(None, b"brand new\n", "pkg/new/added.py")
    led = ledger_with(tmp / "led", {"p1": p1, "p2": p2})
    tree = tmp / "tree"
    for rel, data in files.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_bytes(data)
    return led, tree, files


# --------------------------------------------------------------------------- concurrency


def _concurrent_applies(tmp: Path, n: int, big: int) -> tuple[int, int]:
    """``n`` ledgers, each changing its own line of one shared file (and, for the first, ``big``
    other files), applied to one tree at once. Returns (succeeded, failed cleanly)."""
    shared = b"".join(b"shared line %d\n" % i for i in range(1, 4 * n + 10))
    tree = tmp / "tree"
    tree.mkdir(parents=True)
    (tree / "shared.txt").write_bytes(shared)
    others = {f"big/f{i:04d}.txt": b"x\n" * 5 for i in range(big)}
    for rel, data in others.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_bytes(data)
    leds = []
    for i in range(n):
        line = 4 * i + 3
        body = unified_diff(shared, shared.replace(b"shared line %d\n" % line, b"CHANGED BY %d\n" % i), "shared.txt")
        if i == 0:
            body += b"".join(unified_diff(d, d + b"y\n", rel) for rel, d in others.items())
        leds.append(ledger_with(tmp / f"led{i}", {f"p{i}": body}))
    env = dict(os.environ, PATCHSET_LOCK_TIMEOUT="1800")  # a loaded 2-core machine: let every run wait its turn
    procs = [
        subprocess.Popen(
            cli_argv("-C", led, "apply", "--tree", tree), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        for led in leds
    ]
    ok = failed = 0
    final = None
    results = [(p.wait(timeout=600), p.stderr.read().decode()) for p in procs]  # type: ignore[union-attr]
    final = (tree / "shared.txt").read_bytes()
    for i, (code, err) in enumerate(results):
        present = b"CHANGED BY %d\n" % i in final
        if code == 0:
            assert present, f"apply {i} exited 0 but its change is gone"
            ok += 1
        else:
            assert code in (1, 2) and "Traceback" not in err and not present, (code, err)
            print(f"apply {i} failed cleanly (exit {code}): {err.strip()[-300:]}")
            failed += 1
    assert not (tree / txn.TXN_DIR).exists()
    return ok, failed


def test_concurrent_applies_lose_nothing(tmp_path: Path) -> None:
    ok, failed = _concurrent_applies(tmp_path, 4, 50)
    assert ok == 4, (ok, failed)


@pytest.mark.stress
@pytest.mark.slow
def test_concurrent_applies_lose_nothing_stress(tmp_path: Path) -> None:
    total = ok = 0
    for round_ in range(3):
        got, failed = _concurrent_applies(tmp_path / f"r{round_}", 10, 2000 if round_ == 0 else 200)
        ok += got
        total += got + failed
    print(f"\nconcurrent applies: {ok}/{total} succeeded with their change present, 0 lost")
    assert ok == total


def _concurrent_imports(tmp: Path, n: int) -> int:
    led = ledger_with(tmp / "led", {})
    base = module(0, 4 * n + 4)
    procs = []
    for i in range(n):
        p = tmp / f"imp{i:03d}.patch"
        p.write_bytes(unified_diff(base, base.replace(b"value_0_%d = %d\n" % (i, i), b"X\n"), "m.py"))
        procs.append(subprocess.Popen(cli_argv("-C", led, "import", p), stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    codes = [p.wait(timeout=600) for p in procs]
    ids = sorted(p.id for p in load_ledger(led / "patches.toml").patches)
    for i, code in enumerate(codes):
        assert (f"imp{i:03d}" in ids) == (code == 0), f"import {i}: exit {code}, present {f'imp{i:03d}' in ids}"
    assert run("-C", led, "validate").returncode == 0
    return sum(c == 0 for c in codes)


@pytest.mark.stress
@pytest.mark.slow
def test_concurrent_imports_lose_nothing_stress(tmp_path: Path) -> None:
    n = 40
    ok = _concurrent_imports(tmp_path, n)
    print(f"\nconcurrent imports: {ok}/{n} added, every added entry present")
    assert ok == n


# --------------------------------------------------------------------------- kill points


def _classify(tree: Path, old: dict, new: dict, led: Path, scratch: Path) -> str:
    """old / new / interrupted (reported, and recover gives new; --back gives old) / BAD."""
    now = snapshot(tree)
    if now == old:
        return "old"
    if now == new:
        return "new"
    if not (tree / txn.TXN_DIR / JOURNAL).exists():
        # leftovers without a journal (killed while staging, or after the commit point while
        # cleaning up): the tree itself must be the old or the new one
        now = {k: v for k, v in now.items() if k != txn.TXN_DIR and not k.startswith(txn.TXN_DIR + "/")}
        return "old" if now == old else "new" if now == new else "BAD: changed without a journal"
    v = run("-C", led, "validate", "--json")
    if v.returncode != 1 or not any("interrupted" in p for p in json.loads(v.stdout)["problems"]):
        return "BAD: validate does not report the interrupted apply"
    d = run("-C", led, "apply", "--dry-run", "--tree", tree)
    if d.returncode != 2 or snapshot(tree) != now:
        return "BAD: dry run did not refuse, or wrote"
    for direction, want in (("--back", old), ("", new)):
        copy = scratch / f"copy{direction}"
        shutil.copytree(tree, copy, symlinks=True)
        r = run("recover", "--tree", copy, *([direction] if direction else []))
        got = snapshot(copy)
        shutil.rmtree(copy)
        if r.returncode != 0 or got != want:
            return f"BAD: recover {direction or 'forward'} did not give the {'old' if want is old else 'new'} tree"
    return "interrupted, reported"


def _kill_points(tmp: Path, n_files: int, signals: tuple[str, ...], every: int = 1) -> dict[str, int]:
    led, tree, _files = series_tree(tmp, n_files)
    pristine = tmp / "pristine"
    shutil.copytree(tree, pristine, symlinks=True)
    old = snapshot(pristine)
    r = run("-C", led, "apply", "--tree", tree)
    assert r.returncode == 0, r.stderr
    new = snapshot(tree)
    counts: dict[str, int] = {}
    for sig in signals:
        k = 0
        while True:
            k += every
            shutil.rmtree(tree)
            shutil.copytree(pristine, tree, symlinks=True)
            env = dict(os.environ, PATCHSET_TEST_CRASH_AFTER=str(k), PATCHSET_TEST_CRASH_SIGNAL=sig)
            r = run("-C", led, "apply", "--tree", tree, env=env)
            if r.returncode == 0:
                assert snapshot(tree) == new
                break  # past the last step
            expected = -signal.SIGKILL if sig == "KILL" else 130
            assert r.returncode == expected, (sig, k, r.returncode, r.stderr)
            state = _classify(tree, old, new, led, tmp)
            assert not state.startswith("BAD"), f"{sig} at step {k}: {state}"
            if sig == "INT":
                assert state in ("old", "new"), f"Ctrl-C at step {k} left {state}"
            counts[f"{sig}:{state}"] = counts.get(f"{sig}:{state}", 0) + 1
            # and after the repair the next apply finishes the job
            r2 = run("-C", led, "apply", "--tree", tree)
            assert r2.returncode == 0 and snapshot(tree) == new, (sig, k, r2.stderr)
    return counts


def test_kill_points_of_apply_subset(tmp_path: Path) -> None:
    counts = _kill_points(tmp_path, 3, ("KILL", "INT"), every=3)
    assert sum(counts.values()) >= 6, counts


@pytest.mark.stress
@pytest.mark.slow
def test_kill_points_of_apply_stress(tmp_path: Path) -> None:
    counts = _kill_points(tmp_path, int(os.environ.get("PATCHSET_STRESS_FILES", "40")), ("KILL", "INT"))
    total = sum(counts.values())
    print(f"\nkill points survived: {total}/{total} ({json.dumps(counts, sort_keys=True)})")


# --------------------------------------------------------------------------- kills of ledger writers
#
# import, fetch and rebase write the ledger, lock and bodies in one journaled edit. Each is killed
# (SIGKILL or SIGINT) at every step of that commit (PATCHSET_TEST_CRASH_AFTER) and at random
# instants spread over a whole run's measured duration (start-up, network, replay, commit). Before
# anything repairs it, the ledger directory must be the old one or the new one, or (SIGKILL in the
# rename window) be reported by validate and status, which write nothing, and be restored by the
# repair commands to exactly the new (or, undone, the old) files. Then the next ordinary run must
# end at the new ledger.


def ledger_files(led: Path) -> dict:
    """The ledger, lock and bodies (everything but scratch: .patchset/, incoming patch files)."""
    return {k: v for k, v in snapshot(led).items() if not k.startswith((".patchset", "incoming"))}


@dataclass
class Writer:
    """One ledger-writing command to kill: ``args`` run in ``led``; ``pristine`` is the ledger
    before it, ``new`` its files after an uninterrupted run; ``repairs`` (args, "old"|"new") what
    restores a reported interruption; ``finish`` the next ordinary run (must end at ``new``)."""

    name: str
    led: Path
    pristine: Path
    args: list[str]
    env: dict[str, str]
    repairs: list[tuple[list[str], str]]
    finish: Callable[[Path, dict[str, str]], None]
    old: dict = field(default_factory=dict)
    new: dict = field(default_factory=dict)
    span: float = 1.0

    def reset(self) -> None:
        shutil.rmtree(self.led, ignore_errors=True)
        shutil.copytree(self.pristine, self.led, symlinks=True)

    def run_env(self, tag: str) -> dict[str, str]:
        """A fresh download cache per run: every run goes through the network again."""
        cache = self.led.parent / f"cache-{tag}"
        shutil.rmtree(cache, ignore_errors=True)
        return dict(self.env, PATCHSET_CACHE=str(cache))

    def calibrate(self) -> None:
        """The old and new ledgers, and a whole run's duration (the faster of two: the first one
        also fills the interpreter's caches)."""
        spans = []
        for _ in range(2):
            self.reset()
            self.old = ledger_files(self.led)
            t0 = time.perf_counter()
            r = run("-C", self.led, *self.args, env=self.run_env("calibrate"))
            spans.append(time.perf_counter() - t0)
            assert r.returncode == 0, r.stdout + r.stderr
            self.new = ledger_files(self.led)
            assert self.new != self.old
        self.span = min(spans)


def classify_ledger(w: Writer, scratch: Path) -> str:
    """old / new / interrupted, reported (and repaired exactly) / BAD: ..."""
    now = ledger_files(w.led)
    if now == w.old:
        return "old"
    if now == w.new:
        return "new"
    whole = snapshot(w.led)
    v = run("-C", w.led, "validate", "--json", env=w.env)
    if v.returncode != 1 or not any("interrupted" in p for p in json.loads(v.stdout)["problems"]):
        return f"BAD: validate does not report the interrupted write ({v.returncode}: {v.stdout[-300:]})"
    s = run("-C", w.led, "status", "--offline", "--json", env=w.env)
    if s.returncode != 1 or not any(i["problem"] for i in json.loads(s.stdout)["interrupted"]):
        return f"BAD: status does not report the interrupted write ({s.returncode})"
    if snapshot(w.led) != whole:
        return "BAD: validate or status wrote"
    for args, want in w.repairs:
        copy = scratch / "repair"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(w.led, copy, symlinks=True)
        r = run("-C", copy, *args, env=w.env)
        got = ledger_files(copy)
        shutil.rmtree(copy)
        if r.returncode != 0 or got != (w.new if want == "new" else w.old):
            return f"BAD: `{' '.join(args)}` did not give the {want} ledger ({r.returncode}: {r.stderr[-300:]})"
    return "interrupted, reported"


def _after_kill(w: Writer, scratch: Path, sig: str, code: int, what: str, counts: dict[str, int], err: str) -> None:
    if code == 0:
        state = "finished before the signal"
        assert ledger_files(w.led) == w.new, f"{w.name} {what}: exit 0 but not the new ledger"
    else:
        # Ctrl-C: 130 from the CLI; -SIGINT when it lands outside the CLI's guard (Python still
        # importing the CLI, or already shutting down); 1 when it lands while the interpreter
        # itself starts or imports the CLI's modules (a KeyboardInterrupt, possibly wrapped in the
        # RuntimeError of a class being defined: nothing of patchset ran yet)
        early = sig == "INT" and code == 1 and "KeyboardInterrupt" in err
        assert early or code in ((-signal.SIGKILL,) if sig == "KILL" else (130, -signal.SIGINT)), (
            w.name,
            what,
            code,
            err[-500:],
        )
        state = classify_ledger(w, scratch)
        if early:
            assert state == "old", f"{w.name} Ctrl-C at start-up {what} left {state}"
        assert not state.startswith("BAD"), f"{w.name} {sig} {what}: {state}"
        if sig == "INT":
            assert state in ("old", "new"), f"{w.name} Ctrl-C {what} left {state}"
    counts[f"{sig}:{state}"] = counts.get(f"{sig}:{state}", 0) + 1
    w.finish(w.led, w.run_env("finish"))
    assert ledger_files(w.led) == w.new, f"{w.name} {sig} {what}: the next run did not end at the new ledger"


def kill_at_steps(w: Writer, scratch: Path, signals: tuple[str, ...] = ("KILL", "INT"), every: int = 1) -> dict:
    """Every ``every``-th step of the journaled commit, until a run gets past the last one."""
    counts: dict[str, int] = {}
    for sig in signals:
        k = 0
        while True:
            k += every
            w.reset()
            env = dict(w.run_env("step"), PATCHSET_TEST_CRASH_AFTER=str(k), PATCHSET_TEST_CRASH_SIGNAL=sig)
            r = run("-C", w.led, *w.args, env=env)
            if r.returncode == 0:
                assert ledger_files(w.led) == w.new
                break
            _after_kill(w, scratch, sig, r.returncode, f"at step {k}", counts, r.stderr)
    return counts


def kill_at_random(w: Writer, scratch: Path, n: int, seed: int) -> dict:
    """``n`` kills at instants drawn over a whole run's measured duration."""
    rng = random.Random(seed)
    counts: dict[str, int] = {}
    for i in range(n):
        w.reset()
        sig = rng.choice(("KILL", "INT"))
        at = rng.uniform(0.05, 1.1) * w.span
        proc = popen_cli("-C", w.led, *w.args, env=w.run_env("random"))
        try:
            proc.wait(timeout=at)
        except subprocess.TimeoutExpired:
            proc.send_signal(getattr(signal, "SIG" + sig))
        _out, err = proc.communicate(timeout=120)
        _after_kill(w, scratch, sig, proc.returncode, f"at {at:.2f} s (#{i})", counts, err.decode(errors="replace"))
    return counts


def import_writer(tmp: Path, n_patches: int = 8) -> Writer:
    base = module(0, 60 * n_patches)
    led = ledger_with(tmp / "pristine", {"first": unified_diff(base, base + b"tail\n", "m.py")})
    args = ["import"]
    for i in range(n_patches):
        p = tmp / f"imp{i:02d}.patch"
        p.write_bytes(
            b"".join(
                unified_diff(base, base.replace(b"value_0_%d = " % (60 * i + k), b"V%d = " % k), f"m{i}_{k}.py")
                for k in range(5)
            )
        )
        args.append(str(p))
    w = Writer(
        "import",
        tmp / "led",
        led,
        args,
        dict(os.environ),
        [(["recover"], "new"), (["recover", "--back"], "old")],
        _recover_later(args),
    )
    w.calibrate()
    return w


def _recover_later(args: list[str]) -> Callable[[Path, dict[str, str]], None]:
    """After a kill: an import that did not land is run again (after ``recover`` of a torn write)."""

    def finish(led: Path, env: dict[str, str]) -> None:
        assert run("-C", led, "recover", env=env).returncode == 0
        if len(load_ledger(led / "patches.toml").patches) == 1:
            r = run("-C", led, *args, env=env)
            assert r.returncode == 0, r.stderr

    return finish


def fetch_writer(tmp: Path, hub_url: str, world) -> Writer:
    from tests.support.fetch_world import TOKEN, write_ledger

    pristine = write_ledger(tmp / "pristine", world).parent
    env = dict(os.environ, PATCHSET_GITHUB_API=hub_url, GITHUB_TOKEN=TOKEN)

    def finish(led: Path, env: dict[str, str]) -> None:
        r = run("-C", led, "fetch", "--all", env=env)  # finishes a torn edit itself, then fetches what is missing
        assert r.returncode == 0, r.stdout + r.stderr

    w = Writer(
        "fetch",
        tmp / "led",
        pristine,
        ["fetch", "--all"],
        env,
        [(["recover"], "new"), (["recover", "--back"], "old")],
        finish,
    )
    w.calibrate()
    return w


def rebase_writer(tmp: Path, up: Path, shas: dict[str, str]) -> Writer:
    from tests.support.rebase_demo import ALL, build

    demo = build(tmp / "world", [p for p in ALL if p != "p-conflict"], upstream=up, shas=shas)

    def finish(led: Path, env: dict[str, str]) -> None:
        more = ["--continue"] if (led / ".patchset" / "rebase" / "commit.json").exists() else ["--onto", "v2"]
        r = run("-C", led, "rebase", *more, env=env)
        assert r.returncode == 0, r.stdout + r.stderr

    w = Writer(
        "rebase",
        tmp / "led",
        demo.root,
        ["rebase", "--onto", "v2"],
        dict(os.environ),
        [(["rebase", "--continue"], "new"), (["rebase", "--abort"], "old")],
        finish,
    )
    w.calibrate()
    return w


@pytest.fixture(scope="module")
def fetch_world(tmp_path_factory):
    from tests.support.fetch_world import build_world

    return build_world(tmp_path_factory.mktemp("fetchworld"))


@pytest.fixture(scope="module")
def rebase_upstream(tmp_path_factory):
    from tests.support.rebase_demo import build_upstream

    up = tmp_path_factory.mktemp("rebaseworld") / "up"
    return up, build_upstream(up)


def _report(name: str, *parts: dict) -> int:
    counts: dict[str, int] = {}
    for part in parts:
        for k, v in part.items():
            counts[k] = counts.get(k, 0) + v
    late = sum(v for k, v in counts.items() if k.endswith("finished before the signal"))
    total = sum(counts.values()) - late
    print(
        f"\n{name} kill points survived: {total}/{total} ({json.dumps(counts, sort_keys=True)}; "
        f"{late} run(s) finished before their signal, not counted)"
    )
    return total


STRESS_KILLS = int(os.environ.get("PATCHSET_STRESS_KILLS", "100"))


def test_kills_of_import_subset(tmp_path: Path) -> None:
    w = import_writer(tmp_path, 3)
    assert _report("import", kill_at_steps(w, tmp_path, every=4), kill_at_random(w, tmp_path, 2, seed=16)) >= 4


def test_kills_of_fetch_subset(tmp_path: Path, serve_hub, fetch_world) -> None:
    from tests.support.fetch_world import hub_data

    w = fetch_writer(tmp_path, serve_hub(hub_data(fetch_world)).base_url, fetch_world)
    assert _report("fetch", kill_at_steps(w, tmp_path, ("KILL",), every=3), kill_at_random(w, tmp_path, 2, 16)) >= 4


def test_kills_of_rebase_subset(tmp_path: Path, rebase_upstream) -> None:
    w = rebase_writer(tmp_path, *rebase_upstream)
    assert _report("rebase", kill_at_steps(w, tmp_path, ("KILL",), every=3), kill_at_random(w, tmp_path, 2, 16)) >= 4


@pytest.mark.stress
@pytest.mark.slow
def test_kills_of_import_stress(tmp_path: Path) -> None:
    w = import_writer(tmp_path)
    _report("import", kill_at_steps(w, tmp_path), kill_at_random(w, tmp_path, STRESS_KILLS, seed=1616))


@pytest.mark.stress
@pytest.mark.slow
def test_kills_of_fetch_stress(tmp_path: Path, serve_hub, fetch_world) -> None:
    from tests.support.fetch_world import hub_data

    w = fetch_writer(tmp_path, serve_hub(hub_data(fetch_world)).base_url, fetch_world)
    _report("fetch", kill_at_steps(w, tmp_path), kill_at_random(w, tmp_path, STRESS_KILLS, seed=1616))


@pytest.mark.stress
@pytest.mark.slow
def test_kills_of_rebase_stress(tmp_path: Path, rebase_upstream) -> None:
    w = rebase_writer(tmp_path, *rebase_upstream)
    _report("rebase", kill_at_steps(w, tmp_path), kill_at_random(w, tmp_path, STRESS_KILLS, seed=1616))


# --------------------------------------------------------------------------- full disks


@pytest.mark.parametrize("kind", ["space", "inodes"])
def test_apply_on_a_full_tmpfs_leaves_the_old_tree(tmp_path: Path, kind: str) -> None:
    with smallfs.tmpfs(tmp_path / "fs", size="4m", inodes=400 if kind == "inodes" else None) as fs:
        led, tree, _ = series_tree(fs, 30)
        before = snapshot(tree)
        if kind == "space":
            smallfs.fill(fs)
        else:
            i = 0
            while True:  # use up every inode
                try:
                    (fs / f".i{i}").touch()
                except OSError:
                    break
                i += 1
        r = run("-C", led, "apply", "--tree", tree)
        assert r.returncode == 2, r.stdout + r.stderr
        assert "Traceback" not in r.stderr and "internal error" not in r.stderr
        assert snapshot(tree) == before


@pytest.mark.stress
@pytest.mark.slow
def test_apply_on_a_tmpfs_filling_at_every_size(tmp_path: Path) -> None:
    """The tree's file system has room for 0, 1, 2 ... more blocks: each apply either
    succeeds or leaves the old tree."""
    outcomes = {"applied": 0, "refused, old tree": 0}
    with smallfs.tmpfs(tmp_path / "fs", size="8m") as fs:
        led, tree, _ = series_tree(fs, 40)
        pristine = tmp_path / "pristine"
        shutil.copytree(tree, pristine)
        before = snapshot(pristine)
        for room in range(0, 200, 8):
            for q in fs.glob(".fill*"):
                q.unlink()
            shutil.rmtree(tree)
            shutil.copytree(pristine, tree)
            smallfs.fill(fs)
            for q in sorted(fs.glob(".fill*"))[:room]:  # give back ``room`` small blocks
                q.unlink()
            r = run("-C", led, "apply", "--tree", tree)
            if r.returncode == 0:
                outcomes["applied"] += 1
            else:
                assert r.returncode == 2 and snapshot(tree) == before, r.stderr
                outcomes["refused, old tree"] += 1
    print(f"\ndisk-full applies: {sum(outcomes.values())}/{sum(outcomes.values())} old or new ({outcomes})")


# --------------------------------------------------------------------------- hostile patches


def _mutations(body: bytes, rng: random.Random, n: int) -> list[bytes]:
    out = []
    lines = body.splitlines(keepends=True)
    for _ in range(n):
        m = list(lines)
        op = rng.randrange(6)
        i = rng.randrange(len(m))
        if op == 0:
            del m[i:]
        elif op == 1:
            m[i] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))) + b"\n"
        elif op == 2:
            m.insert(i, m[rng.randrange(len(m))])
        elif op == 3:
            m[i] = m[i].replace(b"@@ -", b"@@ -" + str(rng.choice([0, 10**7, 10**19, 10**30])).encode() + b"0")
        elif op == 4:
            m[i] = m[i].replace(b"a/", rng.choice([b"a/../../", b"a//etc/", b"a/.GIT/", b"a/\x00"]))
        else:
            rng.shuffle(m)
        out.append(b"".join(m))
    return out


def _hostile(tmp: Path, n: int, seed: int) -> dict[int, int]:
    rng = random.Random(seed)
    led, tree, _ = series_tree(tmp, 4)
    before = snapshot(tree)
    body = (led / "patchset/series/t/p1.patch").read_bytes()
    codes: dict[int, int] = {}
    for k, bad in enumerate(_mutations(body, rng, n)):
        (led / "patchset/series/t/p1.patch").write_bytes(bad)
        lock = led / "patches.lock"
        text = lock.read_text()
        # record the mutated body's hash so the engine (not the lock check) meets it
        from patchset.ledger.lock import sha256_bytes

        lines = [ln for ln in text.splitlines() if not ln.startswith("p1 = ")]
        at = lines.index("[bodies]") + 1
        lines.insert(at, f'p1 = "{sha256_bytes(bad)}"')
        lock.write_text("\n".join(lines) + "\n")
        t0 = time.perf_counter()
        r = run("-C", led, "apply", "--tree", tree)
        assert time.perf_counter() - t0 < 30, f"mutation {k} took too long"
        assert r.returncode in (0, 1, 2) and "Traceback" not in r.stderr and "internal error" not in r.stderr, (
            k,
            r.stderr,
        )
        if r.returncode != 0:
            assert snapshot(tree) == before, f"mutation {k}: refused but the tree changed"
        else:
            shutil.rmtree(tree)
            for rel, (_kind, data, _mode) in before.items():
                if _kind == "file":
                    (tree / rel).parent.mkdir(parents=True, exist_ok=True)
                    (tree / rel).write_bytes(data)  # type: ignore[arg-type]
        codes[r.returncode] = codes.get(r.returncode, 0) + 1
    return codes


def test_hostile_patches_subset(tmp_path: Path) -> None:
    codes = _hostile(tmp_path, 12, seed=16)
    assert sum(codes.values()) == 12


@pytest.mark.stress
@pytest.mark.slow
def test_hostile_patches_stress(tmp_path: Path) -> None:
    codes = _hostile(tmp_path, 300, seed=1616)
    print(f"\nhostile patches handled: {sum(codes.values())}/{sum(codes.values())} (exit codes {codes})")

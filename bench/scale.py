"""Benchmark: how time and peak memory grow with the series and with the bodies (issue #16).

Two families, each measured against a baseline run on the same input in the same run:

* **bodies**: one patch of 1, 10, 100 MB (every 4th line of one big file changed), applied by
  the engine (``apply_series``, crash-safe commit included) vs ``patch -p1 -F0`` (GNU patch).
  Peak memory is the child's maximum resident set size (``wait4``), reported also as a multiple
  of the body's size.
* **series**: a ledger of 10, 100, 1,000 and 10,000 patches of ~5 KB each (10,000: ~44 MB of
  bodies, the issue's "50 MB ledger"): ``patchset list`` (piped: the plain table) and
  ``patchset validate`` (whole commands, process start included) vs ``tomllib`` parsing the same
  ledger (the floor any reader pays), and ``apply_series`` of the whole series, then the whole
  ``patchset apply --tree`` command (start, ledger, lock check, commit), vs a loop of
  ``patch -p1 -F0`` over the same patches.

    python bench/scale.py [--sizes 1,10,100] [--counts 10,100,1000,10000] [--ledger-mb 50] [--json]

A third family, **ledgers**: one ledger file of ``--ledger-mb`` MB (10,000 patches with long
descriptions) listed and validated, against the standard library's ``tomllib`` and the compiled
``tomli`` the ledger reader uses parsing the same file.

The whole default grid takes about five minutes on a loaded 2-core machine (most of it GNU
patch run 10,000 times and the 100 MB body).

Every figure is one run (the inputs are large and deterministic). Trees and ledgers are written
by this script under a temporary directory and removed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.diffgen import unified_diff  # noqa: E402

MB = 1 << 20

ENGINE = """
import sys
from pathlib import Path
from patchset.engine.results import SeriesItem
from patchset.engine.tree import apply_series
root, series = Path(sys.argv[1]), Path(sys.argv[2])
items = [SeriesItem(p.stem, p.read_bytes()) for p in sorted(series.glob("*.patch"))]
res = apply_series(root, items)
sys.exit(0 if res.ok else 3)
"""


def measure(argv: list[str], cwd: Path | None = None, stdin: Path | None = None) -> tuple[float, float, int]:
    """(seconds, peak RSS in MB, exit code) of one command, peak as GNU time's ``%M`` reports it
    (the command's own maximum resident set, not this process's size before the exec)."""
    fin = open(stdin, "rb") if stdin else subprocess.DEVNULL  # noqa: SIM115
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        t0 = time.perf_counter()
        proc = subprocess.run(
            ["/usr/bin/time", "-f", "%M", "-o", rss.name, *argv],
            cwd=cwd,
            stdin=fin,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        elapsed = time.perf_counter() - t0
        peak_kb = int(rss.read().strip().splitlines()[-1])
    if stdin:
        fin.close()  # type: ignore[union-attr]
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:3]} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}")
    return elapsed, peak_kb / 1024, proc.returncode


def _old_line(i: int) -> bytes:
    return b"x" * 60 + b" %09d\n" % i


def _new_line(i: int) -> bytes:
    return _old_line(i) if i % 4 else b"x" * 60 + b" %09dY\n" % i


def _hunk(i: int, n: int) -> bytes:
    """The one-line-of-context hunk changing line ``i`` (0-based): what ``diff -U1`` writes."""
    lo, hi = max(i - 1, 0), min(i + 2, n)
    out = [b"@@ -%d,%d +%d,%d @@\n" % (lo + 1, hi - lo, lo + 1, hi - lo)]
    for k in range(lo, hi):
        out.append(b"-" + _old_line(k) + b"+" + _new_line(k) if k == i else b" " + _old_line(k))
    return b"".join(out)


def big_body(tmp: Path, mb: int) -> tuple[Path, Path, int]:
    """A tree with one file and a patch of about ``mb`` MB changing every 4th line of it.

    Written straight to disk in pieces (difflib over a million lines takes longer than
    everything measured here); a small case is checked against ``tests.support.diffgen``."""
    n = (mb * MB) // (2 * 64) * 2
    tree, series = tmp / f"tree{mb}", tmp / f"series{mb}"
    tree.mkdir()
    series.mkdir()
    step = 4096
    with open(tree / "big.txt", "wb") as f:
        for k in range(0, n, step):
            f.write(b"".join(_old_line(i) for i in range(k, min(k + step, n))))
    with open(series / "0001-big.patch", "wb") as f:
        f.write(b"--- a/big.txt\n+++ b/big.txt\n")
        for k in range(0, n, step):
            f.write(b"".join(_hunk(i, n) for i in range(k, min(k + step, n), 4)))
    return tree, series, (series / "0001-big.patch").stat().st_size


def _check_generator() -> None:
    n = 40
    old = b"".join(_old_line(i) for i in range(n))
    new = b"".join(_new_line(i) for i in range(n))
    mine = b"--- a/big.txt\n+++ b/big.txt\n" + b"".join(_hunk(i, n) for i in range(0, n, 4))
    assert mine == unified_diff(old, new, "big.txt", context=1), "the body generator drifted from diffgen"


def bodies(tmp: Path, sizes: list[int]) -> list[dict]:
    rows = []
    _, floor, _ = measure([sys.executable, "-c", "import patchset.engine.tree"])  # the interpreter itself
    for mb in sizes:
        tree, series, size = big_body(tmp, mb)
        gnu_tree = tmp / f"gnu{mb}"
        shutil.copytree(tree, gnu_tree)
        t, rss, _ = measure([sys.executable, "-c", ENGINE, str(tree), str(series)])
        gt, grss, _ = measure(["patch", "-p1", "-F0", "-s"], cwd=gnu_tree, stdin=series / "0001-big.patch")
        same = (tree / "big.txt").read_bytes() == (gnu_tree / "big.txt").read_bytes()
        rows.append(
            {
                "body_mb": round(size / MB, 1),
                "engine_s": round(t, 2),
                "engine_peak_mb": round(rss, 1),
                "engine_peak_x_body": round((rss - floor) * MB / size, 2),  # above the interpreter's own
                "interpreter_mb": round(floor, 1),
                "gnu_patch_s": round(gt, 2),
                "gnu_patch_peak_mb": round(grss, 1),
                "time_ratio": round(t / gt, 2) if gt else None,
                "same_result": same,
            }
        )
        shutil.rmtree(tree)
        shutil.rmtree(gnu_tree)
        shutil.rmtree(series)
    return rows


LEDGER_HEAD = 'schema = 1\n[targets.t]\nupstream = "https://example.invalid/t.git"\ngithub = "example/t"\n'


BLOCK, STRIDE, BLOCKS, CONTEXT = 30, 40, 10, 3  # each patch rewrites 30 lines: a ~5 KB body


def _module_line(k: int, by: int | None = None) -> bytes:
    note = b"original line of the module" if by is None else b"rewritten by patch %05d" % by
    return b"value_%05d = compute(%d, scale=1.0)  # %s\n" % (k, k, note)


def _block_patch(rel: str, lines: list[bytes], block: int, by: int) -> bytes:
    """The ``diff -u`` of rewriting block ``block`` of ``lines`` (changed in place)."""
    s = 5 + block * STRIDE
    lo, hi = s - CONTEXT, s + BLOCK + CONTEXT
    new = [_module_line(k, by) for k in range(s, s + BLOCK)]
    out = [b"--- a/%s\n+++ b/%s\n" % (rel.encode(), rel.encode())]
    out.append(b"@@ -%d,%d +%d,%d @@\n" % (lo + 1, hi - lo, lo + 1, hi - lo))
    out += [b" " + ln for ln in lines[lo:s]] + [b"-" + ln for ln in lines[s : s + BLOCK]]
    out += [b"+" + ln for ln in new] + [b" " + ln for ln in lines[s + BLOCK : hi]]
    lines[s : s + BLOCK] = new
    return b"".join(out)


def _check_block_patch() -> None:
    lines = [_module_line(k) for k in range(5 + BLOCKS * STRIDE)]
    old = b"".join(lines)
    body = _block_patch("m.py", lines, 3, 7)
    assert body == unified_diff(old, b"".join(lines), "m.py"), "the series generator drifted from diffgen"


def ledger(tmp: Path, n: int) -> tuple[Path, Path, Path]:
    """A ledger of ``n`` patches of ~5 KB each (10,000: a 0.8 MB ``patches.toml`` and ~44 MB of
    bodies, the issue's "50 MB ledger"), ten per file in ``n // 10`` files; its lock; its tree."""
    import hashlib

    led = tmp / f"led{n}"
    series = led / "patchset" / "series" / "t"
    series.mkdir(parents=True)
    tree = tmp / f"stree{n}"
    tree.mkdir()
    files = max(1, n // BLOCKS)
    state = {f"pkg/f{i:05d}.py": [_module_line(k) for k in range(5 + BLOCKS * STRIDE)] for i in range(files)}
    for rel, lines in state.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_bytes(b"".join(lines))
    toml = [LEDGER_HEAD]
    lock = ["schema = 1", "[bodies]"]
    flat = tmp / f"flat{n}"
    flat.mkdir()
    for i in range(n):
        rel = f"pkg/f{i % files:05d}.py"
        body = _block_patch(rel, state[rel], (i // files) % BLOCKS, i)
        pid = f"p{i:05d}"
        (series / f"{pid}.patch").write_bytes(body)
        (flat / f"{pid}.patch").write_bytes(body)
        toml.append(f'\n[[patch]]\nid = "{pid}"\ntarget = "t"\ntitle = "patch number {i}"\norigin = "ours"\n')
        lock.append(f'{pid} = "{hashlib.sha256(body).hexdigest()}"')
    (led / "patches.toml").write_text("".join(toml))
    (led / "patches.lock").write_text("\n".join(lock) + "\n")
    return led, tree, flat


def series(tmp: Path, counts: list[int]) -> list[dict]:
    rows = []
    cli = [sys.executable, "-c", "from patchset.cli import main; main()"]  # the console script
    for n in counts:
        led, tree, flat = ledger(tmp, n)
        size = (led / "patches.toml").stat().st_size
        bodies_size = sum(p.stat().st_size for p in flat.glob("*.patch"))
        lt, lrss, _ = measure([*cli, "-C", str(led), "list"])
        vt, vrss, _ = measure([*cli, "-C", str(led), "validate"])
        pt, _prss, _ = measure(
            [sys.executable, "-c", f"import tomllib; tomllib.load(open({str(led / 'patches.toml')!r}, 'rb'))"]
        )
        gnu_tree = tmp / f"gnus{n}"
        shutil.copytree(tree, gnu_tree)
        cmd_tree = tmp / f"ctree{n}"
        shutil.copytree(tree, cmd_tree)
        at, arss, _ = measure([sys.executable, "-c", ENGINE, str(tree), str(flat)])
        # the whole command a user runs: start, ledger, lock check, apply, commit
        ct, crss, code = measure([*cli, "-C", str(led), "apply", "--tree", str(cmd_tree)])
        assert code == 0, f"patchset apply --tree failed on the {n}-patch series"
        loop = f'for p in {flat}/*.patch; do patch -p1 -F0 -s < "$p" || exit 1; done'
        gt, _grss, _ = measure(["bash", "-c", loop], cwd=gnu_tree)
        rows.append(
            {
                "patches": n,
                "ledger_mb": round(size / MB, 2),
                "bodies_mb": round(bodies_size / MB, 2),
                "list_s": round(lt, 2),
                "list_peak_mb": round(lrss, 1),
                "validate_s": round(vt, 2),
                "validate_peak_mb": round(vrss, 1),
                "tomllib_parse_s": round(pt, 2),
                "list_vs_tomllib": round(lt / pt, 2) if pt else None,
                "validate_vs_tomllib": round(vt / pt, 2) if pt else None,
                "apply_s": round(at, 2),
                "apply_peak_mb": round(arss, 1),
                "gnu_patch_loop_s": round(gt, 2),
                "apply_vs_gnu": round(at / gt, 2) if gt else None,
                "apply_command_s": round(ct, 2),
                "apply_command_peak_mb": round(crss, 1),
                "apply_command_vs_gnu": round(ct / gt, 2) if gt else None,
            }
        )
        for d in (led, tree, flat, gnu_tree):
            shutil.rmtree(d)
    return rows


def big_ledger(tmp: Path, mb: int) -> Path:
    """A ledger file of about ``mb`` MB: 10,000 patches whose descriptions are long (bodies not
    imported: what is measured is reading the TOML, checking it and listing it)."""
    led = tmp / f"bigledger{mb}"
    led.mkdir()
    per = max(1, mb * MB // 10_000 - 300)
    word = "kv cache block scheduler prefix resume workspace tile timeout "
    desc = (word * (per // len(word) + 1))[:per]
    parts = ['schema = 1\n[targets.vllm]\nupstream = "https://github.com/vllm-project/vllm.git"\n', 'base = "0.30.0"\n']
    for i in range(10_000):
        parts.append(
            f'\n[[patch]]\nid = "p{i:05d}"\ntarget = "vllm"\ntitle = "patch {i}"\norigin = "ours"\n'
            f'description = "{desc}"\nfiles = ["vllm/m{i % 300}.py"]\n'
            f'[patch.upstream]\nprs = ["vllm-project/vllm#{20000 + i}"]\n'
        )
    (led / "patches.toml").write_text("".join(parts))
    return led


def ledgers(tmp: Path, sizes: list[int]) -> list[dict]:
    """``list`` and ``validate`` of a big ledger file vs the standard library's ``tomllib`` and the
    compiled ``tomli`` (what the ledger reader uses) parsing the same file."""
    rows = []
    cli = [sys.executable, "-c", "from patchset.cli import main; main()"]  # the console script
    for mb in sizes:
        led = big_ledger(tmp, mb)
        path = led / "patches.toml"
        lt, lrss, _ = measure([*cli, "-C", str(led), "list"])
        vt, vrss, _ = measure([*cli, "-C", str(led), "validate"])
        parse = "import {m}; {m}.loads(open({p!r}, encoding='utf-8').read())"
        st, _, _ = measure([sys.executable, "-c", parse.format(m="tomllib", p=str(path))])
        ct, _, _ = measure([sys.executable, "-c", parse.format(m="tomli", p=str(path))])
        rows.append(
            {
                "ledger_mb": round(path.stat().st_size / MB, 1),
                "list_s": round(lt, 2),
                "list_peak_mb": round(lrss, 1),
                "validate_s": round(vt, 2),
                "validate_peak_mb": round(vrss, 1),
                "tomllib_s": round(st, 2),
                "tomli_s": round(ct, 2),
                "list_vs_tomllib": round(lt / st, 2) if st else None,
            }
        )
        shutil.rmtree(led)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,10,100", help="body sizes in MB")
    ap.add_argument("--counts", default="10,100,1000,10000", help="series lengths")
    ap.add_argument("--ledger-mb", default="50", help="sizes in MB of one big ledger file (10,000 patches)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",") if x]
    counts = [int(x) for x in args.counts.split(",") if x]
    ledger_sizes = [int(x) for x in args.ledger_mb.split(",") if x]
    _check_generator()
    _check_block_patch()
    with tempfile.TemporaryDirectory(prefix="patchset-scale-") as d:
        tmp = Path(d)
        out = {"bodies": bodies(tmp, sizes), "series": series(tmp, counts), "ledgers": ledgers(tmp, ledger_sizes)}
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print("bodies (one patch, one file): engine vs GNU patch, same body")
    for r in out["bodies"]:
        print(
            f"  {r['body_mb']:>6} MB  engine {r['engine_s']:>6} s {r['engine_peak_mb']:>7} MB peak "
            f"({r['engine_peak_x_body']}x body above {r['interpreter_mb']} MB)  GNU patch {r['gnu_patch_s']:>6} s {r['gnu_patch_peak_mb']:>7} MB  "
            f"time ratio {r['time_ratio']}  same result: {r['same_result']}"
        )
    print("series: whole commands vs tomllib parse; apply_series and the whole apply command vs a patch -p1 loop")
    for r in out["series"]:
        print(
            f"  {r['patches']:>6} patches ({r['ledger_mb']} MB ledger, {r['bodies_mb']} MB bodies)  "
            f"list {r['list_s']} s {r['list_peak_mb']} MB  validate {r['validate_s']} s {r['validate_peak_mb']} MB  "
            f"tomllib {r['tomllib_parse_s']} s (list/tomllib {r['list_vs_tomllib']}, validate/tomllib "
            f"{r['validate_vs_tomllib']})  apply {r['apply_s']} s {r['apply_peak_mb']} MB  "
            f"GNU loop {r['gnu_patch_loop_s']} s (ratio {r['apply_vs_gnu']})  "
            f"`patchset apply --tree` {r['apply_command_s']} s {r['apply_command_peak_mb']} MB "
            f"(ratio {r['apply_command_vs_gnu']})"
        )
    print("one big ledger file (10,000 patches, long descriptions): whole commands vs parsing it alone")
    for r in out["ledgers"]:
        print(
            f"  {r['ledger_mb']:>6} MB ledger  list {r['list_s']} s {r['list_peak_mb']} MB  "
            f"validate {r['validate_s']} s {r['validate_peak_mb']} MB  tomllib {r['tomllib_s']} s  "
            f"tomli (compiled) {r['tomli_s']} s  (list/tomllib {r['list_vs_tomllib']})"
        )


if __name__ == "__main__":
    main()

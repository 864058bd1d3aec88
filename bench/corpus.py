"""Benchmark and proof on real-world series: Debian source packages (bookworm), no one here wrote them.

For each package: import its quilt series, apply it to the upstream (orig) tree and compare with
``dpkg-source -x`` (ignoring ``debian/`` and ``.pc/``: byte-identical, modes included); export it
as quilt, ``quilt push -a`` the export on a fresh tree, compare again; compare the exported bodies
with the originals; time patchset against a GNU ``patch`` loop (as dpkg-source runs it) and
``quilt push -a`` on the same tree. Then rebase the bookworm series onto the trixie upstream tree
and hold the result against what Debian's maintainers did in trixie.

    python bench/corpus.py [--packages bash,tar] [--no-rebase] [--json] [--markdown FILE]

Downloads are cached under the patchset cache (``$PATCHSET_CACHE/debian``); the ``deb-src`` lines
for bookworm and trixie must be configured (``.ci/run`` adds them).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support import debian

COMMAND = "python bench/corpus.py --markdown docs/corpus.md"


def _ratio(a: float, b: float | None) -> str:
    return f"{a / b:.2f}" if b else "n/a"


def run(packages: list[str], rebase: bool, json_out: Path | None = None) -> dict:
    out: dict = {"apply": [], "rebase": [], "skipped": []}
    work = Path(tempfile.mkdtemp(prefix="patchset-corpus-"))
    try:
        for pkg in packages:
            if json_out:  # before every package: a long run interrupted keeps what it measured
                json_out.write_text(json.dumps(out, indent=1))
            try:
                src = debian.extract(pkg, "bookworm")
            except debian.Unavailable as exc:
                out["skipped"].append({"package": pkg, "reason": str(exc)})
                print(f"{pkg}: skipped: {exc}", file=sys.stderr)
                continue
            t0 = time.perf_counter()
            c = debian.check_apply(src, work / pkg)
            row = {
                "package": pkg,
                "version": src.version,
                "patches": c.patches,
                "identical": c.identical,
                "diffs": c.diffs[:10],
                "quilt_identical": c.quilt_identical,
                "quilt_diffs": c.quilt_diffs[:10],
                "roundtrip_identical": c.roundtrip_identical,
                "roundtrip_diffs": c.roundtrip_diffs[:10],
                "patchset_s": round(c.timing.patchset, 3) if c.timing else None,
                "gnu_patch_s": round(c.timing.gnu_patch, 3) if c.timing else None,
                "quilt_s": round(c.timing.quilt, 3) if c.timing and c.timing.quilt else None,
            }
            out["apply"].append(row)
            print(
                f"{pkg} {src.version}: {c.patches} patches, identical={c.identical} quilt={c.quilt_identical} "
                f"roundtrip={c.roundtrip_identical} ({time.perf_counter() - t0:.1f}s)",
                file=sys.stderr,
            )
            if not rebase:
                continue
            try:
                new = debian.extract(pkg, "trixie")
            except debian.Unavailable as exc:
                out["rebase"].append({"package": pkg, "old": src.version, "skipped": str(exc)})
                continue
            r = debian.check_rebase(src, new, work / pkg / "rebase")
            out["rebase"].append(
                {
                    "package": pkg,
                    "old": src.version,
                    "new": new.version,
                    "table": {f"{v}|{a}": n for (v, a), n in sorted(r.table().items())},
                    "rows": r.rows,
                    "false_already_upstream": r.false_upstream,
                    "compared_files": r.compared_files,
                    "equal_files": r.equal_files,
                    "unequal": r.unequal[:10],
                    "seconds": round(r.seconds, 2),
                }
            )
            shutil.rmtree(work / pkg, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if json_out:
        json_out.write_text(json.dumps(out, indent=1))
    return out


def markdown(res: dict) -> str:
    lines = [
        "# The Debian corpus: patchset on series no one here wrote",
        "",
        f"Made with `{COMMAND}` (bookworm series; rebase onto the trixie upstream tree). The same",
        "checks run in `tests/test_corpus.py` (`pytest -m corpus` for every package; the default run",
        "checks the small ones).",
        "",
        "## Apply: patchset vs `dpkg-source -x`, `quilt push -a` and a GNU `patch` loop",
        "",
        "*identical*: patchset's tree (import → `apply --remove-empty` on the orig tree) equals",
        "`dpkg-source -x` byte for byte, modes and symlinks included, ignoring `debian/` and `.pc/`;",
        "*quilt*: `export --format quilt` → `quilt push -a` (with `-E`, as dpkg-source) on a fresh tree",
        "gives the same; *round trip*: import → export gives the same series file and bodies, byte for",
        "byte. Times: patchset's `apply` (a dry run, then the atomic write) vs a GNU `patch -F0 -E` loop",
        "(what dpkg-source runs) and `quilt push -a`, same tree, same run.",
        "",
        "| package | version | patches | identical | quilt | round trip | patchset s | GNU patch s | quilt s | patchset/GNU | patchset/quilt |",
        "|---|---|---:|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in res["apply"]:
        lines.append(
            f"| {r['package']} | {r['version']} | {r['patches']} | {'yes' if r['identical'] else 'NO'} | "
            f"{'yes' if r['quilt_identical'] else ('NO' if r['quilt_identical'] is False else 'n/a')} | "
            f"{'yes' if r['roundtrip_identical'] else 'NO'} | {r['patchset_s']} | {r['gnu_patch_s']} | "
            f"{r['quilt_s']} | {_ratio(r['patchset_s'], r['gnu_patch_s'])} | {_ratio(r['patchset_s'], r['quilt_s'])} |"
        )
    for r in res["apply"]:
        for key in ("diffs", "quilt_diffs", "roundtrip_diffs"):
            for d in r[key]:
                lines.append(f"- {r['package']} ({key}): {d}")
    for s in res["skipped"]:
        lines.append(f"- {s['package']}: skipped: {s['reason']}")
    lines += [
        "",
        "## Rebase: bookworm series onto the trixie upstream tree, against what Debian did",
        "",
        "Each bookworm patch's patchset verdict (carried / already upstream (incl. superseded) /",
        "conflict) against Debian's action in trixie: *kept* (same body), *refreshed* (same name, new",
        "body), *dropped* (gone from the series). A conflict is set aside (held) and the rest carried,",
        "as a human would. *False already upstream*: patchset calls a patch already upstream that",
        "Debian kept. *Carried = trixie*: files whose patches are the same on both sides and include a",
        "patch Debian kept unchanged; patchset's carried result must equal trixie's `dpkg-source -x`.",
        "",
        "| package | bookworm → trixie | carried: kept / refreshed / dropped | already upstream: kept / refreshed / dropped | conflict: kept / refreshed / dropped | false already upstream | carried = trixie | seconds |",
        "|---|---|---|---|---|---:|---|---:|",
    ]
    for r in res["rebase"]:
        if "skipped" in r:
            lines.append(f"| {r['package']} | {r['old']} → n/a | {r['skipped']} | | | | | |")
            continue
        t = r["table"]

        def cells(verdicts: tuple[str, ...], t=t) -> str:
            return " / ".join(
                str(sum(t.get(f"{v}|{a}", 0) for v in verdicts)) for a in ("kept", "refreshed", "dropped")
            )

        lines.append(
            f"| {r['package']} | {r['old']} → {r['new']} | {cells(('carried',))} | "
            f"{cells(('already-upstream', 'superseded'))} | {cells(('conflict',))} | "
            f"{len(r['false_already_upstream'])} | {r['equal_files']}/{r['compared_files']} files | {r['seconds']} |"
        )
    for r in res["rebase"]:
        for name in r.get("false_already_upstream", []):
            lines.append(f"- {r['package']}: false already upstream: {name}")
        for f in r.get("unequal", []):
            lines.append(f"- {r['package']}: carried result differs from trixie: {f}")
    lines += ["", *DECISIONS.splitlines()]
    return "\n".join(lines) + "\n"


DECISIONS = """## Format decisions this corpus forced (each with a test in `tests/test_realworld.py`)

- **File names with spaces outside a git diff** (python3.11: `+++ b/Misc/NEWS.d/next/Core and
  Builtins/x.rst` with no `diff --git` line and no timestamp): patchset follows GNU patch, which
  Debian applies with. Checked with a real GNU patch 2.7.6 run here: without a tab the name ends at
  the first blank (the file written is `Misc/NEWS.d/next/Core`, which is what `dpkg-source -x`
  leaves in python3.11's tree); when a tab separates the name from a timestamp, the blanks belong to
  the name. git diffs (`diff --git`) keep the whole name. `apply` and the comparison with GNU patch
  agree on both forms.
- **`diff -ruN` new files**: an Epoch timestamp on the old side (UTC, any local time with a whole
  hour offset between -25 and +26 hours, with or without a zone, the ctime form) makes a creation
  when the hunks agree (`@@ -0,0 …`); on an existing file with ordinary hunks it does not (GNU patch
  patches the file). A bare `@@ -0,0 +1,N @@` on a file the base lacks is a creation in `rebase`
  too, as it is for `apply` and GNU patch.
- **Data-less `Binary files … differ` stanzas** (glibc's `git-updates.diff`): passed over as GNU
  patch does: a creation leaves an empty file, which `apply --remove-empty` (GNU `patch -E`, what
  dpkg-source uses) removes again.
- **NUL bytes** in a text patch (vim) are text: `import` refuses only a file in which no diff is
  found.
- **Quilt series**: sub-directories are kept (`locale/x.diff`), `-pN` is kept through export, and
  same-named patches in different sub-directories get ids from their paths.
- **quilt push** is run with `QUILT_PATCH_OPTS=-E`, as dpkg-source applies (plain quilt would leave
  the empty files that `-E` removes).
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--packages", default=",".join(debian.PACKAGES))
    ap.add_argument("--no-rebase", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--json-out", type=Path, help="write the results here after every package")
    ap.add_argument("--markdown", type=Path, help="write the tables to this file")
    ap.add_argument("--from-json", type=Path, nargs="+", help="render earlier --json results (merged) instead")
    args = ap.parse_args()
    if args.from_json:
        res: dict = {"apply": [], "rebase": [], "skipped": []}
        for f in args.from_json:
            part = json.loads(f.read_text())
            for key in res:
                done = {r["package"] for r in res[key]}
                res[key] += [r for r in part[key] if r["package"] not in done]
        order = {p: i for i, p in enumerate(debian.PACKAGES)}
        for key in res:
            res[key].sort(key=lambda r: order.get(r["package"], 99))
        text = markdown(res)
        if args.markdown:
            args.markdown.write_text(text)
        print(text)
        return 0
    missing = debian.tools_missing()
    if missing:
        print(f"cannot run: {missing}", file=sys.stderr)
        return 2
    res = run([p for p in args.packages.split(",") if p], not args.no_rebase, args.json_out)
    if args.json:
        print(json.dumps(res, indent=1))
    else:
        print(markdown(res))
    if args.markdown:
        args.markdown.write_text(markdown(res))
    ok = all(r["identical"] for r in res["apply"]) and not any(r.get("false_already_upstream") for r in res["rebase"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""The mutation tier: how many small, realistic bugs in the core do the tests catch?

Mutants come from Cosmic Ray's operators (a flipped or loosened comparison, an off-by-one number, a
dropped ``not``, ``and``/``or`` swapped, a loop that never runs, a handler that no longer catches).
The tier never edits the checkout: it copies the packages into a temporary tree laid out as
setuptools installs them (``tracker/`` as ``patchset/tracker``, see ``[tool.setuptools.package-dir]``),
puts that tree first on ``PYTHONPATH`` and mutates the copy. Per package it runs the mapped test files
once under coverage with one context per test, then runs each mutant against only the tests that
execute its line, fastest first, stopping at the first failure.

    python bench/mutation.py [PACKAGE ...] [--changed BASE] [--budget SECONDS] [--json]

``--changed BASE`` mutates only the core lines a ``git diff BASE`` adds or changes (what CI runs).
Exit codes: 0 every package at or above the bar, 1 a package under it (with ``--changed``: a package
listed in ``gated``, those that reached the bar; or an equivalence entry that no longer matches a
surviving mutant), 2 bad arguments or configuration, 3 the unmutated tests fail.
Configuration: ``[tool.patchset.mutation]`` in pyproject.toml; equivalent mutants:
docs/mutation-equivalent.toml; docs/mutation.md says more.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import tomli
from rich.console import Console
from rich.progress import Progress

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENTS = ROOT / "docs" / "mutation-equivalent.toml"
err = Console(stderr=True, highlight=False)


@dataclasses.dataclass
class Mutant:
    file: str  # repository-relative path of the module
    line: int
    operator: str
    occurrence: int
    before: str  # the source line
    after: str  # the same line mutated
    code: str  # the whole mutated module
    function: str = ""  # the def it is in ("" at module level)
    above: str = ""  # the line before it (stripped): tells apart equal lines of one function
    tests: list[str] = dataclasses.field(default_factory=list)
    outcome: str = "pending"  # killed | survived | uncovered | equivalent | timeout | error | not-run
    reason: str = ""

    def key(self) -> tuple[str, str, str]:
        return (self.file, self.operator.removeprefix("core/"), self.before.strip())

    def survivor(self) -> dict[str, object]:
        return {
            "file": self.file,
            "line": self.line,
            "function": self.function,
            "operator": self.operator.removeprefix("core/"),
            "before": self.before.strip(),
            "after": self.after.strip(),
            "outcome": self.outcome,
            "reason": self.reason,
        }


@dataclasses.dataclass
class Config:
    packages: dict[str, dict[str, list[str]]]
    operators: list[str]
    bar: float
    markers: str
    seed: int
    gated: list[str]  # packages that reached the bar: a --changed run under it fails (a ratchet)


def load_config() -> Config:
    data = tomli.loads((ROOT / "pyproject.toml").read_text())["tool"]["patchset"]["mutation"]
    return Config(
        packages=data["packages"],
        operators=data["operators"],
        bar=float(data["bar"]),
        markers=data["markers"],
        seed=int(data.get("seed", 0)),
        gated=list(data.get("gated", [])),
    )


def load_equivalents() -> list[dict[str, str]]:
    entries = tomli.loads(EQUIVALENTS.read_text()).get("equivalent", []) if EQUIVALENTS.exists() else []
    for n, e in enumerate(entries, 1):
        missing = {"file", "operator", "line", "reason"} - e.keys()
        if missing or not e.get("reason", "").strip():
            raise SystemExit(
                f"error: {EQUIVALENTS.relative_to(ROOT)}: entry {n} needs file, operator, line and a reason"
            )
    return entries


def installed_name(path: str) -> str:
    """Where a repository file sits once installed (``tracker/actions.py`` -> ``patchset/tracker/actions.py``)."""
    mapping = tomli.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    for package, folder in sorted(mapping.items(), key=lambda kv: -len(kv[1])):
        if path == folder or path.startswith(folder.rstrip("/") + "/"):
            return package.replace(".", "/") + path[len(folder) :]
    return path


def build_mirror(dest: Path) -> None:
    """A copy of the checkout whose ``patchset/`` holds every package where setuptools installs it.

    The tests run from the copy, so its ``patchset`` comes first on ``sys.path`` and the checkout is
    never touched (nor are the tests' own writes, if any, let into it)."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, text=True
    )
    if listed.returncode == 0:
        files = listed.stdout.split("\0")
    else:  # an export (git archive, an sdist): every file but caches and state
        skip = {"__pycache__", ".pytest_cache", ".hypothesis", ".patchset", ".git", "build", "dist"}
        files = [str(f.relative_to(ROOT)) for f in ROOT.rglob("*") if not skip & set(f.relative_to(ROOT).parts)]
    for rel in filter(None, files):
        if (ROOT / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, dest / rel, follow_symlinks=False)
    mapping = tomli.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package, folder in mapping.items():
        if package.replace(".", "/") != folder:
            shutil.copytree(ROOT / folder, dest / package.replace(".", "/"), ignore=ignore, dirs_exist_ok=True)


def operator_names(patterns: list[str]) -> list[str]:
    import cosmic_ray.plugins

    wanted = [re.compile(p) for p in patterns]
    return [n for n in cosmic_ray.plugins.operator_names() if any(w.fullmatch(n) for w in wanted)]


def enumerate_mutants(rel: str, source: str, operators: list[str], keep: set[int] | None = None) -> list[Mutant]:
    import cosmic_ray.plugins
    from cosmic_ray.ast import ast_nodes, get_ast
    from cosmic_ray.mutating import mutate_code

    lines = source.splitlines()
    out: list[Mutant] = []
    for name in operators:
        operator = cosmic_ray.plugins.get_operator(name)()
        positions = [
            (node, start) for node in ast_nodes(get_ast(source)) for start, _ in operator.mutation_positions(node)
        ]
        for occurrence, (node, (line, _col)) in enumerate(positions):
            if (keep is not None and line not in keep) or in_signature_types(node):
                continue
            code = mutate_code(source, operator, occurrence)
            if code is None or code == source:
                continue
            mutated = code.splitlines()
            after = mutated[line - 1] if line - 1 < len(mutated) else ""
            out.append(
                Mutant(
                    rel,
                    line,
                    name,
                    occurrence,
                    lines[line - 1],
                    after,
                    code,
                    enclosing(lines, line),
                    lines[line - 2].strip() if line > 1 else "",
                )
            )
    return out


def in_signature_types(node) -> bool:
    """Annotations and the bare ``*`` of a signature: mutating them changes no behaviour the tests could see."""
    if (
        node.type == "operator"
        and node.value in ("*", "/")
        and node.parent is not None
        and node.parent.type in ("param", "parameters", "typedargslist")
    ):
        return True
    child, parent = node, node.parent
    while parent is not None:
        if parent.type in ("param", "funcdef") and getattr(parent, "annotation", None) is child:
            return True
        if parent.type == "annassign" and parent.children[1] is child:
            return True
        if parent.type == "tfpdef" and child is parent.children[-1]:
            return True
        child, parent = parent, parent.parent
    return False


def enclosing(lines: list[str], line: int) -> str:
    """The name of the innermost ``def`` around 1-based ``line``."""
    indent = len(lines[line - 1]) - len(lines[line - 1].lstrip())
    for text in reversed(lines[: line - 1]):
        m = re.match(r"(\s*)(?:async\s+)?def\s+(\w+)", text)
        if m and len(m.group(1)) < indent:
            return m.group(2)
    return ""


def changed_lines(base: str, files: list[str]) -> dict[str, set[int]]:
    """The lines of ``files`` a ``git diff base`` adds or changes (new-side numbers)."""
    diff = subprocess.run(
        ["git", "diff", "-U0", "--no-color", base, "--", *files], cwd=ROOT, capture_output=True, text=True
    )
    if diff.returncode != 0:
        raise SystemExit(f"error: git diff {base} failed: {diff.stderr.strip()} (give a commit, e.g. HEAD~1)")
    out: dict[str, set[int]] = {}
    current = None
    for line in diff.stdout.splitlines():
        if line.startswith("+++ "):
            current = line[6:] if line.startswith("+++ b/") else None
        elif line.startswith("@@") and current:
            m = re.search(r"\+(\d+)(?:,(\d+))?", line)
            assert m
            start, count = int(m.group(1)), int(m.group(2) or 1)
            out.setdefault(current, set()).update(range(start, start + count))
    return out


def pytest_env(mirror: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(mirror), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("PYTEST_ADDOPTS", None)
    return env


def covering_tests(pkg: str, cfg: Config, mirror: Path, work: Path, modules: list[str]) -> tuple[dict, dict]:
    """Run the package's tests once, unmutated, under coverage: {file: {line: [test ids]}}, {test id: seconds}."""
    from coverage import CoverageData

    cov_file, junit = work / f".coverage.{pkg}", work / f"{pkg}.xml"
    targets = [str(mirror / installed_name(m)) for m in modules]
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-m",
        cfg.markers,
        *[f"--cov={Path(t).parent}" for t in targets],
        "--cov-context=test",
        "--cov-report=",
        f"--junitxml={junit}",
        *[t for t in cfg.packages[pkg]["tests"] if (ROOT / t).exists()],  # an older tree lacks newer files
    ]
    env = pytest_env(mirror) | {"COVERAGE_FILE": str(cov_file)}
    env.pop("PYTHONDONTWRITEBYTECODE")  # the baseline compiles the copy once; each mutant recompiles its module
    run = subprocess.run(cmd, cwd=mirror, env=env, capture_output=True, text=True)
    if run.returncode != 0:
        err.print(run.stdout[-3000:], markup=False)
        err.print(f"error: the unmutated tests of {pkg} fail (exit {run.returncode}); fix them first", markup=False)
        raise SystemExit(3)
    data = CoverageData(basename=str(cov_file))
    data.read()
    by_line: dict[str, dict[int, list[str]]] = {}
    for rel, target in zip(modules, targets, strict=True):
        if target not in data.measured_files():
            raise SystemExit(f"error: coverage of {pkg} did not measure {rel}: is the copy first on the path?")
        found = data.contexts_by_lineno(target)
        by_line[rel] = {ln: sorted({c.rsplit("|", 1)[0] for c in ctx if c}) for ln, ctx in found.items()}
        # lines run only at import (constants, defaults, decorators) serve every test of the module
        users = sorted({t for tests in by_line[rel].values() for t in tests})
        by_line[rel] = {ln: tests or users for ln, tests in by_line[rel].items()}
    seconds: dict[str, float] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        parts = (case.get("classname") or "").split(".")
        cls = [parts.pop()] if parts and parts[-1][:1].isupper() else []
        seconds["::".join(["/".join(parts) + ".py", *cls, case.get("name") or ""])] = float(case.get("time") or 0)
    return by_line, seconds


def run_mutant(m: Mutant, mirror: Path, cfg: Config, seconds: dict[str, float]) -> None:
    target = mirror / installed_name(m.file)
    original = target.read_text()
    order = sorted(m.tests, key=lambda t: seconds.get(t.split("[")[0], seconds.get(t, 1.0)))
    budget = 20 + 4 * sum(seconds.get(t, 1.0) for t in order)
    target.write_text(m.code)
    try:
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-x",
                "-q",
                "-p",
                "no:cacheprovider",
                "-m",
                cfg.markers,
                "-o",
                "addopts=",
                *order,
            ],
            cwd=mirror,
            env=pytest_env(mirror),
            capture_output=True,
            text=True,
            timeout=budget,
        )
        if run.returncode == 0:
            m.outcome = "survived"
        elif run.returncode in (1, 2):  # a test failed, or the mutant broke the import
            m.outcome = "killed"
        else:
            m.outcome, m.reason = "error", f"pytest exit {run.returncode}: {run.stdout.strip()[-300:]}"
    except subprocess.TimeoutExpired:
        m.outcome = "timeout"  # counted as killed: the tests notice a mutant that hangs
    finally:
        target.write_text(original)


def mark_equivalents(mutants: list[Mutant], entries: list[dict[str, str]]) -> list[dict[str, str]]:
    """Survivors listed as equivalent are taken out of the score; return entries whose mutant was killed."""
    stale = []
    for e in entries:
        key = (e["file"], e["operator"].removeprefix("core/"), e["line"].strip())
        hits = [
            m
            for m in mutants
            if m.key() == key
            and e.get("function", m.function) == m.function
            and e.get("above", m.above).strip() == m.above
            and e.get("after", m.after).strip() == m.after.strip()
        ]
        for m in hits:
            if m.outcome in ("survived", "uncovered"):
                m.outcome, m.reason = "equivalent", e["reason"]
        judged = [m for m in hits if m.outcome != "not-run"]  # a budget's unrun mutant says nothing of it
        if judged and not any(m.outcome == "equivalent" for m in judged):
            stale.append(e)
    return stale


def score(mutants: list[Mutant]) -> dict[str, object]:
    count = {
        k: sum(m.outcome == k for m in mutants)
        for k in ("killed", "timeout", "survived", "uncovered", "equivalent", "error", "not-run")
    }
    judged = count["killed"] + count["timeout"] + count["survived"] + count["uncovered"]
    killed = count["killed"] + count["timeout"]
    return {**count, "mutants": len(mutants), "score": round(killed / judged, 4) if judged else None}


def main(argv: list[str] | None = None) -> int:
    cfg = load_config()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("packages", nargs="*", metavar="PACKAGE", help=f"of: {', '.join(cfg.packages)} (default: all)")
    ap.add_argument("--changed", metavar="BASE", help="only the core lines a git diff against BASE adds or changes")
    ap.add_argument(
        "--budget", type=float, metavar="SECONDS", help="start no mutant after this long (the rest: not-run)"
    )
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = ap.parse_args(argv)
    unknown = [p for p in args.packages if p not in cfg.packages]
    if unknown:
        ap.error(f"unknown package {', '.join(unknown)}; the core packages are {', '.join(cfg.packages)}")
    packages = args.packages or list(cfg.packages)
    gone = [m for p in packages for m in cfg.packages[p]["modules"] if not (ROOT / m).is_file()]
    if gone:  # a module moved: a stale path would mutate nothing, or end in a traceback
        ap.error(f"pyproject.toml [tool.patchset.mutation]: no such module {', '.join(gone)}; give its path now")
    equivalents = load_equivalents()
    operators = operator_names(cfg.operators)
    lines = None
    if args.changed:
        lines = changed_lines(args.changed, [m for p in packages for m in cfg.packages[p]["modules"]])
        packages = [p for p in packages if any(m in lines for m in cfg.packages[p]["modules"])]
    started = time.monotonic()
    report: dict[str, dict[str, object]] = {}
    stale_all: list[dict[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="patchset-mutation-") as tmp:
        mirror, work = Path(tmp) / "site", Path(tmp) / "work"
        work.mkdir()
        build_mirror(mirror)
        for pkg in packages:
            t0 = time.monotonic()
            modules = cfg.packages[pkg]["modules"]
            mutants = [
                m
                for rel in modules
                for m in enumerate_mutants(
                    rel, (ROOT / rel).read_text(), operators, None if lines is None else lines.get(rel, set())
                )
            ]
            if not mutants:
                continue
            err.print(f"{pkg}: {len(mutants)} mutants; measuring which tests run each line ...", markup=False)
            by_line, seconds = covering_tests(pkg, cfg, mirror, work, modules)
            random.Random(cfg.seed).shuffle(mutants)  # a run the budget cuts short is still a sample of all
            with Progress(console=err, transient=True, disable=args.json and not err.is_terminal) as bar:
                task = bar.add_task(pkg, total=len(mutants))
                for m in mutants:
                    m.tests = by_line[m.file].get(m.line, [])
                    if args.budget is not None and time.monotonic() - started > args.budget:
                        m.outcome = "not-run"
                    elif not m.tests:
                        m.outcome = "uncovered"
                    else:
                        run_mutant(m, mirror, cfg, seconds)
                    bar.advance(task)
            err.print(f"{pkg}: done in {time.monotonic() - t0:.0f}s", markup=False)
            stale_all += mark_equivalents(mutants, [e for e in equivalents if e["file"] in modules])
            mutants.sort(key=lambda m: (m.file, m.line, m.operator))
            report[pkg] = {
                **score(mutants),
                "seconds": round(time.monotonic() - t0, 1),
                "survivors": [m.survivor() for m in mutants if m.outcome in ("survived", "uncovered")],
                "equivalents": [m.survivor() for m in mutants if m.outcome == "equivalent"],
                "errors": [m.survivor() for m in mutants if m.outcome == "error"],
            }
    under = [p for p, r in report.items() if r["score"] is not None and r["score"] < cfg.bar]
    # --changed (CI) holds the packages that reached the bar to it; the others are reported until they do
    failing = [p for p in under if p in cfg.gated or not args.changed]
    doc = {
        "bar": cfg.bar,
        "seconds": round(time.monotonic() - started, 1),
        "changed": args.changed,
        "packages": report,
        "under_bar": under,
        "failing": failing,
        "gated": cfg.gated,
        "stale_equivalents": stale_all,
    }
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print_report(doc)
    return 1 if failing or stale_all else 0


def print_report(doc: dict) -> None:
    out = Console(highlight=False, soft_wrap=True)
    if not doc["packages"]:
        out.print("mutation: no core line to mutate" + (f" changed since {doc['changed']}" if doc["changed"] else ""))
    for pkg, r in doc["packages"].items():
        pct = "n/a" if r["score"] is None else f"{100 * r['score']:.1f}%"
        out.print(
            f"{pkg}: {pct} killed ({r['killed'] + r['timeout']} of {r['mutants'] - r['equivalent'] - r['not-run'] - r['error']};"
            f" {r['equivalent']} equivalent, {r['not-run']} not run, {r['error']} errors) in {r['seconds']}s",
            markup=False,
        )
        for s in r["survivors"] + r["errors"]:
            tag = "" if s["outcome"] == "survived" else f" [{s['outcome']}]"
            out.print(
                f"  {s['file']}:{s['line']} ({s['function'] or 'module'}) {s['operator']}{tag}: {s['before']}  ->  {s['after']}",
                markup=False,
            )
    for e in doc["stale_equivalents"]:
        out.print(
            f"error: {EQUIVALENTS.relative_to(ROOT)}: {e['file']} `{e['line']}` {e['operator']} is killed now;"
            " remove the entry",
            markup=False,
        )
    if doc["failing"]:
        out.print(
            f"error: under the bar of {100 * doc['bar']:.0f}%: {', '.join(doc['failing'])}"
            " (kill the survivors above, or list a truly equivalent one in docs/mutation-equivalent.toml)",
            markup=False,
        )
    waiting = [p for p in doc["under_bar"] if p not in doc["failing"]]
    if waiting:
        out.print(
            f"note: under the bar of {100 * doc['bar']:.0f}%, not gated yet: {', '.join(waiting)}"
            " (a package joins `gated` in pyproject's [tool.patchset.mutation] once its full run reaches the bar)",
            markup=False,
        )
    out.print(f"mutation tier: {doc['seconds']}s", markup=False)


if __name__ == "__main__":
    sys.exit(main())

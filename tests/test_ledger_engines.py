"""``[engines.NAME]`` in the ledger: read with presets filled in, refused with file, line and a hint
when a template names an unknown placeholder, a type is wrong or a test names an engine nobody defined."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchset.errors import InputError, LedgerError
from patchset.ledger.store import load_ledger
from patchset.verify.engines.definition import DOCKER_START, resolve_engine
from patchset.verify.engines.launch import EngineLaunch
from patchset.verify.engines.process import EngineProcess

HEAD = 'schema = 1\n[targets.vllm]\nupstream = "u"\nbase_image = "vllm/vllm-openai:nightly-7f1a539"\ninstalled_root = "/usr/local/lib/python3.12/dist-packages"\n\n'
PATCH = '[[patch]]\nid = "a"\ntarget = "vllm"\ntitle = "t"\norigin = "ours"\n'


def _ledger(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "patches.toml"
    path.write_text(text)
    return path


BAD = {
    "unknown-placeholder": (
        '[engines.spark]\nstart = ["./launch.sh", "{tree}", "{treee}"]\n',
        8,
        "unknown placeholder {treee}",
    ),
    "spliced-inside-an-element": (
        '[engines.spark]\nstart = ["./launch.sh", "--extra={args}"]\n',
        8,
        "must be a whole argv element",
    ),
    "format-spec": ('[engines.spark]\nstart = ["x", "{port:05d}"]\n', 8, "takes no format spec"),
    "malformed-brace": ('[engines.spark]\nstart = ["x", "{tree"]\n', 8, "is malformed"),
    "start-a-string": ('[engines.spark]\nstart = "./launch.sh {tree}"\n', 8, "expected a list of strings"),
    "bad-preset": ('[engines.spark]\npreset = "dokker"\n', 8, "'dokker' is not one of"),
    "no-start": ('[engines.spark]\nurl = "http://10.0.0.1:8000"\n', 7, "has no `start` command"),
    "fixed-port-in-parallel": (
        '[engines.spark]\nstart = ["x"]\nport = 8000\nmax_parallel = 2\n',
        10,
        "fixed port 8000: two starts at once",
    ),
    "max-parallel-zero": ('[engines.spark]\nstart = ["x"]\nmax_parallel = 0\n', 9, "max_parallel 0 is less than 1"),
    "env-placeholder": ('[engines.spark]\nstart = ["x"]\nenv = { A = "{nope}" }\n', 9, "unknown placeholder {nope}"),
    "ready-not-a-path": ('[engines.spark]\nstart = ["x"]\nready = "v1/models"\n', 9, "is not a path on the server"),
    "bad-delivers": ('[engines.spark]\nstart = ["x"]\ndelivers = "rsync"\n', 9, "'rsync' is not one of"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_engine_definitions(run, tmp_path: Path, case: str) -> None:
    table, line, message = BAD[case]
    _ledger(tmp_path, HEAD + table + "\n" + PATCH)
    with pytest.raises(LedgerError) as exc:
        load_ledger(tmp_path / "patches.toml")
    rendered = exc.value.render()
    assert f"patches.toml:{line}" in rendered, rendered
    assert message in rendered, rendered
    r = run("validate", cwd=tmp_path)  # the CLI says the same, exit 2, no traceback
    assert r.code == 2 and message in r.stderr and "Traceback" not in r.stderr


TEST_BAD = {
    "unknown-engine": ('kind = "serving"\nchecks = ["decode"]\nengine = "sparc"\n', "unknown engine 'sparc'", "spark"),
    "engine-on-a-command-test": (
        'command = "pytest"\nengine = "spark"\n',
        "belongs to a test that starts an engine",
        "",
    ),
    "unknown-serving-check": (
        'kind = "serving"\nchecks = ["decoding"]\n',
        "unknown serving check 'decoding'",
        "decode",
    ),
    "too-few-repeats": ('kind = "serving"\nchecks = ["decode"]\nrepeats = 2\n', "at least 3 repeats", ""),
    "tolerance-not-a-fraction": ('kind = "serving"\nchecks = ["decode"]\ntolerance = 3\n', "not a fraction", ""),
    "tolerance-for-another-check": (
        'kind = "serving"\nchecks = ["decode"]\ntolerances = { cache-hits = 0.02 }\n',
        "a check this test does not run",
        "",
    ),
    "serving-key-on-longctx": ('kind = "longctx"\nchecks = ["resume"]\nstreams = 4\n', "belongs to a serving test", ""),
}


@pytest.mark.parametrize("case", sorted(TEST_BAD))
def test_bad_engine_tests(tmp_path: Path, case: str) -> None:
    body, message, hint = TEST_BAD[case]
    _ledger(tmp_path, HEAD + '[engines.spark]\nstart = ["x"]\n\n' + PATCH + "[[patch.tests]]\n" + body)
    with pytest.raises(LedgerError) as exc:
        load_ledger(tmp_path / "patches.toml")
    rendered = exc.value.render()
    assert "patches.toml:" in rendered and message in rendered, rendered
    assert hint in rendered


def test_presets_fill_in_what_the_ledger_leaves_out(tmp_path: Path) -> None:
    path = _ledger(
        tmp_path,
        HEAD
        + '[engines.box]\npreset = "docker"\n\n'
        + '[engines.spark]\nstart = ["{ledger}/launch.sh", "{tree}"]\nurl = "http://10.0.0.1:8000"\nport = 8000\n'
        + 'stop = ["{ledger}/stop.sh"]\nlogs = ["{ledger}/logs.sh", "{logdir}"]\nready_timeout = 3600\n\n'
        + PATCH
        + '[[patch.tests]]\nkind = "serving"\nchecks = ["decode"]\nengine = "spark"\n',
    )
    ledger = load_ledger(path)
    assert set(ledger.engines) == {"box", "spark"} and ledger.engines["spark"]["line"] == 10
    assert ledger.patches[0].tests[0].engine == "spark"
    target = ledger.targets["vllm"]
    box = resolve_engine(ledger, "box", target)
    assert box.start == DOCKER_START and box.delivers == "overlay" and box.max_parallel == 1
    assert box.stop == ["docker", "rm", "-f", "{name}"] and box.logs == ["docker", "logs", "{name}"]
    assert box.image == "vllm/vllm-openai:nightly-7f1a539"  # the target's base image
    spark = resolve_engine(ledger, "spark", target)
    assert spark.delivers == "tree" and spark.max_parallel == 1 and spark.port == 8000
    assert spark.ready == "/v1/models" and spark.ready_timeout == 3600
    cpu = resolve_engine(ledger, "vllm-cpu", target)  # a bare preset name needs no table
    assert cpu.preset == "vllm-cpu" and cpu.delivers == "pythonpath" and cpu.import_check == "vllm"
    assert (
        box.fingerprint() != spark.fingerprint()
        and cpu.fingerprint() == resolve_engine(ledger, "vllm-cpu", target).fingerprint()
    )
    with pytest.raises(InputError, match="unknown engine 'sprak'") as exc:
        resolve_engine(ledger, "sprak", target)
    assert "spark" in (exc.value.hint or "")


def test_docker_mounts_every_overlay_file_read_only(tmp_path: Path) -> None:
    path = _ledger(tmp_path, HEAD + '[engines.box]\npreset = "docker"\n\n' + PATCH)
    ledger = load_ledger(path)
    box = resolve_engine(ledger, "box", ledger.targets["vllm"])
    overlay = tmp_path / "overlay"
    f = overlay / "usr/local/lib/python3.12/dist-packages/vllm/v1/core/kv_cache_utils.py"
    f.parent.mkdir(parents=True)
    f.write_text("x = 1\n")
    launch = EngineLaunch(
        box,
        tmp_path / "tree",
        "glm-5.3-flash",
        tmp_path / "e.log",
        tmp_path / "logs",
        "patchset-box-001-with",
        tmp_path,
        args=["--tensor-parallel-size", "4"],
        overlay=overlay,
        root="/usr/local/lib/python3.12/dist-packages",
    )
    proc = EngineProcess(launch)
    argv = proc.argv(box.start)
    assert argv[:4] == ["docker", "run", "--rm", "--name"] and argv[4] == "patchset-box-001-with"
    i = argv.index("-v")
    assert argv[i + 1] == f"{f}:/usr/local/lib/python3.12/dist-packages/vllm/v1/core/kv_cache_utils.py:ro"
    assert argv[i + 2] == "vllm/vllm-openai:nightly-7f1a539" and argv[i + 3] == "glm-5.3-flash"
    assert argv[-2:] == ["--tensor-parallel-size", "4"] and str(proc.port) in argv
    assert proc.argv(box.stop) == ["docker", "rm", "-f", "patchset-box-001-with"]


def test_overlay_delivery_needs_an_installed_root(tmp_path: Path) -> None:
    path = _ledger(
        tmp_path,
        'schema = 1\n[targets.vllm]\nupstream = "u"\nbase_image = "img"\n\n[engines.box]\npreset = "docker"\n\n'
        + PATCH,
    )
    ledger = load_ledger(path)
    with pytest.raises(InputError, match="delivers an overlay, but target vllm has no installed_root"):
        resolve_engine(ledger, "box", ledger.targets["vllm"])


# --------------------------------------------------------------------------- the production ledger's engine

REPO = Path(__file__).resolve().parents[1]
SPARK = REPO / "engines" / "spark"


def test_the_production_ledger_runs_its_engine_tests_on_the_spark_engine() -> None:
    ledger = load_ledger(REPO / "patches.toml")
    spark = resolve_engine(ledger, "spark", ledger.targets["vllm"])
    assert spark.max_parallel == 1 and spark.port == 8000 and spark.delivers == "overlay"
    assert spark.url == "http://$SPARK_HEAD:8000" and spark.ready_timeout == 3600
    assert spark.image == "vllm/vllm-openai:nightly-7f1a5398e9610d96c473931a26c0e12bbe0d0423"
    engine_tests = [(p.id, t) for p in ledger.patches for t in p.tests if t.kind in ("longctx", "serving")]
    assert engine_tests and all(t.engine == "spark" and "spark" in t.tags for _, t in engine_tests)
    serving = {pid: t.checks for pid, t in engine_tests if t.kind == "serving"}
    # the patches whose purpose is speed (drafter, CUDA graph, fused projection) or caching (prefix match, KV group)
    assert set(serving) == {
        "u57632-dflash-context-kv-in-draft-cudagraph",
        "10-dflash2-drafter-w8a16",
        "08-glm5-drafter-kv-group-flag",
        "p2-mla-fused-qkv-a-w8a16",
        "u58021-single-group-prefix-match-unit",
    }
    assert (
        "spec-accept" in serving["10-dflash2-drafter-w8a16"]
        and "cache-hits" in serving["u58021-single-group-prefix-match-unit"]
    )


FAKE_SSH = """#!/bin/sh
# ssh HOST COMMAND: run COMMAND here, as if on HOST
host=$1
shift
FAKE_NODE=$host sh -c "$*"
"""
FAKE_DOCKER = """#!/bin/sh
echo "$FAKE_NODE $*" >> "$FAKE_CALLS"
"""


def _fake_cluster(tmp_path: Path) -> dict[str, str]:
    import os

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("ssh", FAKE_SSH), ("docker", FAKE_DOCKER)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE_CALLS": str(tmp_path / "calls"),
        "SPARK_NODES": "10.0.0.10 10.0.0.11 10.0.0.12 10.0.0.13",
        "SPARK_MASTER_PORT": "29500",
        "SPARK_MODEL": "/models/glm",
        "SPARK_SPEC_ARGS": "--speculative-config {}",
        "VLLM_DRAFTER_W8A16": "1",
    }


def test_the_spark_launcher_starts_workers_first_and_the_head_last(tmp_path: Path) -> None:
    import os
    import subprocess

    env = dict(os.environ) | _fake_cluster(tmp_path)
    overlay = tmp_path / "overlay"
    f = overlay / "usr/local/lib/python3.12/dist-packages/vllm/v1/core/kv_cache_utils.py"
    f.parent.mkdir(parents=True)
    f.write_text("x = 1\n")
    hostile = f.parent / "a;touch pwned; $(touch pwned2).py"  # a file name from a patch body is data
    hostile.write_text("y = 2\n")
    name, image = "patchset-spark-001-with_the_series", "vllm/vllm-openai:nightly-7f1a539"
    argv = [str(SPARK / "launch.sh"), name, str(overlay), "/usr/local/lib/python3.12/dist-packages", image]
    proc = subprocess.run(
        [*argv, str(tmp_path / "logs"), "--max-num-seqs", "4"], env=env, capture_output=True, text=True, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    runs = [c for c in (tmp_path / "calls").read_text().splitlines() if " run " in c]
    assert [r.split()[0] for r in runs] == ["10.0.0.13", "10.0.0.12", "10.0.0.11", "10.0.0.10"]  # ranks 3, 2, 1, 0
    for rank, r in zip((3, 2, 1, 0), runs, strict=True):
        assert f"--node-rank {rank} " in r and "--master-addr 10.0.0.10 --master-port 29500" in r
        assert ("--headless" in r) == (rank != 0) and "--tensor-parallel-size 4" in r and "--nnodes 4" in r
        assert "--served-model-name glm-5.3-flash" in r and "--block-size 2304" in r and "--port 8000" in r
        assert "-e VLLM_DRAFTER_W8A16" in r and "-e VLLM_ENGINE_READY_TIMEOUT_S=3600" in r
        assert (
            f"-v /tmp/patchset-overlay/{name}/usr/local/lib/python3.12/dist-packages/vllm/v1/core/kv_cache_utils.py:"
            in r
        )
        assert r.endswith("--max-num-seqs 4") and f"--entrypoint vllm {image} serve /models/glm" in r
    removes = [c for c in (tmp_path / "calls").read_text().splitlines() if f"rm -f {name}" in c]
    assert len(removes) == 4  # each node's old container goes first
    staged = Path(f"/tmp/patchset-overlay/{name}") / f.relative_to(overlay)
    assert staged.read_text() == "x = 1\n"  # shipped (here: to this machine, four times)
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()
    assert all(f"/{hostile.relative_to(overlay)}:ro" in r for r in runs)  # mounted under its own name

    subprocess.run([str(SPARK / "stop.sh"), name], env=env, check=True)
    stops = [c for c in (tmp_path / "calls").read_text().splitlines() if f"rm -f {name}" in c]
    assert len(stops) == 8 and not staged.exists()
    logs = subprocess.run([str(SPARK / "logs.sh"), name], env=env, capture_output=True, text=True, check=True)
    assert logs.stdout.count("===== rank") == 4 and "rank 0 (10.0.0.10)" in logs.stdout


def test_the_spark_launcher_refuses_what_the_record_does_not_give(tmp_path: Path) -> None:
    import os
    import subprocess

    env = dict(os.environ) | _fake_cluster(tmp_path)
    del env["SPARK_MASTER_PORT"]
    proc = subprocess.run(
        [str(SPARK / "launch.sh"), "n", str(tmp_path), "/r", "img", str(tmp_path / "logs")],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and "SPARK_MASTER_PORT" in proc.stderr and "not recorded" in proc.stderr
    assert not (tmp_path / "calls").exists()  # nothing was started


def test_an_unset_variable_in_an_engine_url_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from patchset.verify.engines.launch import EngineDied

    ledger = load_ledger(REPO / "patches.toml")
    spark = resolve_engine(ledger, "spark", ledger.targets["vllm"])
    launch = EngineLaunch(spark, tmp_path, "m", tmp_path / "e.log", tmp_path / "logs", "n", REPO)
    monkeypatch.delenv("SPARK_HEAD", raising=False)
    with pytest.raises(EngineDied, match=r"needs \$SPARK_HEAD, which is not set"):
        EngineProcess(launch)
    monkeypatch.setenv("SPARK_HEAD", "10.0.0.10")
    assert EngineProcess(launch).url == "http://10.0.0.10:8000"

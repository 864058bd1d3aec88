"""Every rule of the ledger schema (``patchset.ledger.schema``), one case each: a ledger that breaks it
is refused naming the file, the line (marked ``# here`` in the case) and the key, with the rule's
message; the value just inside each bound is accepted. Loaded in-process (``load_ledger``), as every
command loads it."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchset.errors import LedgerError
from tests.support.ledgers import HEAD, PATCH, load_text, refused

ENG = '[engines.spark]\nstart = ["x"]\n'
TEST = HEAD + PATCH + "[[patch.tests]]\n"
SERVING = 'kind = "serving"\nchecks = ["decode"]\n'
SERVE = TEST + SERVING

NO_HINT = ""  # the error must come without a hint
# case: (ledger text, the key the error names, words of its message, words of its hint; None: not checked)
BAD: dict[str, tuple[str, str, str, str | None]] = {
    # the top level and the targets
    "schema-a-string": ('schema = "1"  # here\n', "schema", "expected an integer, got str '1'", None),
    "schema-a-bool": ("schema = true  # here\n", "schema", "expected an integer, got bool True", None),
    "schema-version": ("schema = 2  # here\n", "schema", "schema version 2 is not supported", "reads schema 1"),
    "unknown-top-key-near": ('schema = 1\ntitel = "x"  # here\n', "titel", "unknown key 'titel'", "'title'"),
    "unknown-top-key-far": (
        'schema = 1\nzzzzzz = "x"  # here\n',
        "zzzzzz",
        "unknown key 'zzzzzz'",
        "valid keys here: description, engines, patch, schema, targets, title",
    ),
    "targets-not-tables": ("schema = 1\ntargets = { demo = 1 }  # here\n", "targets", "a table of tables", None),
    "target-name": ('schema = 1\n[targets."a b"]  # here\nupstream = "u"\n', "targets.a b", "not a name", "rename"),
    "target-name-dot-first": ('schema = 1\n[targets.".x"]  # here\n', "targets..x", "not a name", None),
    "github-not-owner-repo": (
        'schema = 1\n[targets.demo]\ngithub = "vllm"  # here\n',
        "targets.demo.github",
        "'vllm' is not an 'owner/repo' name",
        None,
    ),
    "strip-negative": (
        "schema = 1\n[targets.demo]\nstrip = -1  # here\n",
        "targets.demo.strip",
        "strip -1 is negative",
        None,
    ),
    "bad-layout": (
        'schema = 1\n[targets.demo]\nlayout = "sourc"  # here\n',
        "targets.demo.layout",
        "'sourc' is not one of",
        "did you mean 'source'?",
    ),
    "path-map-not-strings": (
        "schema = 1\n[targets.demo]\npath_map = { a = 1 }  # here\n",
        "targets.demo.path_map",
        "expected a table of strings",
        None,
    ),
    # patches
    "id-empty": (
        HEAD + '[[patch]]\nid = ""  # here\ntarget = "demo"\ntitle = "t"\norigin = "ours"\n',
        "patch[0].id",
        "the id is empty",
        None,
    ),
    "id-bad": (
        HEAD + '[[patch]]\nid = "-a"  # here\ntarget = "demo"\ntitle = "t"\norigin = "ours"\n',
        "patch[0].id",
        "'-a' is not an id",
        None,
    ),
    "id-trailing-newline": (
        HEAD + '[[patch]]\nid = "a\\n"  # here\ntarget = "demo"\ntitle = "t"\norigin = "ours"\n',
        "patch[0].id",
        "'a\\n' is not an id",
        None,
    ),
    "id-missing": (
        HEAD + '[[patch]]  # here\ntarget = "demo"\ntitle = "t"\norigin = "ours"\n',
        "patch[0]",
        "missing required key 'id'",
        "add `id = ...`",
    ),
    "title-missing": (
        HEAD + '[[patch]]  # here\nid = "a"\ntarget = "demo"\norigin = "ours"\n',
        "patch[0]",
        "missing required key 'title'",
        None,
    ),
    "patch-not-a-table": ("schema = 1\npatch = [1]  # here\n", "patch", "an array of tables", None),
    "duplicate-id": (
        HEAD + PATCH + '[[patch]]\nid = "b"\ntarget = "demo"\ntitle = "t"\norigin = "ours"\n'
        '[[patch]]\nid = "a"  # here\ntarget = "demo"\ntitle = "t"\norigin = "ours"\n',
        "patch[2].id",
        "duplicate id 'a' (first defined in patch #1)",
        "rename one",
    ),
    "unknown-target-near": (
        HEAD + '[[patch]]\nid = "a"\ntarget = "dem"  # here\ntitle = "t"\norigin = "ours"\n',
        "patch[0].target",
        "unknown target 'dem'",
        "did you mean 'demo'?",
    ),
    "unknown-target-far": (
        HEAD + '[[patch]]\nid = "a"\ntarget = "zzzz"  # here\ntitle = "t"\norigin = "ours"\n',
        "patch[0].target",
        "unknown target 'zzzz'",
        "declare [targets.zzzz] or use one of: demo",
    ),
    "unknown-target-none": (
        'schema = 1\n[[patch]]\nid = "a"\ntarget = "x"  # here\ntitle = "t"\norigin = "ours"\n',
        "patch[0].target",
        "unknown target 'x'",
        "use one of: (none)",
    ),
    "bad-state-far": (HEAD + PATCH + 'state = "zzz"  # here\n', "patch[0].state", "'zzz' is not one of", NO_HINT),
    "held-no-reason": (
        HEAD + PATCH + 'state = "held"  # here\n',
        "patch[0].state",
        "a held patch needs a reason",
        'add `reason = "..."`',
    ),
    "dropped-no-reason": (
        HEAD + PATCH + 'state = "dropped"  # here\n',
        "patch[0].state",
        "a dropped patch needs a reason",
        None,
    ),
    "dropped-empty-reason": (
        HEAD + PATCH + 'state = "dropped"  # here\nreason = ""\n',
        "patch[0].state",
        "a dropped patch needs a reason",
        None,
    ),
    "optional-not-bool": (HEAD + PATCH + "optional = 1  # here\n", "patch[0].optional", "expected true or false", None),
    "files-not-strings": (HEAD + PATCH + "files = [1]  # here\n", "patch[0].files", "expected a list of strings", None),
    "body-outside": (
        HEAD + PATCH + 'body = "a/../../x.patch"  # here\n',
        "patch[0].body",
        "path 'a/../../x.patch' is outside the repository",
        "without '..'",
    ),
    "body-absolute": (HEAD + PATCH + 'body = "/x.patch"  # here\n', "patch[0].body", "outside the repository", None),
    "body-home": (HEAD + PATCH + 'body = "~/x.patch"  # here\n', "patch[0].body", "outside the repository", None),
    "body-empty": (HEAD + PATCH + 'body = ""  # here\n', "patch[0].body", "path '' is outside the repository", None),
    "upstream-ref-list": (
        HEAD + PATCH + '[patch.upstream]\nprs = ["vllm#1", "58021"]  # here\n',
        "patch[0].upstream.prs",
        "'58021' is not an upstream reference",
        None,
    ),
    "upstream-commit": (
        HEAD + PATCH + '[patch.upstream]\ncommits = ["abc12"]  # here\n',
        "patch[0].upstream.commits",
        "'abc12' is not a commit sha",
        None,
    ),
    "source-kind": (
        HEAD + PATCH + '[patch.source]\nkind = "zzz"  # here\n',
        "patch[0].source.kind",
        "'zzz' is not one of",
        NO_HINT,
    ),
    "source-strip": (
        HEAD + PATCH + "[patch.source]\nstrip = -2  # here\n",
        "patch[0].source.strip",
        "strip -2 is negative",
        None,
    ),
    "source-sha256": (
        HEAD + PATCH + '[patch.source]\nsha256 = "ab"  # here\n',
        "patch[0].source.sha256",
        "'ab' is not a sha256",
        None,
    ),
    "status-datetime": (
        HEAD + PATCH + "[patch.status]\nrecorded = 2026-01-02T03:04:05  # here\n",
        "patch[0].status.recorded",
        "expected a date (YYYY-MM-DD), got datetime",
        None,
    ),
    "status-followup": (
        HEAD + PATCH + '[patch.status]\nfollowups = ["reverted vllm#1 of vllm#2"]  # here\n',
        "patch[0].status.followups",
        "is not a follow-up like",
        None,
    ),
    "switches-env": (
        HEAD + PATCH + "[patch.switches]\nenv = { A = 1 }  # here\n",
        "patch[0].switches.env",
        "expected a table of strings, got dict",
        None,
    ),
    "upstream-not-a-table": (
        HEAD + PATCH + 'upstream = "x"  # here\n',
        "patch[0].upstream",
        "expected a table, got str",
        None,
    ),
    "tests-not-tables": (HEAD + PATCH + 'tests = ["x"]  # here\n', "patch[0].tests", "an array of tables", None),
    # generated patches
    "generate-no-command": (
        HEAD + PATCH + '[patch.generate]  # here\nscript = "g.sh"\n',
        "patch[0].generate",
        "missing required key 'command'",
        None,
    ),
    "generate-empty-command": (
        HEAD + PATCH + "[patch.generate]\ncommand = []  # here\n",
        "patch[0].generate.command",
        "the command is empty",
        None,
    ),
    "generate-placeholder": (
        HEAD + PATCH + '[patch.generate]\ncommand = ["x", "{tree}/a"]  # here\n',
        "patch[0].generate.command",
        "names an unknown placeholder {tree} (a generate command knows {root}, {ledger})",
        None,
    ),
    "generate-climbs": (
        HEAD + PATCH + '[patch.generate]\ncommand = ["x", "{ledger}/a/../../s"]  # here\n',
        "patch[0].generate.command",
        "climbs out of the ledger directory",
        None,
    ),
    "generate-script-outside": (
        HEAD + PATCH + '[patch.generate]\ncommand = ["x"]\nscript = "../g.sh"  # here\n',
        "patch[0].generate.script",
        "outside the ledger directory",
        None,
    ),
    "generate-timeout-zero": (
        HEAD + PATCH + '[patch.generate]\ncommand = ["x"]\ntimeout = 0  # here\n',
        "patch[0].generate.timeout",
        "timeout 0 must be a positive number",
        None,
    ),
    "bind-relative": (
        HEAD + PATCH + '[patch.generate]\ncommand = ["x"]\nbind = "opt/x"  # here\n',
        "patch[0].generate.bind",
        "'opt/x' is not an absolute path without '..'",
        None,
    ),
    "bind-climbs": (
        HEAD + PATCH + '[patch.generate]\ncommand = ["x"]\nbind = "/opt/../usr"  # here\n',
        "patch[0].generate.bind",
        "is not an absolute path without '..'",
        None,
    ),
    "bind-system": (
        HEAD + PATCH + '[patch.generate]\ncommand = ["x"]\nbind = "/usr/./lib/"  # here\n',
        "patch[0].generate.bind",
        "bind over the system directory /usr/lib is refused",
        None,
    ),
    "bind-root": (
        HEAD + PATCH + '[patch.generate]\ncommand = ["x"]\nbind = "//"  # here\n',
        "patch[0].generate.bind",
        "system directory / is refused",
        None,
    ),
    # engines
    "engine-name": (
        'schema = 1\n[engines."-x"]  # here\nstart = ["x"]\n',
        "engines.-x",
        "engine name '-x' is not a name",
        None,
    ),
    "engine-no-start": (
        'schema = 1\n[engines.spark]  # here\nurl = "http://h"\n',
        "engines.spark",
        "engine 'spark' has no `start` command",
        "a preset: vllm-cpu, docker",
    ),
    "engine-command-empty-start": (
        'schema = 1\n[engines.spark]  # here\npreset = "command"\nstart = []\n',
        "engines.spark",
        "has no `start` command",
        None,
    ),
    "engine-port-parallel": (
        ENG.replace("[engines.spark]", "schema = 1\n[engines.spark]") + "port = 80\nmax_parallel = 2  # here\n",
        "engines.spark.max_parallel",
        "fixed port 80: two starts at once",
        "set max_parallel = 1",
    ),
    "engine-port-zero": (
        "schema = 1\n" + ENG + "port = 0  # here\n",
        "engines.spark.port",
        "port 0 is not in 1..65535",
        None,
    ),
    "engine-port-high": (
        "schema = 1\n" + ENG + "port = 65536  # here\n",
        "engines.spark.port",
        "port 65536 is not in 1..65535",
        None,
    ),
    "engine-ready-timeout": (
        "schema = 1\n" + ENG + "ready_timeout = 0  # here\n",
        "engines.spark.ready_timeout",
        "ready_timeout 0 is less than 1",
        None,
    ),
    "engine-ready": (
        "schema = 1\n" + ENG + 'ready = "health"  # here\n',
        "engines.spark.ready",
        "ready 'health' is not a path on the server",
        "/v1/models",
    ),
    "engine-url-scheme": (
        "schema = 1\n" + ENG + 'url = "ftp://h:{port}"  # here\n',
        "engines.spark.url",
        "url 'ftp://h:{port}' does not start with http:// or https://",
        None,
    ),
    "engine-url-spliced": (
        "schema = 1\n" + ENG + 'url = "{args}"  # here\n',
        "engines.spark.url",
        "{args} stands for several arguments",
        None,
    ),
    "engine-conversion": (
        "schema = 1\n" + '[engines.spark]\nstart = ["x", "{port!r}"]  # here\n',
        "engines.spark.start",
        "{port} takes no format spec or conversion",
        None,
    ),
    "engine-stop-placeholder": (
        "schema = 1\n" + ENG + 'stop = ["kill", "{pid}"]  # here\n',
        "engines.spark.stop",
        "unknown placeholder {pid}",
        None,
    ),
    "engine-logs-placeholder": (
        "schema = 1\n" + ENG + 'logs = ["{mounts}", "{x}"]  # here\n',
        "engines.spark.logs",
        "unknown placeholder {x}",
        None,
    ),
    "engine-pass-env": (
        "schema = 1\n" + ENG + 'pass_env = ["HF_TOKEN", "1X"]  # here\n',
        "engines.spark.pass_env",
        "'1X' is not an environment variable name",
        None,
    ),
    "two-production": (
        "schema = 1\n" + ENG + 'production = true\n[engines.b]\nstart = ["y"]\nproduction = true  # here\n',
        "engines.b.production",
        "engines 'spark' and 'b' are both marked production",
        None,
    ),
    # tests
    "test-cwd-outside": (
        TEST + 'command = "x"\ncwd = "../up"  # here\n',
        "patch[0].tests[0].cwd",
        "path '../up' is outside the build tree",
        None,
    ),
    "test-no-command": (
        HEAD + PATCH + '[[patch.tests]]  # here\nname = "t"\n',
        "patch[0].tests[0]",
        "a command test needs `command`",
        'kind = "longctx"',
    ),
    "test-engine-key-on-command": (
        TEST + 'command = "x"\nmodel = "m"  # here\n',
        "patch[0].tests[0].model",
        "`model` belongs to a test that starts an engine",
        None,
    ),
    "test-serving-key-on-command": (
        TEST + 'command = "x"\nstreams = 2  # here\n',
        "patch[0].tests[0].streams",
        "`streams` belongs to a test that starts an engine",
        None,
    ),
    "test-repeats-on-command": (
        TEST + 'command = "x"\nrepeats = 3  # here\n',
        "patch[0].tests[0].repeats",
        "`repeats` belongs to a test that starts an engine",
        None,
    ),
    "longctx-command": (
        TEST + 'kind = "longctx"\nchecks = ["resume"]\ncommand = "x"  # here\n',
        "patch[0].tests[0].command",
        "a long-context test runs checks, not a command",
        None,
    ),
    "serving-command": (
        SERVE + 'command = "x"  # here\n',
        "patch[0].tests[0].command",
        "a serving test runs checks, not a command",
        None,
    ),
    "longctx-no-checks": (
        HEAD + PATCH + '[[patch.tests]]  # here\nkind = "longctx"\n',
        "patch[0].tests[0]",
        "a long-context test needs `checks`",
        "name some of: causality, resume",
    ),
    "serving-no-checks": (
        HEAD + PATCH + '[[patch.tests]]  # here\nkind = "serving"\nchecks = []\n',
        "patch[0].tests[0]",
        "a serving test needs `checks`",
        "name some of: decode",
    ),
    "longctx-unknown-check": (
        TEST + 'kind = "longctx"\nchecks = ["resume", "resum"]  # here\n',
        "patch[0].tests[0].checks[1]",
        "unknown long-context check 'resum'",
        "did you mean 'resume'?",
    ),
    "serving-unknown-check-far": (
        TEST + 'kind = "serving"\nchecks = ["zzzz"]  # here\n',
        "patch[0].tests[0].checks[0]",
        "unknown serving check 'zzzz'",
        "one of: decode",
    ),
    "longctx-serving-key": (
        TEST + 'kind = "longctx"\nchecks = ["resume"]\nwarmup = 1  # here\n',
        "patch[0].tests[0].warmup",
        "`warmup` belongs to a serving test",
        None,
    ),
    "longctx-mode": (
        TEST + 'kind = "longctx"\nchecks = ["resume"]\nmode = "fixd"  # here\n',
        "patch[0].tests[0].mode",
        "'fixd' is not one of: fixed, control",
        "did you mean 'fixed'?",
    ),
    "serving-repeats": (SERVE + "repeats = 2  # here\n", "patch[0].tests[0].repeats", "at least 3 repeats", None),
    "serving-repeats-zero": (
        SERVE + "repeats = 0  # here\n",
        "patch[0].tests[0].repeats",
        "repeats 0 is less than 1",
        None,
    ),
    "serving-warmup": (SERVE + "warmup = -1  # here\n", "patch[0].tests[0].warmup", "warmup -1 is less than 0", None),
    "serving-streams": (SERVE + "streams = 0  # here\n", "patch[0].tests[0].streams", "streams 0 is less than 1", None),
    "serving-max-tokens": (
        SERVE + "max_tokens = 1  # here\n",
        "patch[0].tests[0].max_tokens",
        "max_tokens 1 is less than 2",
        None,
    ),
    "serving-tolerance-one": (
        SERVE + "tolerance = 1.0  # here\n",
        "patch[0].tests[0].tolerance",
        "tolerance 1.0 is not a fraction in [0, 1)",
        None,
    ),
    "serving-tolerance-negative": (
        SERVE + "tolerance = -0.01  # here\n",
        "patch[0].tests[0].tolerance",
        "tolerance -0.01 is not a fraction",
        None,
    ),
    "serving-tolerance-bool": (
        SERVE + "tolerance = true  # here\n",
        "patch[0].tests[0].tolerance",
        "expected a number, got bool",
        None,
    ),
    "serving-tolerances-one": (
        SERVE + "tolerances = { decode = 1 }  # here\n",
        "patch[0].tests[0].tolerances",
        "tolerance 1 is not a fraction",
        None,
    ),
    "serving-tolerances-other-check": (
        SERVE + "tolerances = { concurrent = 0.1 }  # here\n",
        "patch[0].tests[0].tolerances.concurrent",
        "tolerance for 'concurrent', a check this test does not run",
        None,
    ),
    "test-timeout-a-float": (
        TEST + 'command = "x"\ntimeout = 1.5  # here\n',
        "patch[0].tests[0].timeout",
        "expected an integer, got float",
        None,
    ),
    "test-engine-unknown-near": (
        HEAD + ENG + "\n" + PATCH + "[[patch.tests]]\n" + SERVING + 'engine = "sparc"  # here\n',
        "patch[0].tests[0].engine",
        "unknown engine 'sparc'",
        "did you mean 'spark'?",
    ),
    "test-engine-unknown-far": (
        SERVE + 'engine = "zzzz"  # here\n',
        "patch[0].tests[0].engine",
        "unknown engine 'zzzz'",
        "define [engines.zzzz] or use one of: vllm-cpu, docker",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_broken_rule_names_file_line_key_and_why(tmp_path: Path, case: str) -> None:
    text, key, message, hint = BAD[case]
    err = refused(tmp_path, text)
    assert err.where is not None and (err.where.key or "") == key, err.render()
    assert message in err.message, err.render()
    if hint == NO_HINT:
        assert err.hint is None, err.render()  # nothing near enough to suggest
    elif hint is not None:
        assert err.hint is not None and hint in err.hint, err.render()


# the values just inside each rule's bounds, each in a ledger that must load: (ledger text, a check on it)
GOOD = {
    "strip-zero": ("schema = 1\n[targets.demo]\nstrip = 0\n", lambda led: led.targets["demo"].strip == 0),
    "active-without-reason": (HEAD + PATCH + 'state = "active"\n', lambda led: led.get("a").state == "active"),
    "held-with-reason": (HEAD + PATCH + 'state = "held"\nreason = "waits for #1"\n', lambda led: led.get("a").reason),
    "empty-ref-passes-the-pattern": (
        HEAD + PATCH + '[patch.upstream]\nprs = ["vllm#1"]\nissues = []\n',
        lambda led: led.get("a").upstream.prs == ["vllm#1"],
    ),
    "body-inside": (HEAD + PATCH + 'body = "patches/a.patch"\n', lambda led: led.get("a").body == "patches/a.patch"),
    "generate-bounds": (
        HEAD + PATCH + '[patch.generate]\ncommand = ["sh", "{ledger}/g..sh", "{root}", "{}", "{0}"]\n'
        'script = "g.sh"\nbind = "/usr/local/lib/python3.12/dist-packages"\ntimeout = 1\n',
        lambda led: led.get("a").generate is not None,
    ),
    "engine-bounds": (
        'schema = 1\n[engines.spark]\nport = 1\nmax_parallel = 1\nready_timeout = 1\nready = "/v1/models"\n'
        'url = "https://h:{port}"\nstart = ["x", "{args}", "{mounts}"]\npass_env = ["HF_TOKEN"]\nproduction = true\n'
        '[engines.other]\nstart = ["y"]\nport = 65535\nproduction = false\n[engines.d]\npreset = "docker"\n',
        lambda led: set(led.engines) == {"spark", "other", "d"},
    ),
    "serving-bounds": (
        HEAD
        + ENG
        + "\n"
        + PATCH
        + "[[patch.tests]]\n"
        + SERVING
        + "repeats = 3\nwarmup = 0\nstreams = 1\nmax_tokens = 2\ntolerance = 0\n"
        'tolerances = { decode = 0.99 }\nengine = "spark"\n'
        '[[patch.tests]]\nkind = "serving"\nchecks = ["decode"]\nengine = "vllm-cpu"\n'
        '[[patch.tests]]\nkind = "longctx"\nchecks = ["resume"]\nengine = "docker"\n',
        lambda led: [t.kind.value for t in led.get("a").tests] == ["serving", "serving", "longctx"],
    ),
    "empty-values-are-unset": (
        'schema = 1\n[targets.demo]\nupstream = "u"\ngithub = ""\n[[patch]]\nid = "a"\ntarget = "demo"\n'
        'title = "t"\norigin = "ours"\n[patch.source]\npin = ""\n[patch.generate]\ncommand = ["x"]\nbind = ""\n',
        lambda led: led.get("a").generate is not None,
    ),
    "dates-and-repeats": (
        TEST + 'kind = "longctx"\nchecks = ["resume"]\nrepeats = 1\n[patch.status]\nrecorded = 2026-01-02\n',
        lambda led: led.get("a").tests[0].repeats == 1,
    ),
    "command-test-cwd": (
        TEST + 'command = "pytest"\ncwd = "tests"\ntimeout = 60\n',
        lambda led: led.get("a").tests[0].command == "pytest",
    ),
}


@pytest.mark.parametrize("case", sorted(GOOD))
def test_the_values_inside_each_bound_load(tmp_path: Path, case: str) -> None:
    text, check = GOOD[case]
    assert check(load_text(tmp_path, text.replace("  # here", "")))


def test_a_ledger_without_schema_is_refused_at_its_top(tmp_path: Path) -> None:
    with pytest.raises(LedgerError) as exc:
        load_text(tmp_path, '[targets.demo]\nupstream = "u"\n')
    err = exc.value
    assert err.where is not None and err.where.line is None and err.where.key is None, err.render()
    assert "missing required key 'schema'" in err.message and err.hint == "add `schema = ...` to this table"


def test_a_target_name_ending_in_a_newline_is_refused(tmp_path: Path) -> None:
    """``$`` matches before a final newline: the name rules match to the very end (it would be a directory)."""
    with pytest.raises(LedgerError) as exc:
        load_text(tmp_path, 'schema = 1\n[targets."vllm\\n"]\nupstream = "u"\n')
    assert "target name 'vllm\\n' is not a name patchset can use" in exc.value.message


def test_a_long_wrong_value_is_cut_in_the_message(tmp_path: Path) -> None:
    err = refused(tmp_path, f'schema = 1\n[targets.demo]\nstrip = "{"9" * 300}"  # here\n')
    assert err.message.endswith("expected an integer, got str '" + "9" * (200 - len("expected an integer, got str '")))

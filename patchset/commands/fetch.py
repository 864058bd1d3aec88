"""``patchset fetch``: bring patch bodies from where the ledger says they come from, pinned.

A ``[patch.source]`` names a PR, a commit, a file at a ref or a URL, with globs and a strip level
(``patchset.patchfmt.filters``). A download is filtered, must parse (and match ``source.sha256``
when set) and is stored with its sha256 and head in the lock. One transaction: bodies and lock are
written together and only when every source succeeded. ``check`` says whether a source moved
(unchanged, same change, changed with an interdiff, gone); ``update`` takes the new revision.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from patchset.errors import (
    EXIT_FINDING,
    EXIT_INPUT,
    EXIT_OK,
    EnvironmentFailure,
    InputError,
    LedgerError,
    Location,
    PatchFormatError,
)
from patchset.ledger import store as ledger_mod
from patchset.ledger.lock import sha256_bytes
from patchset.ledger.model import Ledger, Patch
from patchset.ledger.schema import SHA_RE
from patchset.patchfmt.diffs import parse_patch
from patchset.patchfmt.filters import FilterResult, filter_diff, interdiff, patch_id
from patchset.text import json_fields
from patchset.upstream.repo import FULL_SHA

if TYPE_CHECKING:
    from patchset.upstream.hub import Connect, GitHubReader
    from patchset.upstream.refs import PRState, RowError

_REPO = r"[A-Za-z0-9][A-Za-z0-9-]*/[A-Za-z0-9._-]+"
_COMMIT = re.compile(rf"^(?P<repo>{_REPO})@(?P<sha>[0-9a-f]{{7,40}})$")
_FILE = re.compile(rf"^(?P<repo>{_REPO})@(?P<ref>[^:\s]+):(?P<path>\S.*)$")
URL_TIMEOUT = 30

# Row statuses
STORED = "stored"  # downloaded, filtered, written (or would be, had nothing failed)
PRESENT = "present"  # stored body matches the lock: not downloaded again
MISSING = "missing"  # offline and no stored body
LOCAL = "local"  # kind = "local": nothing to fetch
FAILED = "failed"  # the source could not be reached (network, API, 404, rate limit ...)
REFUSED = "refused"  # reached, but not taken (hash, format, moved pin, local edit, empty)

# Check statuses
UNCHANGED = "unchanged"
MOVED_SAME = "moved-same"
CHANGED = "changed"
MOVED = "moved"  # the head moved and there is no stored body to compare with
GONE = "gone"
ERROR = "error"
UNPINNED = "unpinned"
OFFLINE = "offline"


@dataclass(frozen=True)
class SourceRef:
    """A parsed ``[patch.source]``: ``kind`` is pr, commit, repo-file, url or local."""

    kind: str
    repo: str = ""
    number: int = 0
    sha: str = ""
    ref: str = ""
    path: str = ""
    url: str = ""

    def __str__(self) -> str:
        return {
            "pr": f"{self.repo}#{self.number}",
            "commit": f"{self.repo}@{self.sha}",
            "repo-file": f"{self.repo}@{self.ref}:{self.path}",
            "url": self.url,
        }.get(self.kind, "local")


def parse_source(ledger: Ledger, patch: Patch) -> SourceRef:
    """Read a patch's ``[patch.source]``; a malformed ``ref`` is a ``LedgerError`` naming the line."""
    src = patch.source
    where = Location(ledger.path, patch.line or None, f"patch[{patch.id}].source.ref")
    ref = (src.ref or "").strip()
    if src.kind == "local":
        return SourceRef("local")
    if not ref:
        raise LedgerError(
            f"a source of kind {src.kind!r} needs a ref",
            where=where,
            hint={
                "pr": 'ref = "owner/repo#N"',
                "commit": 'ref = "owner/repo@<sha>"',
                "repo-file": 'ref = "owner/repo@<ref>:<path>"',
                "url": 'ref = "https://..."',
            }.get(src.kind),
        )
    if src.kind == "pr":
        from patchset.upstream.refs import PRRef, pull_hosts, url_host

        try:
            pr = PRRef.parse(ref)
        except InputError as exc:
            raise LedgerError(exc.message, where=where, hint=exc.hint) from None
        tgt = ledger.targets.get(patch.target)
        hosts = pull_hosts(tgt.upstream, tgt.github) if tgt is not None else pull_hosts()
        if "://" in ref and url_host(ref) not in hosts:
            raise LedgerError(
                f"{ref!r} is a pull request on {url_host(ref) or 'no host'}, not on {' or '.join(sorted(hosts))} "
                "(where the target's upstream is)",
                where=where,
                hint='a change from another host is a body of its own (kind = "url" or a local file); '
                'a PR of the upstream is ref = "owner/repo#N"',
            )
        if src.pin and not SHA_RE.match(src.pin):
            raise LedgerError(f"pin {src.pin!r} is not a commit sha", where=where)
        return SourceRef("pr", repo=pr.repo, number=pr.number)
    if src.kind == "commit":
        m = _COMMIT.match(ref)
        if not m:
            raise LedgerError(f"{ref!r} is not OWNER/REPO@SHA", where=where, hint="e.g. vllm-project/vllm@1a2b3c4d")
        return SourceRef("commit", repo=m["repo"], sha=m["sha"])
    if src.kind == "repo-file":
        m = _FILE.match(ref)
        if not m:
            raise LedgerError(
                f"{ref!r} is not OWNER/REPO@REF:PATH",
                where=where,
                hint="e.g. owner/repo@main:patches/vllm/01-fix.patch",
            )
        return SourceRef("repo-file", repo=m["repo"], ref=m["ref"], path=m["path"].lstrip("/"))
    if src.kind == "url":
        if not re.match(r"^https?://[^\s/]+", ref):
            raise LedgerError(f"{ref!r} is not an http(s) URL", where=where)
        return SourceRef("url", url=ref)
    raise LedgerError(f"unknown source kind {src.kind!r}", where=where)


@dataclass
class FetchRow:
    """What ``fetch`` did for one patch."""

    id: str
    target: str
    source: str
    status: str
    message: str = ""
    head: str | None = None
    sha256: str | None = None
    bytes: int | None = None
    path: str = ""
    via: str = ""  # how the diff was obtained: diff, files (406 fallback), commits, file, url
    kept: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    error: dict[str, Any] | None = None


@dataclass
class FetchReport:
    """What ``fetch`` downloaded, refused and left alone."""

    rows: list[FetchRow]
    written: bool
    offline: bool = False
    warnings: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[FetchRow]:
        return [r for r in self.rows if r.status == FAILED]

    @property
    def refused(self) -> list[FetchRow]:
        return [r for r in self.rows if r.status == REFUSED]

    @property
    def ok(self) -> bool:
        return not self.failed and not self.refused and not any(r.status == MISSING for r in self.rows)

    @property
    def exit_code(self) -> int:
        """2 when a source could not be reached, 1 when a download was refused or a body is
        missing offline, else 0."""
        if self.failed:
            return EXIT_INPUT
        if self.refused or any(r.status == MISSING for r in self.rows):
            return EXIT_FINDING
        return EXIT_OK

    def unreachable(self) -> list[str]:
        return [f"{r.id}: {r.source}" for r in self.failed]

    def no_network(self) -> dict[str, int]:
        """``{"HOST: why": sources}`` for the hosts that could not be reached at all (said once)."""
        out: dict[str, int] = {}
        for r in self.failed:
            if r.error and r.error.get("error") == "no_network":
                key = str(r.error.get("message"))
                out[key] = out.get(key, 0) + 1
        return out

    def to_json(self) -> dict[str, Any]:
        return json_fields(self, "written offline ok warnings") | {
            "unreachable": self.unreachable(),
            "no_network": self.no_network(),
            "rows": [asdict(r) for r in self.rows],
        }


@dataclass
class CheckRow:
    """What ``fetch --check`` found for one patch's source."""

    id: str
    source: str
    status: str
    pinned: str | None = None
    current: str | None = None
    message: str = ""
    interdiff: str = ""
    error: dict[str, Any] | None = None


@dataclass
class CheckReport:
    """What ``fetch --check`` found: which pinned bodies upstream has moved past."""

    rows: list[CheckRow]

    @property
    def exit_code(self) -> int:
        """2 when a source could not be reached, 1 when a source changed or is gone, else 0."""
        if any(r.status == ERROR for r in self.rows):
            return EXIT_INPUT
        if any(r.status in (CHANGED, GONE, MOVED) for r in self.rows):
            return EXIT_FINDING
        return EXIT_OK

    def to_json(self) -> dict[str, Any]:
        return {"rows": [asdict(r) for r in self.rows]}


# ---- selection -------------------------------------------------------------------------------
def select(ledger: Ledger, ids: Sequence[str] = (), all_: bool = False) -> list[Patch]:
    """The patches named (any state), or with ``all_`` every active and held patch."""
    if ids and all_:
        raise InputError("name patch ids or pass --all, not both")
    if ids:
        return [ledger.get(i) for i in dict.fromkeys(ids)]
    if all_:
        return ledger.series(states=("active", "held"))
    raise InputError("which patches?", hint="name patch ids (see `patchset list`) or pass --all")


# ---- downloading -----------------------------------------------------------------------------
@dataclass
class _Download:
    """One body to fetch: where from and where it goes."""

    data: bytes
    head: str | None
    via: str


class _Unreachable(Exception):
    def __init__(self, row: RowError) -> None:
        super().__init__(str(row))
        self.row = row


class _Refused(Exception):
    pass


def _pr_states(client: GitHubReader, specs: Iterable[SourceRef]) -> dict[tuple[str, int], PRState | RowError]:
    """Current head of every PR source: one batched request per repository, never from cache."""
    from patchset.upstream.refs import PRRef

    refs = {(s.repo, s.number): PRRef(s.repo, s.number) for s in specs if s.kind == "pr"}
    if not refs:
        return {}
    got = client.pull_states(list(refs.values()), max_age=0)
    return {k: got[r] for k, r in refs.items()}


def _same_sha(a: str | None, b: str | None) -> bool:
    return bool(a and b and (a.startswith(b) or b.startswith(a)))


def _download(
    client: GitHubReader | None,
    spec: SourceRef,
    states: dict[tuple[str, int], Any],
    pin: str | None,
    take_new: bool,
    revalidate: bool = False,
) -> _Download:
    from patchset.upstream.refs import MALFORMED, FetchError, PRRef, PRState, RowError

    if spec.kind == "url":
        return _download_url(spec.url)
    assert client is not None
    try:
        if spec.kind == "pr":
            state = states.get((spec.repo, spec.number))
            if isinstance(state, RowError):
                raise _Unreachable(state)
            if not isinstance(state, PRState) or not state.head_sha:
                raise _Unreachable(RowError(MALFORMED, f"no head commit reported for {spec}"))
            if pin and not _same_sha(pin, state.head_sha) and not take_new:
                raise _Refused(
                    f"upstream head moved from the pinned {pin[:12]} to {state.head_sha[:12]}: "
                    f"see `patchset fetch --check`, take it with `patchset fetch --update ID`"
                )
            d = client.pr_diff_detail(PRRef(spec.repo, spec.number))
            return _Download(d.data, state.head_sha, d.source)
        if spec.kind == "commit":
            data = client.commit_diff(spec.repo, spec.sha, revalidate=revalidate)
            return _Download(data, spec.sha, "commit")
        if spec.kind == "repo-file":
            data = client.file_at(spec.repo, spec.ref, spec.path)
            return _Download(data, spec.ref if FULL_SHA.match(spec.ref) else None, "file")
    except FetchError as exc:
        raise _Unreachable(exc.row) from None
    raise _Refused(f"cannot fetch a source of kind {spec.kind!r}")


def _download_url(url: str) -> _Download:
    """A plain HTTP(S) GET (no GitHub client: the URL may be anywhere), within the deadlines and
    the in-memory cap of ``patchset.upstream.net``."""
    from urllib.parse import urlsplit

    import requests

    from patchset.upstream import net
    from patchset.upstream.net import host_of, no_network_reason
    from patchset.upstream.refs import HTTP, MALFORMED, NETWORK, NO_NETWORK, NOT_FOUND, SERVER, TIMEOUT, RowError

    try:
        what = f"GET {urlsplit(url).path or '/'}"
    except ValueError:  # requests says what is wrong with the URL
        what = "GET"
    http = net.session()
    try:
        resp = net.request(http, "GET", url, what=what, cap=net.BODY, timeout=URL_TIMEOUT, allow_redirects=True)
    except net.DeadlineExceeded as exc:
        raise _Unreachable(RowError(TIMEOUT, exc.message)) from None
    except net.Unreachable as exc:
        raise _Unreachable(RowError(NO_NETWORK, f"{exc.host}: {exc.reason}")) from None
    except net.TooLarge as exc:
        raise _Unreachable(RowError(MALFORMED, exc.message)) from None
    except requests.exceptions.Timeout:
        raise _Unreachable(RowError(TIMEOUT, f"no answer within {URL_TIMEOUT}s from {url}")) from None
    except requests.exceptions.RequestException as exc:
        reason = no_network_reason(exc)
        if reason:
            raise _Unreachable(RowError(NO_NETWORK, f"{host_of(url)}: {reason}")) from None
        raise _Unreachable(RowError(NETWORK, f"cannot reach {url} ({type(exc).__name__})")) from None
    finally:
        http.close()
    if resp.status != 200:
        kind = NOT_FOUND if resp.status == 404 else SERVER if resp.status >= 500 else HTTP
        raise _Unreachable(RowError(kind, f"{resp.status} from {url}", status=resp.status))
    return _Download(resp.body, None, "url")


def _prepare(ledger: Ledger, patch: Patch, dl: _Download) -> FilterResult:
    """Filter a download and check it is a patch worth storing; raises ``_Refused``."""
    strip = ledger.strip_of(patch)
    src = patch.source
    try:
        res = filter_diff(dl.data, src.include, src.exclude, strip, source=f"{patch.id} ({patch.source.ref})")
        if res.kept:
            parse_patch(res.data, strip, source=f"{patch.id} (downloaded)")
    except PatchFormatError as exc:
        raise _Refused(f"not a patch: {exc.message}") from None
    except UnicodeDecodeError:
        raise _Refused("not a patch: undecodable bytes") from None
    if b"\0" in res.data:
        raise _Refused("not a patch: the download holds NUL bytes (a binary file?)")
    if not res.kept:
        what = (
            f"the filters (include {src.include or '*'}, exclude {src.exclude or '-'}) kept no file"
            if res.dropped
            else "the download holds no diff"
        )
        raise _Refused(f"{what}; nothing to store")
    return res


# ---- fetch -----------------------------------------------------------------------------------
def fetch(
    ledger_path: Path,
    ids: Sequence[str] = (),
    *,
    all_: bool = False,
    client: GitHubReader | None = None,
    connect: Connect | None = None,
    offline: bool = False,
) -> FetchReport:
    """Fetch the bodies of ``ids`` (or ``all_``) and store them; see the module docstring. GitHub
    sources are read through ``client``, or one built by ``connect`` when first needed. A ledger
    edit interrupted earlier is finished first (what is stored is judged against a whole ledger)."""
    ledger_mod.recover_edit(Path(ledger_path).parent)
    ledger = ledger_mod.load_ledger(ledger_path)
    return _run(ledger_path, ledger, select(ledger, ids, all_), client, connect, offline, take_new=False)


def update(
    ledger_path: Path, patch_id: str, *, client: GitHubReader | None = None, connect: Connect | None = None
) -> FetchReport:
    """Take the source's current revision for one patch, deliberately: the body, the lock head,
    and ``source.pin`` / ``source.sha256`` (when the ledger sets them) are rewritten."""
    ledger_mod.recover_edit(Path(ledger_path).parent)
    ledger = ledger_mod.load_ledger(ledger_path)
    return _run(ledger_path, ledger, [ledger.get(patch_id)], client, connect, False, take_new=True)


def _client_for(
    client: GitHubReader | None, connect: Connect | None, specs: Iterable[SourceRef]
) -> GitHubReader | None:
    """The client given, else one built by ``connect`` when some source is on GitHub (a plain URL
    needs none)."""
    if client is not None or all(s.kind == "url" for s in specs):
        return client
    if connect is None:
        raise EnvironmentFailure(
            "fetching from GitHub needs a GitHub client", hint="pass `client=` or `connect=` (the CLI does)"
        )
    return connect()


def _stored_body(ledger: Ledger, patch: Patch) -> bytes | None:
    f = ledger.body_file(patch)
    return f.read_bytes() if f.is_file() else None


def _run(
    ledger_path: Path,
    ledger: Ledger,
    patches: list[Patch],
    client: GitHubReader | None,
    connect: Connect | None,
    offline: bool,
    take_new: bool,
) -> FetchReport:
    rows: list[FetchRow] = []
    todo: list[tuple[Patch, SourceRef, FetchRow]] = []
    for p in patches:
        spec = parse_source(ledger, p)
        row = FetchRow(p.id, p.target, str(spec), PRESENT, path=p.body_path)
        rows.append(row)
        if not _settled_here(ledger, p, spec, row, offline, take_new):
            todo.append((p, spec, row))

    warnings: list[str] = []
    if todo:
        c = _client_for(client, connect, [s for _, s, _ in todo])
        notice = getattr(c, "auth_notice", None) if c is not None else None
        if notice:
            warnings.append(notice)
        elif c is not None and not c.authenticated:
            warnings.append("no GitHub token (GITHUB_TOKEN or `gh auth token`): unauthenticated requests, 60 per hour")
        from patchset.upstream.refs import RowError

        try:
            states = _pr_states(c, [s for _, s, _ in todo]) if c is not None else {}
        except Exception as exc:
            states = {
                (s.repo, s.number): RowError("http", f"state request failed ({type(exc).__name__})")
                for _, s, _ in todo
                if s.kind == "pr"
            }
        writes: list[tuple[Patch, FetchRow, bytes, str | None]] = []
        for p, spec, row in todo:
            try:
                dl = _download(c, spec, states, p.source.pin or None, take_new)
                res = _prepare(ledger, p, dl)
            except _Unreachable as u:
                row.status, row.message, row.error = FAILED, str(u.row), u.row.to_json()
                continue
            except _Refused as r:
                row.status, row.message = REFUSED, str(r)
                continue
            digest = sha256_bytes(res.data)
            row.head, row.sha256, row.bytes, row.via = dl.head, digest, len(res.data), dl.via
            row.kept, row.dropped = res.kept, res.dropped
            refusal = None if take_new else _refusal(ledger, p, digest)
            if refusal:
                row.status, row.message = REFUSED, refusal
                continue
            row.status = STORED
            row.message = f"{len(res.data)} bytes" + (f", dropped {len(res.dropped)} file(s)" if res.dropped else "")
            writes.append((p, row, res.data, dl.head))
        if writes and not any(r.status in (FAILED, REFUSED, MISSING) for r in rows):
            _write(ledger_path, writes, take_new)
            return FetchReport(rows, True, offline, warnings)
        for _, row, _, _ in writes:
            row.message += " (not written: another source failed; nothing was changed)"
    return FetchReport(rows, False, offline, warnings)


def _settled_here(ledger: Ledger, p: Patch, spec: SourceRef, row: FetchRow, offline: bool, take_new: bool) -> bool:
    """Is ``row`` settled without the network (a local body, the stored body matches the lock, a
    locally changed body, offline)? False: the body is to be fetched."""
    data = _stored_body(ledger, p)
    digest = sha256_bytes(data) if data is not None else None
    if spec.kind == "local":
        row.status, row.message = LOCAL, "local body: nothing to fetch"
        row.sha256, row.bytes = digest, None if data is None else len(data)
        return True
    locked = ledger.lock.bodies.get(p.id)
    pin = p.source.pin or None
    head = ledger.lock.heads.get(p.id)
    matches = data is not None and locked == digest and (not p.source.sha256 or p.source.sha256 == digest)
    if matches and not take_new and (not pin or _same_sha(pin, head)):
        row.status, row.sha256, row.bytes, row.head = PRESENT, digest, len(data or b""), head
        row.message = "stored body matches the lock"
        return True
    if data is not None and digest is not None and locked is not None and locked != digest and not take_new:
        row.status = REFUSED
        row.message = (
            f"{p.body_path} was changed locally (sha256 {digest[:12]}…, the lock says "
            f"{locked[:12]}…); not overwritten: `patchset fetch --update {p.id}` replaces it"
        )
        return True
    if offline:
        row.status = MISSING if data is None else REFUSED
        row.message = (
            "offline: no stored body"
            if data is None
            else "offline: the stored body is not the pinned one and cannot be fetched"
        )
        return True
    return False


def _refusal(ledger: Ledger, p: Patch, digest: str) -> str | None:
    """Why a downloaded body (sha256 ``digest``) is not stored: the ledger pins another, or a body
    not in the lock is already there and differs. None: store it."""
    if p.source.sha256 and p.source.sha256 != digest:
        return (
            f"downloaded body has sha256 {digest[:12]}…, the ledger pins "
            f"{p.source.sha256[:12]}… (source.sha256): refused, not stored"
        )
    stored = ledger.body_file(p)
    if stored.is_file() and p.id not in ledger.lock.bodies and sha256_bytes(stored.read_bytes()) != digest:
        return (
            f"{p.body_path} exists, is not in the lock and differs from the download: "
            f"not overwritten (`patchset fetch --update {p.id}` replaces it)"
        )
    return None


def _write(ledger_path: Path, writes: list[tuple[Patch, FetchRow, bytes, str | None]], take_new: bool) -> None:
    with ledger_mod.edit(ledger_path) as e:
        for p, row, data, head in writes:
            e.write_file(p.body_path, data)
            e.lock.bodies[p.id] = row.sha256 or sha256_bytes(data)
            if head and SHA_RE.match(head):
                e.lock.heads[p.id] = head
            else:
                e.lock.heads.pop(p.id, None)
            if take_new:
                t = e.patch_table(p.id)
                if t is None:
                    continue
                src = t.get("source") or {}
                if "pin" in src and head:
                    e.set_path(t, "source.pin", head)
                if "sha256" in src:
                    e.set_path(t, "source.sha256", row.sha256)
                st = t.get("status") or {}
                if "head" in st and head:
                    e.set_path(t, "status.head", head)


# ---- check -----------------------------------------------------------------------------------
def check(
    ledger_path: Path,
    ids: Sequence[str] = (),
    *,
    client: GitHubReader | None = None,
    connect: Connect | None = None,
    offline: bool = False,
) -> CheckReport:
    """For each selected source (default: every active and held patch with a source), has
    upstream moved since the stored body? Never writes anything."""
    ledger = ledger_mod.load_ledger(ledger_path)
    patches = select(ledger, ids, all_=not ids)
    rows: list[CheckRow] = []
    todo: list[tuple[Patch, SourceRef, CheckRow, bytes | None]] = []
    for p in patches:
        spec = parse_source(ledger, p)
        pinned = p.source.pin or ledger.lock.heads.get(p.id) or (spec.sha if spec.kind == "commit" else None)
        row = CheckRow(p.id, str(spec), UNCHANGED, pinned=pinned)
        rows.append(row)
        if spec.kind == "local":
            row.status, row.message = LOCAL, "local body: no upstream source"
            continue
        stored = _stored_body(ledger, p)
        if stored is None and not pinned:
            row.status, row.message = UNPINNED, "not fetched yet: nothing pinned to compare with"
            continue
        if offline:
            row.status, row.message = OFFLINE, "offline: not checked"
            continue
        todo.append((p, spec, row, stored))
    if not todo:
        return CheckReport(rows)
    c = _client_for(client, connect, [s for _, s, _, _ in todo])
    from patchset.upstream.refs import NOT_FOUND, PRState, RowError

    states = _pr_states(c, [s for _, s, _, _ in todo]) if c is not None else {}
    for p, spec, row, stored in todo:
        if spec.kind == "pr":
            st = states.get((spec.repo, spec.number))
            if isinstance(st, RowError):
                _check_error(row, st, NOT_FOUND)
                continue
            assert isinstance(st, PRState)
            row.current = st.head_sha
            if row.pinned and _same_sha(row.pinned, st.head_sha):
                row.status, row.message = UNCHANGED, "head is the pinned commit"
                continue
        try:
            dl = _download(c, spec, states, None, take_new=True, revalidate=True)
            res = _prepare(ledger, p, dl)
        except _Unreachable as u:
            _check_error(row, u.row, NOT_FOUND)
            continue
        except _Refused as r:
            row.status, row.message = CHANGED, f"upstream no longer serves a usable patch: {r}"
            continue
        if spec.kind != "pr":
            row.current = dl.head or sha256_bytes(res.data)[:12]
        if stored is None:
            row.status, row.message = MOVED, "upstream moved; no stored body to compare with"
            continue
        if res.data == stored:
            row.status = UNCHANGED if spec.kind != "pr" else MOVED_SAME
            row.message = "same bytes" + (" (head moved)" if spec.kind == "pr" else "")
            continue
        strip = ledger.strip_of(p)
        try:
            same = patch_id(res.data, strip) == patch_id(stored, strip)
        except PatchFormatError:
            same = False
        if same:
            row.status, row.message = MOVED_SAME, "the change is the same (patch id); only context or headers differ"
        else:
            row.status, row.message = CHANGED, "the change differs from the stored body"
            row.interdiff = interdiff(stored, res.data, f"stored/{p.body_path}", f"upstream/{spec}")
    return CheckReport(rows)


def _check_error(row: CheckRow, err: RowError, not_found: str) -> None:
    gone = (
        err.kind == not_found
        or err.status in (404, 410)
        or (err.status == 422 and "no commit found" in err.message.lower())
    )
    row.status = GONE if gone else ERROR
    row.message = ("source gone upstream: " if gone else "") + str(err)
    row.error = err.to_json()

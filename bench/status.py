"""Benchmark: upstream status of 21 PRs/issues in three repositories, cold and warm.

Runs the real client (PyGithub underneath) against the local GitHub-shaped server
(``tests.support.fakehub``) with the ledger-shaped world: 14 vLLM PRs, 5 FlashInfer PRs, an NCCL PR
and an NCCL issue. Measures
  - cold: empty cache; round trips counted by the server, and per repository;
  - warm: a new client on the same cache within ``max_age`` (round trips, time, and time as a
    share of the cold read measured in the same run);
  - revalidate: ``max_age=0`` (round trips per repository, time against the cold read).

    python bench/status.py [--repeat 20] [--json]

A measurement, not a test: it sets no goal and exits 0 whatever it finds (it stops only if a
warm read touches the network or returns something other than cached states: then the figures
would not measure what they say).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from patchset.tracker.github import GitHubClient
from patchset.upstream.refs import PRState
from tests.support.fakehub.server import FakeHub
from tests.support.fakehub.world import ledger_refs, ledger_world

TOKEN = "bench-token"


def run(repeat: int) -> dict:
    refs = ledger_refs()
    repos = len({r.repo for r in refs})
    data = ledger_world()
    data["tokens"] = [TOKEN]
    with FakeHub(data) as hub, tempfile.TemporaryDirectory() as cache:

        def client(**kw) -> GitHubClient:
            return GitHubClient(base_url=hub.base_url, token=TOKEN, cache_dir=cache, **kw)

        t = time.perf_counter()
        cold_rows = client().pull_states(refs)
        cold_s = time.perf_counter() - t
        cold_trips = hub.count()
        ok = sum(isinstance(v, PRState) for v in cold_rows.values())

        warm_times = []
        for _ in range(repeat):
            before = hub.count()
            t = time.perf_counter()
            rows = client().pull_states(refs)  # a new client: what a fresh `patchset status` does
            warm_times.append(time.perf_counter() - t)
            assert hub.count() == before, "warm read touched the network"
            assert all(isinstance(v, PRState) and v.source == "cache" for v in rows.values())

        before = hub.count()
        t = time.perf_counter()
        client(max_age=0).pull_states(refs)
        reval_s = time.perf_counter() - t
        reval_trips = hub.count() - before

    return {
        "refs": len(refs),
        "repos": repos,
        "states_ok": ok,
        "cold_round_trips": cold_trips,
        "cold_s": round(cold_s, 4),
        "warm_round_trips": 0,
        "warm_median_s": round(statistics.median(warm_times), 4),
        "warm_max_s": round(max(warm_times), 4),
        "warm_runs": repeat,
        "revalidate_round_trips": reval_trips,
        "revalidate_s": round(reval_s, 4),
        "cold_round_trips_per_repo": round(cold_trips / repos, 2),
        "revalidate_round_trips_per_repo": round(reval_trips / repos, 2),
        "warm_median_over_cold": round(statistics.median(warm_times) / cold_s, 3) if cold_s else None,
        "revalidate_over_cold": round(reval_s / cold_s, 3) if cold_s else None,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20, help="warm runs to time (default 20)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ns = ap.parse_args(argv)
    r = run(max(1, ns.repeat))
    if ns.json:
        print(json.dumps(r, indent=2))
    else:
        print(f"upstream status: {r['refs']} refs in {r['repos']} repositories (local GitHub-shaped server)")
        print(
            f"  cold       {r['cold_round_trips']} round trips ({r['cold_round_trips_per_repo']} per repository), "
            f"{r['cold_s'] * 1000:.1f} ms, {r['states_ok']}/{r['refs']} states"
        )
        print(
            f"  warm       0 round trips, median {r['warm_median_s'] * 1000:.1f} ms, max "
            f"{r['warm_max_s'] * 1000:.1f} ms over {r['warm_runs']} runs ({r['warm_median_over_cold']} of cold)"
        )
        print(
            f"  revalidate {r['revalidate_round_trips']} round trips ({r['revalidate_round_trips_per_repo']} per "
            f"repository), {r['revalidate_s'] * 1000:.1f} ms ({r['revalidate_over_cold']} of cold; max_age=0: "
            "GitHub's GraphQL has no conditional requests)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

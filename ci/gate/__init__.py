"""``patchset gate``: judge the series against a new upstream commit, the way CI runs it every night.

One run: name the upstream commit (``--onto REF``, or ``--latest``: the newest release on the
package index, or the fetched branch tip of a real clone); stop at once when the gate already
judged that commit with this series and these tags (the state file); else replay the series
onto it with the real rebaser in a scratch copy of the ledger (keep-going: every patch is
classified), write the refreshed series as a patch against this repository, apply it to a fresh
tree of the commit with every file checked against the refreshed lock, run the per-patch tests
the tags select (``verify``'s per-patch runner), read the upstream status (offline unless asked
to refresh), and, when a patch newly conflicts, bisect upstream's history with the in-memory
replay to name the first commit that breaks it. The ledger is never written; the artifacts
directory holds the results.

The parts: ``run`` (``GateRun``, the options the CLI builds; the run's log; one judgement's state),
``night`` (``run_gate``: from the options to the report, the state file), ``judge`` (replay,
bisection, newest safe commit, apply), ``tests`` (the per-patch tests through ``verify``),
``build`` (the judged commit's image, ``--build``), ``plan`` (``--plan``).

Exit codes: 0 green or nothing new; 1 a regression; 2 the gate could not judge (see
``ci.report``).
"""

from patchset.ci.gate.night import run_gate
from patchset.ci.gate.run import GateRun

__all__ = ["GateRun", "run_gate"]

"""Where the vLLM fault plug-in (a test double, ``tests/support/faults``) lives, and its faults.

The engine tests put ``FAULTS_DIR`` first on the server's ``PYTHONPATH`` so the checked-out plug-in
code wins over the copy ``ci/setup_engine.sh`` registered in the engine venv; ``PATCHSET_FAULT``
names the fault to switch on.
"""

from pathlib import Path

FAULTS_DIR = Path(__file__).resolve().parent / "faults"
FAULT_NAMES = ("stale-cache-hit", "rope-shift", "stale-decode")

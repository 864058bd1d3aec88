"""ci: the ``patchset gate`` (judge a series against new upstream commits) and the GitHub workflows.

``patchset.ci.gate.run_gate`` is the entry point; ``ci/workflows/*.yml`` are GitHub Actions workflows a
fork copies to ``.github/workflows/``; ``ci/scripts/`` holds the small programs they call.
"""

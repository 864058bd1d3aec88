"""The CI gate (``patchset gate``): judge the series against new upstream commits, and the workflows.

``gate.run_gate`` is the entry point; ``upstream`` names the commits, ``bisect`` finds the first bad
one, ``report``/``artifacts`` write what a CI job uploads, ``state`` remembers the last judged commit,
``refresh`` builds the refreshed series; ``workflows/*.yml`` are GitHub Actions workflows a fork copies
to ``.github/workflows/`` and ``scripts/`` the small programs they call.
"""

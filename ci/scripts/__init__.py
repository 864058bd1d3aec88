"""Small programs the GitHub workflows in ``ci/workflows/`` call (``python -m patchset.ci.scripts.<name>``)."""

"""Small programs the GitHub workflows in ``ci/workflows/`` call (``python -m ci.scripts.<name>``)."""

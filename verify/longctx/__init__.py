"""Long-context correctness checks past 2,048 tokens: the suite (``suite.run_checks``), the checks
(``checks``), their inputs (``params``), numbers (``measures``), report (``report``, ``view``) and the
long-context and serving tests of ``patchset verify`` run on an engine (``runs``)."""

"""Carrying a series onto a newer upstream: the session that runs it (``session``), in-memory replay
(``replay``), the fate of each patch (``classify``), refreshed bodies (``regen``), recorded resolutions
(``rerere``), the on-disk state for --continue/--abort (``state``) and the report (``report``)."""

"""Patch bodies as data: parsing unified and git diffs byte-exact (``diffs``), mail and DEP-3 headers
(``headers``), include/exclude filters, patch ids and interdiffs (``filters``)."""

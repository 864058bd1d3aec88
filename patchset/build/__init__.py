"""From a patched tree to what gets deployed: a patched wheel (``wheel``) or an image overlay (``overlay``)."""

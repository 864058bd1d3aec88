"""The ledger: its data classes (``model``), schema, positioned TOML I/O (``tomlio``), the tool-written
lock (``lock``) and the store that reads and atomically writes ``patches.toml`` (``store``)."""

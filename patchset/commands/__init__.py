"""The work behind each command, one module per command (``apply``, ``fetch``, ``importer``,
``exporter``, ``inspection`` for validate/list/show), plus their terminal renderings (``views``).
The CLI (``patchset.cli``) parses arguments, calls these, and prints."""

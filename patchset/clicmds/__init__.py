"""The CLI's commands, one module per family, loaded only when one of their commands runs
(``patchset.cli.COMMANDS``): ``patchset list`` never defines the options of ``gate``. The options
they share are declared once, in ``options``."""

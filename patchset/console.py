"""The ``patchset`` console script: the one thing that runs before the command line loads.

A process started for one command keeps everything it loads until it exits, so collecting
garbage while click and the CLI load is wasted work (about 4% of a ``patchset list``'s
instructions, ``valgrind --tool=callgrind``). Collection is held from the first import;
``patchset.cli`` resumes it when the command's own work starts and freezes everything at exit.
"""

from __future__ import annotations

import gc


def main() -> None:
    gc.disable()
    from patchset.cli import main as cli_main

    cli_main()

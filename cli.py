"""patchset's command line, runnable from a checkout as ``python cli.py``.

The command-line code lives in ``patchset/cli.py`` (installed as ``patchset.cli``, whose ``main``
is the console script ``patchset``); this file is the design card's entry point and only hands
over to it.
"""

from patchset.cli import main

if __name__ == "__main__":
    main()

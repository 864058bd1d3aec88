"""patchset's command line, runnable from a checkout as ``python cli.py``.

The command-line code lives in ``patchset/cli.py`` (installed as ``patchset.cli``; the console
script ``patchset`` enters through ``patchset/console.py``); this file is the design card's entry
point and only hands over to the console script's function.
"""

from patchset.console import main

if __name__ == "__main__":
    main()

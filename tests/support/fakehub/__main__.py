"""``python -m tests.support.fakehub``: serve a fake-hub state file on 127.0.0.1."""

from tests.support.fakehub.server import main

raise SystemExit(main())

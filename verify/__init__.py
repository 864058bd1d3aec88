"""Per-patch regression tests and long-context checks against an OpenAI-compatible server.

``patchset.verify.pertest`` runs each patch's tests with and without it (a ``VerifyRun`` built by the
command): ``selection`` picks the tests, ``base_tree`` prepares the pristine tree, ``plan`` decides
which without-runs run tonight, ``runner`` runs them (``testrun`` for commands, ``engines`` for tests
on engines started from each tree, ``serving`` and ``serving_judge`` for serving verdicts), and
``outcomes`` holds what it reports. ``longctx`` is the long-context check suite (also ``patchset check
longctx`` against any server). The tests' models and fault plugin live in ``tests/support``.
"""

from enum import Enum


class Word(str, Enum):
    """A closed set of words: each member is its word (compared, printed and written to JSON as it).

    The same base as ``patchset.commands.apply.target.Word``, defined here because importing that
    module loads all of apply (a quarter of a second) into every verify command."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    __hash__ = str.__hash__

"""The ``lancepart`` command (console script ``lancepart.cli:main``, ``python -m lancepart.cli``):
its commands and their output (commands), the arguments and options they share (args) and the
reading commands (read).

Names of the module this package was (``from lancepart.cli import build_parser``) still import
from here; new code imports them from :mod:`lancepart.cli.commands`.
"""

from lancepart.cli import commands
from lancepart.cli.commands import main

__all__ = ["main"]


def __getattr__(name: str):
    try:
        return getattr(commands, name)
    except AttributeError:
        raise AttributeError(f"module 'lancepart.cli' has no attribute {name!r}") from None

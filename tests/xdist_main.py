"""Stands in for ``__main__.__file__`` in pytest-xdist workers (see tests/conftest.py): a
module that does nothing when a ``spawn`` child process runs it as ``__mp_main__``."""

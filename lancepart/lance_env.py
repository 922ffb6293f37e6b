"""Process-wide Lance settings lancepart chooses, applied when ``lancepart`` is imported.

``LANCE_USE_VERSION_HINT=false``: Lance otherwise rewrites ``_versions/latest_version_hint.json``
at every commit of every table, one more file (a quarter of the files) in each small partition
table. The hint only speeds up finding a table's *latest* version; lancepart reads partition
tables at the ``read_version`` ``__manifest`` pins, and Lance treats a hint as a lower bound (a
table written without it, or with a stale one, opens at its true latest version in every
reader). Lance reads the variable once, at its first commit in the process, so this must run
before it; a value already set in the environment is kept (``LANCE_USE_VERSION_HINT=true``
restores the hint). docs/decisions.md §8.
"""

from __future__ import annotations

import os

VERSION_HINT = "LANCE_USE_VERSION_HINT"

os.environ.setdefault(VERSION_HINT, "false")

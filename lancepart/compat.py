"""Deprecated name of :mod:`lancepart.v1_tables` (V1 tables beside a namespace, their
migration); it goes in 0.2."""

import warnings

from lancepart.v1_tables import *  # noqa: F403
from lancepart.v1_tables import list_v1_tables, migrate, open_namespace, v1_tables  # noqa: F401

warnings.warn("lancepart.compat is now lancepart.v1_tables; the old name goes in 0.2",
              DeprecationWarning, stacklevel=2)

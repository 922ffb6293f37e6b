"""Deprecated name of :mod:`lancepart.datafusion_udfs` (this one read like the ``datafusion``
package it uses); it goes in 0.2."""

import warnings

from lancepart.datafusion_udfs import *  # noqa: F403
from lancepart.datafusion_udfs import derived_expression, evaluate, register_udfs  # noqa: F401

warnings.warn("lancepart.datafusion is now lancepart.datafusion_udfs; the old name goes in 0.2",
              DeprecationWarning, stacklevel=2)

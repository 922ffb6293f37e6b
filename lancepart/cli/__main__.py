"""``python -m lancepart.cli``: the ``lancepart`` command."""

import sys

from lancepart.cli.commands import main

sys.exit(main())

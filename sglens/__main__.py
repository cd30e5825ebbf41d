"""``python -m sglens ...`` is the ``sglens`` command."""

import sys

from .cli import main

sys.exit(main())

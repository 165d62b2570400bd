"""``python -m statecore.cli``."""

import sys

from statecore.cli import main

sys.exit(main())

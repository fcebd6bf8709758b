"""``python -m collector.cli ...``: the same as ``tracehook ...``."""

import sys

from collector.cli.main import main

sys.exit(main())

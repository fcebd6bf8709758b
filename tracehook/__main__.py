import sys

from tracehook.cli import main

sys.exit(main())

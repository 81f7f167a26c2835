"""``python -m edgefuse`` runs the command line."""

import sys

from edgefuse.cli.main import main

sys.exit(main())

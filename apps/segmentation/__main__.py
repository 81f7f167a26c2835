"""``python -m apps.segmentation [flags]``: ``edgefuse segment`` with this folder's config.yaml.

A ``--config`` given on the command line replaces it (argparse keeps the last one).
"""

import sys
from pathlib import Path

from edgefuse.cli.main import main

CONFIG = Path(__file__).with_name("config.yaml")

if __name__ == "__main__":
    sys.exit(main(["segment", "--config", str(CONFIG), *sys.argv[1:]]))

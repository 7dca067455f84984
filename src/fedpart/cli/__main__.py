"""``python -m fedpart.cli ARGS`` is ``fedpart ARGS``."""

import sys

from fedpart.cli import main

if __name__ == "__main__":
    sys.exit(main())

"""``python -m fedpart.bench ARGS`` is ``fedpart bench ARGS`` (errors as one line, exit code 2)."""

import sys

from fedpart.cli import main

raise SystemExit(main(["bench", *sys.argv[1:]]))

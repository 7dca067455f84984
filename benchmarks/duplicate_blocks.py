"""Count duplicated code blocks in the package's source.

A block is a window of 6 consecutive non-blank lines of one file, each line normalised
(stripped of leading and trailing whitespace and of a trailing comment; lines that are only
a comment, a docstring delimiter alone, or a bracket alone are skipped). Every window is hashed;
a window is duplicated when its hash occurs at more than one place (in another file or elsewhere
in the same file). The script prints the number of distinct duplicated windows and the number
of places they occur at.

Run from the repository root::

    python benchmarks/duplicate_blocks.py [src/fedpart] [--window 6] [--list]
"""

from __future__ import annotations

import argparse
import hashlib
import re
from collections import defaultdict
from pathlib import Path

TRIVIAL = {"", ")", "]", "}", "),", "],", "},", '"""', "'''", "else:", "try:", "pass"}


def normalised_lines(path: Path) -> list[tuple[int, str]]:
    out = []
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = re.sub(r"\s+#.*$", "", raw.strip())
        if line.startswith("#") or line in TRIVIAL:
            continue
        out.append((number, line))
    return out


def duplicated_windows(root: Path, window: int) -> dict[str, list[tuple[Path, int]]]:
    places: dict[str, list[tuple[Path, int]]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        lines = normalised_lines(path)
        for i in range(len(lines) - window + 1):
            text = "\n".join(line for _, line in lines[i : i + window])
            digest = hashlib.sha1(text.encode()).hexdigest()
            places[digest].append((path, lines[i][0]))
    return {k: v for k, v in places.items() if len(v) > 1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default="src/fedpart")
    parser.add_argument("--window", type=int, default=6)
    parser.add_argument(
        "--list", action="store_true", help="print every duplicated window's places"
    )
    args = parser.parse_args()
    dups = duplicated_windows(Path(args.root), args.window)
    if args.list:
        for where in sorted(dups.values(), key=lambda v: (str(v[0][0]), v[0][1])):
            print("  ".join(f"{p}:{n}" for p, n in where))
    print(f"duplicated {args.window}-line windows: {len(dups)}")
    print(f"places they occur at: {sum(len(v) for v in dups.values())}")


if __name__ == "__main__":
    main()

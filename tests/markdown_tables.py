"""Reading back the markdown reports the benchmarks write."""

from __future__ import annotations


def tables(report: str) -> dict[str, list[dict[str, str]]]:
    """The report's markdown tables by section (``## name``), as lists of row dicts."""
    out: dict[str, list[dict[str, str]]] = {}
    section = ""
    header: list[str] | None = None
    for line in report.splitlines():
        if line.startswith("## "):
            section, header = line[3:].strip(), None
            continue
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if header is None:
            header = cells
        elif not set("".join(cells)) <= set("- "):
            out.setdefault(section, []).append(dict(zip(header, cells, strict=True)))
    return out

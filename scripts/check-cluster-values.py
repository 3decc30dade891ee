#!/usr/bin/env python3
"""Check clusters/: every file in it is one Argo CD's ApplicationSet reads.

The ApplicationSet gives each chart clusters/<cluster>/values-<chart>.yaml when
that file exists and skips it silently when it does not
(ignoreMissingValueFiles), so a misspelt file name would deploy the chart's
defaults without a word. This check turns that silence into an error naming
the file and what it should be called, and checks that each values file is a
YAML mapping. (The cluster's name cannot be checked here: only Argo CD knows
its clusters.) `make lint-delivery` then renders each chart with each of its
files, so the chart's values.schema.json checks their contents.

    scripts/check-cluster-values.py [ROOT [VALUES]]     exit 1 listing every problem

ROOT is a checkout (its charts/ say which files exist; default: this one);
VALUES the folder of cluster folders, default ROOT/clusters: a platform's
values repository (its clusters/, or the folder its clusters' annotation
gpu-scheduler/values-path names) is checked against our charts the same way.

Needs PyYAML (the project's .venv has it).
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

import yaml

KEPT = {"README.md"}  # clusters/README.md says how the directory works


def charts(root: Path) -> list[str]:
    return sorted(p.parent.name for p in (root / "charts").glob("*/Chart.yaml"))


def expected_name(name: str, names: list[str]) -> str:
    """What a misnamed file was probably meant to be called, as a hint."""
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return f"did you mean {close[0]}?" if close else f"the files read are {', '.join(names)}"


def problems(root: Path, base: Path | None = None) -> list[str]:
    names = [f"values-{chart}.yaml" for chart in charts(root)]
    found: list[str] = []
    base = root / "clusters" if base is None else base
    if not base.is_dir():
        return found
    for entry in sorted(base.iterdir()):
        where = entry.relative_to(base.parent)
        if entry.name in KEPT:
            continue
        if not entry.is_dir():
            found.append(f"{where}: clusters/ holds one directory per cluster, clusters/<cluster>/values-<chart>.yaml")
            continue
        for file in sorted(entry.iterdir()):
            where = file.relative_to(base.parent)
            if file.is_dir():
                found.append(f"{where}: Argo CD reads no subdirectory; put values-<chart>.yaml in {where.parent}/")
            elif file.name not in names:
                found.append(f"{where}: Argo CD never reads this file; {expected_name(file.name, names)}")
            else:
                found.extend(f"{where}: {problem}" for problem in yaml_problems(file))
    return found


def yaml_problems(file: Path) -> list[str]:
    try:
        values = yaml.safe_load(file.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        return [f"not YAML: {err}".replace("\n", " ")]
    if values is not None and not isinstance(values, dict):
        return [f"must be a mapping of chart values, not a {type(values).__name__}"]
    return []


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent
    found = problems(root, Path(argv[1]).resolve() if len(argv) > 1 else None)
    for problem in found:
        print(f"check-cluster-values: {problem}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""The release version: one number, declared in every file that must carry it, kept equal.

A release is the git tag v<version>. The charts' version and appVersion (the
image tag they default to), the apps' pyproject versions and uv.lock entries,
`gpu-scheduler --version`, and the Dockerfiles' default VERSION label must all
say the same <version>; this script is the only thing that reads or writes
them (scripts/images.sh and the pipeline ask it).

    scripts/version.py                      print the version; exit 1 listing every file that disagrees
    scripts/version.py check-tag v1.2.3     also: the tag is v<version> (exit 1 with what to do)
        [--registry REG]                    ... and both charts' image.registry is REG ($CI_REGISTRY_IMAGE)
    scripts/version.py image-tags v1.2.3    the image tags a release pushes: v1.2.3 and 1.2.3
    scripts/version.py set 1.2.4            rewrite every declaration (then commit, merge, tag v1.2.4)

Only the standard library: the pipeline's release check runs it before any install.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SEMVER = re.compile(r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$")
CHARTS = ("charts/gpu-scheduler", "charts/gpu-scheduler-check")


@dataclass(frozen=True)
class Declaration:
    """One place the version is written: a file and a regex whose group 2 is the version."""

    path: str
    what: str
    pattern: re.Pattern

    def read(self, root: Path) -> str | None:
        match = self.pattern.search((root / self.path).read_text(encoding="utf-8"))
        return match.group(2) if match else None

    def write(self, root: Path, version: str) -> None:
        file = root / self.path
        text, count = self.pattern.subn(lambda m: f"{m.group(1)}{version}{m.group(3)}", file.read_text("utf-8"), 1)
        if count != 1:
            raise SystemExit(f"{self.path}: {self.what} not found; cannot set the version there")
        file.write_text(text, encoding="utf-8")


def _line(prefix: str, suffix: str = "") -> re.Pattern:
    return re.compile(rf"^({prefix})([^\s\"']+)({suffix})$", re.MULTILINE)


def _lock_entry(package: str) -> re.Pattern:
    return re.compile(rf'(\[\[package\]\]\nname = "{re.escape(package)}"\nversion = ")([^"]+)(")')


DECLARATIONS = (
    *(Declaration(f"{chart}/Chart.yaml", "version", _line("version: ")) for chart in CHARTS),
    *(Declaration(f"{chart}/Chart.yaml", "appVersion", _line('appVersion: "', '"')) for chart in CHARTS),
    Declaration("apps/scheduler/pyproject.toml", "[project] version", _line('version = "', '"')),
    Declaration("apps/check/pyproject.toml", "[project] version", _line('version = "', '"')),
    Declaration("apps/scheduler/gpu_scheduler/__init__.py", "__version__", _line('__version__ = "', '"')),
    Declaration("apps/scheduler/Dockerfile", "ARG VERSION", _line("ARG VERSION=")),
    Declaration("apps/check/Dockerfile", "ARG VERSION", _line("ARG VERSION=")),
    Declaration("uv.lock", "package gpu-scheduler", _lock_entry("gpu-scheduler")),
    Declaration("uv.lock", "package gpu-scheduler-check", _lock_entry("gpu-scheduler-check")),
)
# The charts' image.registry: the `registry:` line of the top-level `image:` block.
_IMAGE_REGISTRY = re.compile(
    r"^image:\n(?:(?:  .*|\s*#.*|)\n)*?  registry: *\"?([^\"\n#]*?)\"? *(?:#.*)?$", re.MULTILINE
)


class VersionError(Exception):
    """The declarations disagree or a tag does not fit; str() lists what to fix."""


def current(root: Path) -> str:
    """The one version every declaration carries."""
    found = {f"{d.path} ({d.what})": d.read(root) for d in DECLARATIONS}
    missing = [where for where, value in found.items() if value is None]
    if missing:
        raise VersionError("no version found in " + ", ".join(missing))
    versions = set(found.values())
    if len(versions) != 1:
        lines = "\n".join(f"  {where}: {value}" for where, value in found.items())
        raise VersionError(f"the version declarations disagree:\n{lines}\nfix with: scripts/version.py set X.Y.Z")
    (version,) = versions
    if not SEMVER.match(version):
        raise VersionError(f"version {version!r} is not X.Y.Z (Helm needs SemVer; the tag is vX.Y.Z)")
    return version


def chart_registries(root: Path) -> dict[str, str]:
    registries = {}
    for chart in CHARTS:
        match = _IMAGE_REGISTRY.search((root / chart / "values.yaml").read_text(encoding="utf-8"))
        if not match:
            raise VersionError(f"{chart}/values.yaml: no image.registry line")
        registries[f"{chart}/values.yaml"] = match.group(1).strip()
    return registries


def check_tag(root: Path, tag: str, registry: str | None) -> str:
    version = current(root)
    if tag != f"v{version}":
        raise VersionError(
            f"tag {tag!r} does not match the version {version} of Chart.yaml (version, appVersion) and the apps: "
            f"a release tag is v{version}. Delete the tag, or release another version with "
            "`scripts/version.py set X.Y.Z`, commit, and tag that commit vX.Y.Z"
        )
    if registry is not None:
        wrong = {path: value for path, value in chart_registries(root).items() if value != registry.rstrip("/")}
        if wrong:
            listed = ", ".join(f"{path} says {value!r}" for path, value in wrong.items())
            raise VersionError(
                f"this pipeline pushes the images to {registry}, but {listed}: the released charts would pull "
                "from elsewhere. Set image.registry in both charts' values.yaml and tag again"
            )
    return version


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/version.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command")
    tag = commands.add_parser("check-tag", help="the tag is v<version> (and the charts name --registry)")
    tag.add_argument("tag")
    tag.add_argument("--registry", help="the registry the pipeline pushes to; both charts' image.registry must be it")
    tags = commands.add_parser("image-tags", help="the image tags of a release tag: vX.Y.Z and X.Y.Z")
    tags.add_argument("tag")
    setter = commands.add_parser("set", help="write X.Y.Z into every declaration")
    setter.add_argument("version")
    args = parser.parse_args(argv)
    try:
        if args.command == "check-tag":
            print(check_tag(args.root, args.tag, args.registry))
        elif args.command == "image-tags":
            print(f"v{check_tag(args.root, args.tag, None)} {current(args.root)}")
        elif args.command == "set":
            if not SEMVER.match(args.version):
                raise VersionError(f"{args.version!r} is not X.Y.Z (no leading v: the tag adds it)")
            for declaration in DECLARATIONS:
                declaration.write(args.root, args.version)
            print(current(args.root))
        else:
            print(current(args.root))
    except VersionError as err:
        print(f"scripts/version.py: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

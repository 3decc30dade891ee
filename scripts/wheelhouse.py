"""Download, on the host, the wheels one image needs, hash-checked against uv.lock.

    wheelhouse.py --app scheduler --target target.json --dest .cache/wheelhouse/scheduler

Inside `docker build` pip cannot reach PyPI here, so the build installs from
DEST with --no-index. DEST gets:
  requirements.txt        the app's runtime dependencies (uv export of its package)
  build-requirements.txt  the image-build group (pip, setuptools)
  *.whl                   exactly one wheel per line above, for the target

The target is the image's own Python, as scripts/images.sh probed it from the
base image (`python3 -c ...` in a container): its marker environment, glibc
and machine. Markers are evaluated here for that Python, not for the host's
(pip download would use the host's), and pip download is asked for wheels of
that platform only; every file it saves is checked against the lock's hashes
(--require-hashes). Run it with scripts/uv.sh's tool venv (pip, packaging).
A stamp (hash of the target and both files) makes a second run a no-op.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
UV = [str(REPO / "scripts" / "uv.sh")]
EXPORT = ["export", "--frozen", "--format", "requirements.txt", "--no-header", "--no-annotate", "--no-emit-workspace"]
# What each image installs, as `uv export` selects it from the lock.
SUBSETS = {
    "scheduler": ["--no-default-groups", "--package", "gpu-scheduler"],
    "check": ["--no-default-groups", "--package", "gpu-scheduler-check", "--extra", "nvml"],
}
BUILD_SUBSET = ["--only-group", "image-build"]
# Legacy manylinux names and the glibc they stand for (PEP 600).
LEGACY_MANYLINUX = {"manylinux2014": (2, 17), "manylinux2010": (2, 12), "manylinux1": (2, 5)}
LEGACY_ARCHES = {"manylinux2014": {"x86_64", "i686", "aarch64", "armv7l", "ppc64", "ppc64le", "s390x"}}
LEGACY_ARCHES |= {"manylinux2010": {"x86_64", "i686"}, "manylinux1": {"x86_64", "i686"}}


def log(message: str) -> None:
    print(f"wheelhouse: {message}", file=sys.stderr, flush=True)


def logical_lines(text: str) -> list[str]:
    """requirements.txt lines with their `\\` continuations joined, comments dropped."""
    joined = text.replace("\\\n", " ")
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def for_target(exported: str, environment: dict[str, str]) -> str:
    """The exported requirements whose markers hold on the target, markers removed, hashes kept."""
    kept = []
    for line in logical_lines(exported):
        spec, _, options = line.partition(" --hash=")
        requirement = Requirement(spec.strip())
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        if not options:
            raise SystemExit(f"uv export gave {spec.strip()!r} without a hash; the lock must pin every file")
        hashes = ("--hash=" + options).split()
        kept.append(f"{requirement.name}{requirement.specifier} " + " ".join(hashes))
    return "\n".join(sorted(kept)) + "\n"


def platform_tags(target: dict) -> list[str]:
    """Every manylinux tag a wheel may carry and still run on the target's glibc and machine."""
    machine = target["machine"]
    major, minor = target["glibc"]
    tags = [f"manylinux_{major}_{m}_{machine}" for m in range(minor, 4, -1)]
    for legacy, glibc in LEGACY_MANYLINUX.items():
        if machine in LEGACY_ARCHES[legacy] and glibc <= (major, minor):
            tags.append(f"{legacy}_{machine}")
    return tags


def export(args: list[str]) -> str:
    result = subprocess.run([*UV, *EXPORT, *args], cwd=REPO, check=True, capture_output=True, text=True)
    return result.stdout


def download(requirements: Path, dest: Path, target: dict) -> None:
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check"]
    argv += ["--no-deps", "--only-binary=:all:", "--require-hashes", "--dest", str(dest)]
    argv += ["--implementation", "cp", "--python-version", target["python_version"]]
    argv += ["--abi", target["abi"], "--abi", "abi3", "--abi", "none"]
    for tag in platform_tags(target):
        argv += ["--platform", tag]
    subprocess.run([*argv, "-r", str(requirements)], check=True)


def wheel_count(requirements: str) -> int:
    return len(names(requirements))


def names(requirements: str) -> set[str]:
    return {Requirement(line.partition(" --hash=")[0]).name for line in logical_lines(requirements)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--app", required=True, choices=sorted(SUBSETS))
    parser.add_argument("--target", required=True, type=Path, help="JSON written by scripts/images.sh's probe")
    parser.add_argument("--dest", required=True, type=Path)
    args = parser.parse_args(argv)

    target = json.loads(args.target.read_text())
    runtime = for_target(export(SUBSETS[args.app]), target["markers"])
    build = for_target(export(BUILD_SUBSET), target["markers"])
    stamp_text = json.dumps(target, sort_keys=True) + runtime + build
    stamp = hashlib.sha256(stamp_text.encode()).hexdigest()[:16]
    stamp_file = args.dest / f".complete-{stamp}"
    if stamp_file.exists():
        log(f"{args.app}: {args.dest} is up to date ({wheel_count(runtime) + wheel_count(build)} wheels)")
        return 0

    # Start empty: a wheel left from an older lock would only bloat the context.
    shutil.rmtree(args.dest, ignore_errors=True)
    args.dest.mkdir(parents=True)
    (args.dest / "requirements.txt").write_text(runtime)
    (args.dest / "build-requirements.txt").write_text(build)
    log(
        f"{args.app}: pip download {wheel_count(runtime)} + {wheel_count(build)} wheels for "
        f"cp{target['python_version'].replace('.', '')} {target['machine']} glibc "
        f"{'.'.join(map(str, target['glibc']))} into {args.dest} (hash-checked)"
    )
    for name in ("requirements.txt", "build-requirements.txt"):
        download(args.dest / name, args.dest, target)
    wheels = sorted(p.name for p in args.dest.glob("*.whl"))
    expected = len(names(runtime) | names(build))
    if len(wheels) != expected:
        raise SystemExit(f"{args.dest}: expected {expected} wheels, pip saved {len(wheels)}: {wheels}")
    stamp_file.touch()
    return 0


if __name__ == "__main__":
    sys.exit(main())

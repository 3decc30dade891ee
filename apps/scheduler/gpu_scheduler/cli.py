"""The `gpu-scheduler` command: one entry point, a subcommand per component."""

from __future__ import annotations

import argparse
import importlib
import sys

from . import __version__
from .config import env, env_help
from .logs import FORMATS, LEVELS, setup_logging

# subcommand -> (module exposing add_arguments/run, one-line help). Only the
# chosen module's run() imports the heavy libraries (kubernetes, flask,
# granian), so building the parser stays fast for every subcommand.
SUBCOMMANDS = {
    "scheduler": ("gpu_scheduler.scheduler.command", "run the scheduler: bind pods to the nodes their map names"),
    "webhook": (
        "gpu_scheduler.webhook.command",
        "run the admission webhook (granian, TLS) that injects CUDA_VISIBLE_DEVICES",
    ),
    "certs": ("gpu_scheduler.certs.command", "create the webhook's CA and serving certificate (files or a Secret)"),
    "map": ("gpu_scheduler.mapcli", "validate a gpu-scheduling-map or generate one for a cluster"),
    "gpus": (
        "gpu_scheduler.gpuscli",
        "show each node's GPUs (from its published inventory) and the live pods holding them",
    ),
    "smoke-test": (
        "gpu_scheduler.smoketest",
        "prove an installed release works: a probe pod bound by its map, its container seeing the map's devices",
    ),
    "agent": (
        "gpu_scheduler.agent.command",
        "publish this node's GPUs (NVML) on its Node object for the scheduler and `gpu-scheduler gpus`",
    ),
}


def _add_logging_flags(parser: argparse.ArgumentParser, suppress: bool) -> None:
    # On subcommands the defaults are suppressed so that a flag given before the
    # subcommand is not overwritten by the subparser's default.
    default_format = argparse.SUPPRESS if suppress else env("LOG_FORMAT", "text")
    default_level = argparse.SUPPRESS if suppress else env("LOG_LEVEL", "info")
    parser.add_argument(
        "--log-format",
        choices=FORMATS,
        default=default_format,
        help=env_help("log line format", "LOG_FORMAT") if not suppress else "log line format (env LOG_FORMAT)",
    )
    parser.add_argument(
        "--log-level",
        choices=LEVELS,
        type=str.lower,
        default=default_level,
        help=env_help("log level", "LOG_LEVEL") if not suppress else "log level (env LOG_LEVEL)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu-scheduler",
        description="Kubernetes scheduler that places pods by their gpu-scheduling-map annotation "
        "and gives their containers CUDA_VISIBLE_DEVICES.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _add_logging_flags(parser, suppress=False)
    commands = parser.add_subparsers(dest="command", required=True, metavar="{" + ",".join(SUBCOMMANDS) + "}")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sub = commands.add_parser(name, help=help_text, description=help_text[0].upper() + help_text[1:] + ".")
        _add_logging_flags(sub, suppress=True)
        sub.set_defaults(module=module_name)
        importlib.import_module(module_name).add_arguments(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    setup_logging(args.log_format, args.log_level)
    return importlib.import_module(args.module).run(args)


if __name__ == "__main__":
    sys.exit(main())

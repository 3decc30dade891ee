"""`gpu-scheduler map validate|generate`: check a map before it reaches a cluster, or write one."""

from __future__ import annotations

import argparse
import json
import sys

from .config import env, env_help
from .placement import InvalidMapError, parse_map_uncached
from .scheduling.nodes import GPU_RESOURCE, NodeInfo


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="map_command", required=True, metavar="{validate,generate}")
    validate = actions.add_parser(
        "validate",
        help="parse a map; print it as JSON (exit 0) or one 'line N: ...' per error on stderr (exit 1)",
        description="Parse a gpu-scheduling-map. On success print it as JSON and exit 0; "
        "otherwise print one 'line N: <message>' line per error on stderr and exit 1.",
    )
    validate.add_argument("file", nargs="?", default="-", help="file with the map's text, or - for stdin (default)")
    generate = actions.add_parser(
        "generate",
        help="write a map for the nodes of the current cluster (one index per GPU node)",
        description="Write a gpu-scheduling-map with one entry per node that has nvidia.com/gpu "
        "capacity, in node-name order, giving each index all of its node's GPUs.",
    )
    generate.add_argument("--kubeconfig", default=env("KUBECONFIG", ""), help=env_help("kubeconfig file", "KUBECONFIG"))
    generate.add_argument("--selector", "-l", default="", help="label selector restricting the nodes (e.g. pool=gpu)")


def _validate(path: str) -> int:
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
    except (OSError, UnicodeDecodeError) as err:
        print(f"cannot read {path}: {err}", file=sys.stderr)
        return 2
    try:
        parsed = parse_map_uncached(text)
    except InvalidMapError as err:
        for line_error in err.errors:
            print(line_error, file=sys.stderr)
        if err.total > len(err.errors):
            print(f"... and {err.total - len(err.errors)} more errors", file=sys.stderr)
        return 1
    print(json.dumps(parsed.to_json(), indent=2))
    return 0


def render_generated_map(nodes: list[NodeInfo]) -> str:
    """One line per GPU node, sorted by name; nodes without GPUs are listed in a comment."""
    with_gpus = sorted((n for n in nodes if n.gpus > 0), key=lambda n: n.name)
    lines = [f"# generated from {len(with_gpus)} nodes with {GPU_RESOURCE} capacity"]
    without = sorted(n.name for n in nodes if n.gpus <= 0)
    if without:
        lines.append(f"# skipped, no GPUs: {', '.join(without)}")
    for index, node in enumerate(with_gpus):
        lines.append(f"{index}={node.name}:{','.join(str(d) for d in range(node.gpus))}")
    return "\n".join(lines) + "\n"


def _generate(kubeconfig: str, selector: str) -> int:
    from kubernetes import client, config  # imported here: `map validate` must not need it

    if kubeconfig:
        config.load_kube_config(kubeconfig)
    else:
        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
    nodes = client.CoreV1Api().list_node(label_selector=selector).to_dict()["items"]
    infos = [NodeInfo.from_api(n) for n in nodes]
    if not any(n.gpus > 0 for n in infos):
        print(f"no node has {GPU_RESOURCE} capacity; nothing to map", file=sys.stderr)
        return 1
    sys.stdout.write(render_generated_map(infos))
    return 0


def run(args: argparse.Namespace) -> int:
    if args.map_command == "validate":
        return _validate(args.file)
    return _generate(args.kubeconfig, args.selector)

"""docs/reference.md's generated parts: every flag of `gpu-scheduler` and every metric it exposes,
read from the code itself so that the page cannot drift from it.

    .venv/bin/python scripts/reference.py            # rewrite docs/reference.md (`make reference`)
    .venv/bin/python scripts/reference.py --check    # exit 1, saying what differs, when it is stale

Each part replaces what stands between its markers (`<!-- reference:flags:start -->` ...
`<!-- reference:flags:end -->`, likewise `metrics`); the prose around them is written by hand.
Flags come from the parser the command itself builds, defaults as they are with no environment
variable set. Metrics come from the registries the scheduler and the webhook serve, each state
gauge given one sample so that its labels show.
"""

from __future__ import annotations

import argparse
import datetime
import difflib
import os
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "reference.md"
ENV = re.compile(r"\s*\(env ([A-Z0-9_]+)(?:; default: [^)]*)?\)")
# prometheus_client's own process_* and python_* metrics are listed by their prefix only.
STANDARD = ("process_", "python_")


def _clean_environment() -> None:
    """Defaults are read from the environment when the parser is built: document them unset."""
    for name in list(os.environ):
        if name not in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR"):
            del os.environ[name]


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _default(action: argparse.Action, inherited: dict[str, object]) -> str:
    # The logging flags repeat on each subcommand with their default suppressed, so that
    # one given before the subcommand stands: their default is the top-level parser's.
    default = inherited.get(action.dest) if action.default is argparse.SUPPRESS else action.default
    if default is None or default == "" or default is argparse.SUPPRESS:
        return ""
    if isinstance(default, bool):
        default = "true" if default else "false"
    elif isinstance(default, (list, tuple)):
        default = ", ".join(map(str, default))
    return f"`{default}`"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    return dict(action.choices) if action else {}


def _flags_table(name: str, sub: argparse.ArgumentParser, inherited: dict[str, object]) -> list[str]:
    lines = [f"### `gpu-scheduler {name}`", "", _cell(sub.description or ""), ""]
    lines += ["| flag | env | default | what |", "|---|---|---|---|"]
    for action in sub._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            # A command of commands (`map validate`, `map generate`): each has its own table below.
            choices = "\\|".join(f"`{choice}`" for choice in action.choices)
            lines.append(f"| {choices} |  |  | the subcommand: each has its section below |")
            continue
        flag = ", ".join(f"`{option}`" for option in action.option_strings) or f"`{action.dest}`"
        if action.choices:
            flag += " " + "\\|".join(f"`{choice}`" for choice in action.choices)
        help_text = (action.help or "") % {"default": action.default, "prog": sub.prog}
        env = ENV.search(help_text)
        what = ENV.sub("", help_text).strip().rstrip(";").strip()
        lines.append(
            f"| {flag} | {f'`{env.group(1)}`' if env else ''} | {_default(action, inherited)} | {_cell(what)} |"
        )
    lines.append("")
    for child, parser in _subcommands(sub).items():
        lines += _flags_table(f"{name} {child}", parser, inherited)
    return lines


def flags_section() -> str:
    """A table per subcommand, and per subcommand of a subcommand, in the parser's order."""
    from gpu_scheduler.cli import build_parser

    parser = build_parser()
    inherited = {action.dest: action.default for action in parser._actions}
    lines = []
    for name, sub in _subcommands(parser).items():
        lines += _flags_table(name, sub, inherited)
    return "\n".join(lines)


def _registries() -> list[tuple[str, object]]:
    from gpu_scheduler.scheduler.metrics import SchedulerMetrics
    from gpu_scheduler.webhook.metrics import WebhookMetrics

    scheduler = SchedulerMetrics()
    # One sample each, so that the state gauges' labels can be read from what they yield.
    scheduler.watch_state(
        queue_counts=lambda: {"active": 1},
        gpus_held=lambda: {"node1": 1},
        gpu_holders=lambda: [("node1", "0", "default/pod-0")],
        events_dropped=lambda: 0,
        relists=lambda: {("pods", "expired"): 1},
        watch_silences=lambda: {"pods": 1.0},
    )
    scheduler.watch_reports(events=lambda: {"sent": 1}, conditions=lambda: {"written": 1})
    scheduler.watch_gangs(lambda: {"waiting": 1})
    scheduler.observe_attempt("scheduled", 0.01)  # the attempt histogram's label shows once observed
    expiry = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=1)
    webhook = WebhookMetrics(certificate_not_after=lambda: expiry)
    return [("scheduler", scheduler.registry), ("webhook", webhook.registry)]


def metrics_section() -> str:
    lines = ["| metric | type | labels | served by | what |", "|---|---|---|---|---|"]
    for server, registry in _registries():
        for family in registry.collect():
            if family.name.startswith(STANDARD):
                continue
            name = family.name + ("_total" if family.type == "counter" else "")
            labels = sorted({label for sample in family.samples for label in sample.labels if label != "le"})
            kind = family.type + (" (`_bucket`, `_sum`, `_count`)" if family.type == "histogram" else "")
            lines.append(
                f"| `{name}` | {kind} | {', '.join(f'`{label}`' for label in labels)} | {server} "
                f"| {_cell(family.documentation)} |"
            )
    lines += [
        "",
        "Both also serve prometheus_client's standard `process_*` metrics; the scheduler its `python_*` ones too.",
        "",
    ]
    return "\n".join(lines)


def render(text: str) -> str:
    for part, section in (("flags", flags_section()), ("metrics", metrics_section())):
        start, end = f"<!-- reference:{part}:start -->", f"<!-- reference:{part}:end -->"
        head, found, rest = text.partition(start)
        _, found_end, tail = rest.partition(end)
        if not found or not found_end:
            raise SystemExit(f"{PAGE}: no {start} ... {end} markers")
        text = f"{head}{start}\n{section}{end}{tail}"
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/reference.md is not what the code says")
    args = parser.parse_args(argv)
    _clean_environment()
    current = PAGE.read_text()
    wanted = render(current)
    if args.check:
        if current != wanted:
            diff = difflib.unified_diff(
                current.splitlines(), wanted.splitlines(), "docs/reference.md", "the code", lineterm=""
            )
            print("\n".join(diff), file=sys.stderr)
            print("docs/reference.md is stale: run `make reference`", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(wanted)
    print(f"{PAGE}: flags and metrics written from the code", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

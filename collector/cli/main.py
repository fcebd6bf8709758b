"""The ``tracehook`` command: one entry point, one subcommand per module.

Each subcommand lives in the module that implements it; that module defines
``add_arguments(parser)`` and ``run(args) -> int``.  The command is part of the
collector (``pip install 'tracehook[collector]'``); the library never imports it.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

# name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "collector": ("collector.cli.serve", "run the collector (ingest, query API, web page)"),
    "index": ("spark_jobs.index_job", "index the trace log into the store (PySpark Structured Streaming; --follow keeps up)"),
    "set-aside": ("spark_jobs.setaside_cmd", "list, show and re-index the events the index job set aside"),
    "query": ("collector.cli.query", "look up traces by id, key, property, topic + time or dead letters"),
    "props": ("collector.cli.props", "choose the message properties the index is searchable by; backfill them"),
    "offsets": ("collector.cli.backtrack", "offsets at a time and a group's reset plan"),
    "replay-list": ("collector.cli.backtrack", "messages a group never consumed successfully"),
    "kafka-reset": ("collector.cli.kafka_reset", "commit a reset plan's offsets on a real Kafka"),
    "kafka-topic": ("collector.cli.kafka_topic", "create the Kafka trace topic with a chosen partition count"),
    "replay": ("collector.cli.replay", "re-deliver to one group exactly the Kafka records it missed "
                                       "(--from-trace: from the kept bodies, Kafka or RabbitMQ)"),
    "bodies": ("collector.cli.bodies", "erase kept message bodies by topic and time, or by message id"),
    "migrate-store": ("collector.cli.migrate", "copy an index of layout 1 or 2 into a store of this layout"),
    "upgrade-store": ("collector.cli.upgrade", "upgrade an index of layout 2 in place (seconds; snapshot first)"),
    "demo": ("collector.cli.demo", "run a collector, traffic and the index job on the embedded store"),
    "deploy-files": ("collector.cli.deploy_files", "write the systemd units and config examples into a directory"),
}


TIME_OPTIONS = frozenset(("--time", "--begin", "--end", "--since"))
"""Options whose value may be a relative time with a leading '-' (``--begin -6h``); ``--since -1h``
is joined too, so that it gets the time parser's error rather than argparse's."""
_RELATIVE_VALUE = re.compile(r"-[0-9]")


def join_relative_times(argv: Sequence[str]) -> list[str]:
    """``--begin -6h`` as ``--begin=-6h``.

    argparse reads a word starting with '-' (other than a plain negative number) as an
    option, so ``--begin -6h`` would fail with "expected one argument".
    """
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":  # everything after it is positional
            return out + list(argv[i:])
        if arg in TIME_OPTIONS and i + 1 < len(argv) and _RELATIVE_VALUE.match(argv[i + 1]):
            out.append(f"{arg}={argv[i + 1]}")
            i += 2
            continue
        out.append(arg)
        i += 1
    return out


EXIT_CODES = """\
exit status (every command; docs/exit-codes.md):
  0   done (found, answered, indexed, stopped cleanly)
  1   nothing found (query, offsets), or the run itself failed (index job, demo,
      migrate-store: rerun to resume, a collector that could not start), a
      Kafka topic that exists with another partition count (kafka-topic
      create), some deliveries failed (replay)
  2   bad arguments, bad paths or URLs, an unknown consumer group (replay-list),
      an unreachable collector, store or broker, a file that exists (deploy-files)
  3   bad input to the index job (not a trace log, a checkpoint of another log or
      store, records deleted before they were indexed): a retry does not help
  4   replay: done, but some records could not be replayed (gone from the
      broker, no partition/offset in the trace, a different message id there;
      --from-trace: no whole body kept, erased);
      set-aside reindex: done, but some events still cannot be indexed
  5   the index store is in another layout (made by another release): the
      line names `tracehook upgrade-store` (layout 2, in place) or
      `tracehook migrate-store` (layout 1), or says to upgrade tracehook
  130 interrupted (Ctrl-C; replay and migrate-store print how to resume);
      a stop by SIGTERM is 0
Every error is one line on stderr."""


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr (exit 2), not usage + error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is not there
        return False


def _available() -> dict[str, tuple[str, str]]:
    return {name: entry for name, entry in SUBCOMMANDS.items() if _exists(entry[0])}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every installed subcommand."""
    parser = OneLineParser(prog="tracehook", description="Message tracing for message-queue apps.",
                           epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, help_) in _available().items():
        sub = subparsers.add_parser(name, help=help_, description=help_, epilog=EXIT_CODES,
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        module = importlib.import_module(module_name)
        add = getattr(module, f"add_{name.replace('-', '_')}_arguments", None) or module.add_arguments
        add(sub)
        sub.set_defaults(_module=module_name, _command=name)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``tracehook COMMAND ...``; returns the process exit code."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        parser = build_parser()
    except ModuleNotFoundError as exc:  # `pip install tracehook` alone is the library, not the command
        print(f"tracehook: {exc.name} is not installed; the command needs the collector's packages: "
              "pip install 'tracehook[collector]'", file=sys.stderr)
        return 2
    args = parser.parse_args(join_relative_times(argv))
    module = importlib.import_module(args._module)
    name = args._command.replace("-", "_")
    # run_<name> only pairs with add_<name>_arguments: spark_jobs.run_index is a Python API.
    multi = hasattr(module, f"add_{name}_arguments")
    run = getattr(module, f"run_{name}") if multi else module.run
    try:
        return int(run(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

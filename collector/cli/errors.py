"""Named errors of the ``tracehook`` command, and which errors a command reports as one line.

Every error in :data:`USER_ERRORS` is the user's to fix (a bad argument, time, URL, an
unreachable collector or store): the command prints ``error: ...`` and exits 2
(docs/exit-codes.md), or 5 for a store in an older layout (:func:`report`). Anything else is a
bug and keeps its traceback.
"""

from __future__ import annotations

import sys

from collector.log.errors import LogError
from collector.query.errors import QueryInputError
from collector.store.errors import LayoutVersionError, StoreError

EXIT_ERROR = 2
"""A user's error: bad arguments, paths, URLs, an unreachable source."""
EXIT_OLD_LAYOUT = 5
"""The index store is in another layout than this release's: ``tracehook upgrade-store`` (in place) or
``tracehook migrate-store`` (a copy) brings an older one across."""


class CommandError(Exception):
    """Base of the command line's own errors."""


class QueryFailed(CommandError):
    """The source answered with an error, or could not be reached."""


class DemoError(CommandError):
    """A demo step failed (collector did not start, nothing was indexed...)."""


class GroupActiveError(CommandError):
    """The consumer group still has members: its offsets cannot be reset now."""


class TopicMismatchError(CommandError):
    """``kafka-topic create``: the topic exists with another partition count or replication factor."""


class TopicRefusedError(CommandError):
    """``kafka-topic create``: the broker refused to create the topic (name, replication factor, config)."""
class DeployFilesError(CommandError):
    """``tracehook deploy-files``: a file is there already (without ``--force``), or the files are missing or cannot be written."""


class ReplayError(CommandError):
    """``tracehook replay`` cannot run as asked (no broker, a RabbitMQ topic, a handler that does not import)."""


USER_ERRORS: tuple[type[BaseException], ...] = (QueryFailed, QueryInputError, StoreError, LogError)
"""What a query or backtracking command reports as ``error: ...`` with exit status 2."""


def report(exc: BaseException) -> int:
    """Print ``error: ...`` (one line) for a user's error; its exit status (5: a store in another layout)."""
    print(f"error: {exc}", file=sys.stderr)
    return EXIT_OLD_LAYOUT if isinstance(exc, LayoutVersionError) else EXIT_ERROR

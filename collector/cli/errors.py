"""Named errors of the ``tracehook`` command, and which errors a command reports as one line.

Every error in :data:`USER_ERRORS` is the user's to fix (a bad argument, time, URL, an
unreachable collector or store): the command prints ``error: ...`` and exits 2
(docs/exit-codes.md). Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from collector.log.errors import LogError
from collector.query.errors import QueryInputError
from collector.store.errors import StoreError


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
class ReplayError(CommandError):
    """``tracehook replay`` cannot run as asked (no broker, a RabbitMQ topic, a handler that does not import)."""


USER_ERRORS: tuple[type[BaseException], ...] = (QueryFailed, QueryInputError, StoreError, LogError)
"""What a query or backtracking command reports as ``error: ...`` with exit status 2."""

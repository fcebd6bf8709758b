"""Handlers ``tracehook replay --handler`` calls in the real-Kafka tests (module:function by name)."""

from __future__ import annotations

import asyncio
from typing import Any

HANDLED: list[Any] = []
"""Every record a handler here was called with (kafka-python ConsumerRecords)."""


def handle(record: Any) -> None:
    HANDLED.append(record)


async def handle_async(record: Any) -> None:
    await asyncio.sleep(0)
    HANDLED.append(record)


def interrupt_after_three(record: Any) -> None:
    """Handle the record, and after the third one press Ctrl-C (SIGINT to this process)."""
    import os
    import signal

    HANDLED.append(record)
    if len(HANDLED) == 3:
        os.kill(os.getpid(), signal.SIGINT)

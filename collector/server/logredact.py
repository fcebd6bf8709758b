"""Keep the collector's bearer tokens out of its log output.

The collector itself never logs a token, and it runs without an access log. But
aiohttp logs a malformed request with the parser's error, which quotes the offending
header line: ``Authorization: Bearer <token>\\x01`` would print the token. So every
handler of the root logger gets a filter that replaces the configured tokens in the
message and the traceback with ``[redacted]``::

    install_redaction(config.access.values())   # every configured token, named or not
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

REDACTED = "[redacted]"


class RedactSecrets(logging.Filter):
    """Rewrites each record so that none of ``secrets`` appears in its message or traceback."""

    def __init__(self, secrets: Iterable[str | None]) -> None:
        super().__init__()
        forms: set[str] = set()
        for secret in filter(None, secrets):
            # Also as repr() shows it inside a str or bytes literal (escaped quotes, backslashes).
            forms.update({secret, repr(secret)[1:-1], repr(secret.encode())[2:-1]})
        self._forms = sorted(forms, key=len, reverse=True)  # longest first: no partial leftovers

    def _clean(self, text: str) -> str:
        for form in self._forms:
            text = text.replace(form, REDACTED)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._forms:
            return True
        record.msg, record.args = self._clean(record.getMessage()), None
        if record.exc_info and not record.exc_text:
            # Formatters reuse exc_text when it is set, so the traceback is formatted (and cleaned) once here.
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self._clean(record.exc_text)
        if record.stack_info:
            record.stack_info = self._clean(record.stack_info)
        return True


def install_redaction(secrets: Iterable[str | None], logger: logging.Logger | None = None) -> RedactSecrets:
    """Add a :class:`RedactSecrets` filter to every handler of ``logger`` (default: the root logger).

    Handler filters, not logger filters: records from child loggers such as
    ``aiohttp.server`` reach the root handlers without passing the root logger's filters.
    """
    redact = RedactSecrets(secrets)
    for handler in (logger or logging.getLogger()).handlers:
        handler.addFilter(redact)
    return redact

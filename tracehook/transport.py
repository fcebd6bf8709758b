"""One collector URL: a persistent stdlib HTTP connection and its "set aside until" time.

The stdlib client keeps the library free of extra dependencies; it runs only
in the dispatcher's thread, so it never blocks the app or an event loop.
An ``https://`` collector's certificate and host name are verified against the
system CAs, or against ``ca_file`` alone when one is given.
"""

from __future__ import annotations

import http.client
import socket
import ssl
from urllib.parse import urlsplit

from .config import BATCHES_PATH
from .errors import DeliveryError


class CollectorConnection:
    """One collector URL with its persistent connection and 'set aside until' time."""

    def __init__(self, url: str, timeout_s: float, ca_file: str | None = None) -> None:
        parts = urlsplit(url)
        self.url = url
        self.https = parts.scheme == "https"
        # create_default_context verifies the certificate chain and the host name (TLS 1.2+).
        self.ssl_context = ssl.create_default_context(cafile=ca_file) if self.https else None
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port
        self.path = (parts.path.rstrip("/") or "") + BATCHES_PATH
        self.timeout_s = timeout_s
        self.conn: http.client.HTTPConnection | None = None
        self.aside_until = 0.0  # failed recently: others are preferred until then
        self.busy_until = 0.0  # said 429/503 + Retry-After: not asked again before then
        self.fields: int | None = None  # the event fields it takes (wire.WIRE_HEADER); None: not heard from yet

    def post(self, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        """POST one batch; returns (status, lower-cased headers, response body); raises
        DeliveryError on I/O errors."""
        for attempt in (1, 2):
            if self.conn is None:
                if self.https:
                    self.conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout_s,
                                                            context=self.ssl_context)
                else:
                    self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
            try:
                if self.conn.sock is None:
                    self.conn.connect()
                    sock: socket.socket = self.conn.sock  # type: ignore[assignment]  # set by connect()
                    # Small requests must not wait for a delayed ACK (Nagle) on a kept-alive connection.
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self.conn.request("POST", self.path, body=body, headers=headers)
                response = self.conn.getresponse()
                content = response.read()
                answer = {k.lower(): v for k, v in response.getheaders()}
                if answer.get("connection", "").lower() == "close":
                    self.close()
                return response.status, answer, content
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                # A kept-alive connection the server closed while idle fails on first use; one fresh try.
                if attempt == 2 or not isinstance(exc, (http.client.RemoteDisconnected, ConnectionResetError,
                                                        BrokenPipeError)):
                    raise DeliveryError(self.url, f"{type(exc).__name__}: {exc}") from None
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

"""TLS for the collector: the server context built from ``tls_cert`` and ``tls_key``.

::

    context = server_ssl_context(config)   # None when TLS is off; CollectorConfigError if the files are bad
    web.run_app(create_app(config), ssl_context=context, ...)

The files are read once at start, so a bad certificate stops the collector with a clear
message instead of failing every handshake later. Restart the collector to load a renewed
certificate.
"""

from __future__ import annotations

import ssl

from collector.server.config import CollectorConfig
from collector.server.errors import CollectorConfigError


def server_ssl_context(config: CollectorConfig) -> ssl.SSLContext | None:
    """An SSL context serving ``config.tls_cert`` / ``config.tls_key``, or None for plain HTTP."""
    if config.tls_cert is None or config.tls_key is None:
        return None
    cert, key = config.tls_cert, config.tls_key

    def no_password() -> str:
        # Without a callback OpenSSL would prompt on the terminal and hang a service at start.
        raise CollectorConfigError(f"TLS key {key} is encrypted; give the collector an unencrypted key")

    # Purpose.CLIENT_AUTH: a server-side context with the ssl module's secure defaults (TLS 1.2+).
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key, password=no_password)
    except CollectorConfigError:
        raise
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError: bad PEM, key not matching the cert
        raise CollectorConfigError(f"cannot load TLS certificate {cert} with key {key}: {exc}") from exc
    return context

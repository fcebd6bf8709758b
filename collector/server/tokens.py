"""Named bearer tokens with scopes: who may ingest, query, read message bodies and administer.

A token is a name, its scopes and its secret value.  They come from ``[[tokens]]`` in the
collector's TOML file, from a ``tokens_file`` holding the same array, and from the older
``ingest_token`` / ``query_token`` settings, which become the tokens named ``ingest`` (scope
ingest) and ``query`` (scopes query and body: what the query token has always allowed).
Several tokens may share a scope, so a token can be rotated without a gap::

    [[tokens]]
    name = "billing-ui"
    scopes = ["query", "body"]
    token_file = "/etc/tracehook/tokens/billing-ui"

Every entry is checked when the config is built; a bad one is a :class:`CollectorConfigError`
naming it.  A value is never shown in a message, a log line or a repr.
"""

from __future__ import annotations

import hmac
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from collector.server.errors import CollectorConfigError

INGEST, QUERY, BODY, ADMIN = "ingest", "query", "body", "admin"
SCOPES = (INGEST, QUERY, BODY, ADMIN)
"""ingest: POST /v1/batches and /v1/traces; query: every query route; body: message bodies in
answers (with query); admin: POST /v1/admin/roll, and the admin routes to come."""
MIN_TOKEN_LEN = 16
TOKEN_PLACEHOLDER = "change-me"
"""How the example tokens start (deploy/systemd/tracehook.env): a collector refuses to run with one."""
LEGACY_SCOPES = {"ingest_token": (INGEST, frozenset({INGEST})), "query_token": (QUERY, frozenset({QUERY, BODY}))}
"""The name and scopes each older single-token setting stands for."""
ENTRY_KEYS = ("name", "scopes", "token", "token_file")
# Names show up in log lines (body reads): no spaces, quotes or control characters to forge one with.
_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
# Printable ASCII without spaces: what an Authorization header carries intact.
_VALUE = re.compile(r"[!-~]+")


@dataclass(frozen=True)
class Token:
    """One named token; its ``value`` stays out of ``repr``."""

    name: str
    scopes: frozenset[str]
    value: str = field(repr=False)


@dataclass(frozen=True)
class TokenTable:
    """The configured tokens, looked up by the value a request presents."""

    tokens: tuple[Token, ...] = ()

    def guarded(self, *scopes: str) -> bool:
        """Whether some token holds one of ``scopes`` (a purpose nobody holds a token for is open)."""
        return any(t.scopes & set(scopes) for t in self.tokens)

    def find(self, presented: str | None) -> Token | None:
        """The token whose value is ``presented``, compared in constant time; None if none is."""
        if presented is None:
            return None
        found = None
        for token in self.tokens:  # no early exit: the time taken does not tell which token matched
            if hmac.compare_digest(presented.encode(), token.value.encode()):
                found = token
        return found

    def values(self) -> list[str]:
        """Every secret value (for the log redaction filter)."""
        return [t.value for t in self.tokens]


def _entry_error(where: str, index: int, name: Any, problem: str) -> CollectorConfigError:
    label = f"{where}[{index}]" + (f" ({name!r})" if isinstance(name, str) and name else "")
    return CollectorConfigError(f"{label}: {problem}")


def _read_token_file(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()  # a trailing newline is how editors and `echo` end the file
    except (OSError, ValueError) as exc:  # ValueError: not UTF-8
        raise ValueError(f"cannot read token_file {path}: {getattr(exc, 'strerror', None) or exc}") from None


def parse_entry(entry: Any, where: str, index: int) -> Token:
    """One ``[[tokens]]`` table (or a :class:`Token` given in code) as a checked :class:`Token`."""
    if isinstance(entry, Token):
        entry = {"name": entry.name, "scopes": sorted(entry.scopes), "token": entry.value}
    if not isinstance(entry, Mapping):
        raise _entry_error(where, index, None, f"expected a table with {', '.join(ENTRY_KEYS)}")
    name = entry.get("name")
    unknown = sorted(set(entry) - set(ENTRY_KEYS))
    if unknown:
        raise _entry_error(where, index, name, f"unknown keys {unknown}: expected {', '.join(ENTRY_KEYS)}")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise _entry_error(where, index, None, "name must be 1 to 64 letters, digits, '.', '_' or '-'")
    scopes = entry.get("scopes")
    if not isinstance(scopes, (list, tuple, set, frozenset)) or not scopes:
        raise _entry_error(where, index, name, f"scopes must be a non-empty list of {', '.join(SCOPES)}")
    bad = [s for s in scopes if s not in SCOPES]
    if bad:
        raise _entry_error(where, index, name, f"unknown scope {bad[0]!r}: expected some of {', '.join(SCOPES)}")
    if BODY in scopes and QUERY not in scopes:
        raise _entry_error(where, index, name, "scope body needs scope query too (body only adds bodies to queries)")
    has_value, has_file = "token" in entry, "token_file" in entry
    if has_value == has_file:
        raise _entry_error(where, index, name, "give token or token_file (one of them)")
    if has_file:
        path = entry["token_file"]
        if not isinstance(path, str) or not path:
            raise _entry_error(where, index, name, "token_file must be a file name")
        try:
            value = _read_token_file(path)
        except ValueError as exc:
            raise _entry_error(where, index, name, str(exc)) from None
        key = f"the token in {path}"
    else:
        value, key = entry["token"], "token"
        if not isinstance(value, str):
            raise _entry_error(where, index, name, "token must be a string")
    if value.startswith(TOKEN_PLACEHOLDER):
        raise _entry_error(where, index, name, f"{key} is still the example's placeholder (it starts with "
                                               f"{TOKEN_PLACEHOLDER!r}): set a secret token of your own")
    if len(value) < MIN_TOKEN_LEN:
        raise _entry_error(where, index, name, f"{key} is shorter than {MIN_TOKEN_LEN} characters")
    if not _VALUE.fullmatch(value):
        raise _entry_error(where, index, name, f"{key} must be printable ASCII without spaces")
    return Token(name, frozenset(scopes), value)


def parse_entries(entries: Any, where: str = "tokens") -> tuple[Token, ...]:
    """A ``tokens`` array (of tables, or of :class:`Token`) as checked tokens."""
    if not isinstance(entries, (list, tuple)):
        raise CollectorConfigError(f"{where}: expected an array of tables ([[tokens]])")
    return tuple(parse_entry(entry, where, i) for i, entry in enumerate(entries))


def read_tokens_file(path: str) -> tuple[Token, ...]:
    """The tokens of a TOML file holding ``[[tokens]]`` (``tokens_file``)."""
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except (OSError, ValueError) as exc:
        raise CollectorConfigError(f"cannot read tokens_file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    unknown = sorted(set(doc) - {"tokens"})
    if unknown:
        raise CollectorConfigError(f"tokens_file {path}: unknown keys {unknown}: it holds [[tokens]] only")
    return parse_entries(doc.get("tokens", []), f"{path}: tokens")


def build_table(legacy: Mapping[str, str | None], named: Sequence[Token],
                from_file: Iterable[Token] = ()) -> TokenTable:
    """All tokens in one table, after the checks across entries: unique names, unique values.

    ``legacy`` maps ``ingest_token`` / ``query_token`` to their values (None: not set).
    """
    given: list[tuple[str, Token]] = [  # (where it was given, the token)
        (key, Token(name, scopes, value))
        for key, (name, scopes) in LEGACY_SCOPES.items() if (value := legacy.get(key)) is not None]
    given += [("tokens", t) for t in (*named, *from_file)]
    names: dict[str, str] = {}
    values: dict[str, str] = {}
    for where, token in given:
        if token.name in names:
            also = "" if names[token.name] == "tokens" else f" (it is {names[token.name]}'s name)"
            raise CollectorConfigError(f"tokens: name {token.name!r} is given twice{also}: each token needs its own")
        names[token.name] = where
        other = next((n for v, n in values.items() if hmac.compare_digest(v.encode(), token.value.encode())), None)
        if other is not None:
            if where == "query_token" and names[other] == "ingest_token":
                raise CollectorConfigError("ingest_token and query_token must differ")
            raise CollectorConfigError(f"tokens: {other!r} and {token.name!r} have the same token: "
                                       "give each name its own")
        values[token.value] = token.name
    return TokenTable(tuple(token for _, token in given))

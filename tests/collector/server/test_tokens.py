"""Named tokens with scopes: the checks at start, 401 / 403 by scope, rotation, and values kept secret.

Which query routes show message bodies is tested route by route in api/test_bodies.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import pathlib

import pytest
from collector_service_helpers import make_batch
from otlp_helpers import PRODUCER, request, span

from collector.cli import serve
from collector.server.app import create_app
from collector.server.config import CollectorConfig, load_config
from collector.server.errors import CollectorConfigError
from collector.server.tokens import Token

MSGPACK = {"Content-Type": "application/msgpack"}
OLD_INGEST, NEW_INGEST = "ingest-old-0123456789", "ingest-new-0123456789"
READER, ADMIN = "reader-token-0123456789", "admin-token-0123456789"
TOKENS = [
    {"name": "sender-old", "scopes": ["ingest"], "token": OLD_INGEST},
    {"name": "sender-new", "scopes": ["ingest"], "token": NEW_INGEST},
    {"name": "reader", "scopes": ["query"], "token": READER},
    {"name": "ops", "scopes": ["admin"], "token": ADMIN},
]
GOOD = 'name = "ui"\nscopes = ["query"]\ntoken = "0123456789abcdef"\n'


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _toml(tmp_path: pathlib.Path, text: str, name: str = "c.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(("entry", "message"), [
    ('name = "ui"\nscopes = ["query", "bodies"]\ntoken = "0123456789abcdef"',
     "tokens[0] ('ui'): unknown scope 'bodies': expected some of ingest, query, body, admin"),
    ('name = ""\nscopes = ["query"]\ntoken = "0123456789abcdef"',
     "tokens[0]: name must be 1 to 64 letters, digits, '.', '_' or '-'"),
    ('scopes = ["query"]\ntoken = "0123456789abcdef"', "tokens[0]: name must be"),
    ('name = "ui"\nscopes = []\ntoken = "0123456789abcdef"', "tokens[0] ('ui'): scopes must be a non-empty list"),
    ('name = "ui"\nscopes = ["body"]\ntoken = "0123456789abcdef"', "tokens[0] ('ui'): scope body needs scope query"),
    ('name = "ui"\nscopes = ["query"]\ntoken = "0123456789abcde"',
     "tokens[0] ('ui'): token is shorter than 16 characters"),
    ('name = "ui"\nscopes = ["query"]\ntoken = "change-me-0123456789"',
     "tokens[0] ('ui'): token is still the example's placeholder"),
    ('name = "ui"\nscopes = ["query"]\ntoken = "0123456789 abcdef"',
     "tokens[0] ('ui'): token must be printable ASCII without spaces"),
    ('name = "ui"\nscopes = ["query"]', "tokens[0] ('ui'): give token or token_file (one of them)"),
    ('name = "ui"\nscopes = ["query"]\ntoken_file = "/nonexistent/ui"',
     "tokens[0] ('ui'): cannot read token_file /nonexistent/ui: No such file or directory"),
    ('name = "ui"\nscopes = ["query"]\ntoken = "0123456789abcdef"\nscope = "x"',
     "tokens[0] ('ui'): unknown keys ['scope']"),
])
def test_a_bad_token_entry_stops_the_collector_naming_it(tmp_path: pathlib.Path, entry: str, message: str) -> None:
    path = _toml(tmp_path, f"[collector]\nport = 7071\n\n[[tokens]]\n{entry}\n")
    with pytest.raises(CollectorConfigError) as raised:
        load_config({}, env={}, config_file=path)
    assert str(raised.value).startswith(f"{path}: {message}")
    assert "\n" not in str(raised.value) and "0123456789" not in str(raised.value)


@pytest.mark.parametrize(("tokens", "legacy", "message"), [
    ([{"name": "ui", "scopes": ["query"], "token": READER}, {"name": "ui", "scopes": ["ingest"], "token": ADMIN}],
     {}, "tokens: name 'ui' is given twice"),
    ([{"name": "ingest", "scopes": ["ingest"], "token": ADMIN}], {"ingest_token": "s3cret"},
     "tokens: name 'ingest' is given twice (it is ingest_token's name)"),
    ([{"name": "ui", "scopes": ["query"], "token": READER}, {"name": "ops", "scopes": ["admin"], "token": READER}],
     {}, "tokens: 'ui' and 'ops' have the same token: give each name its own"),
    ([{"name": "ui", "scopes": ["query"], "token": READER}], {"ingest_token": READER},
     "tokens: 'ingest' and 'ui' have the same token"),
    ([], {"ingest_token": "same", "query_token": "same"}, "ingest_token and query_token must differ"),
])
def test_names_and_tokens_are_unique_across_entries(tokens: list, legacy: dict, message: str) -> None:
    with pytest.raises(CollectorConfigError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        CollectorConfig(data_dir="d", tokens=tokens, **legacy)


def test_tokens_from_the_config_file_a_tokens_file_and_token_files(tmp_path: pathlib.Path) -> None:
    (tmp_path / "ops").write_text(ADMIN + "\n")  # the newline an editor leaves is not part of the token
    tokens_file = _toml(tmp_path, f'[[tokens]]\nname = "ops"\nscopes = ["admin"]\ntoken_file = "{tmp_path / "ops"}"\n',
                        "tokens.toml")
    path = _toml(tmp_path, f'[collector]\ntokens_file = "{tokens_file}"\n\n[[tokens]]\n{GOOD}')
    cfg = load_config({}, env={"TRACEHOOK_COLLECTOR_QUERY_TOKEN": "q-s3cret"}, config_file=path)
    assert [(t.name, sorted(t.scopes)) for t in cfg.access.tokens] == [
        ("query", ["body", "query"]), ("ui", ["query"]), ("ops", ["admin"])]
    assert cfg.access.find(ADMIN).name == "ops" and cfg.access.find("0123456789abcdef").name == "ui"
    # [[collector.tokens]] works as well as a top-level [[tokens]]
    nested = _toml(tmp_path, f"[collector]\nport = 7071\n\n[[collector.tokens]]\n{GOOD}", "nested.toml")
    assert [t.name for t in load_config({}, env={}, config_file=nested).access.tokens] == ["ui"]
    # the tokens file from the environment, and an unreadable one named
    cfg = load_config({}, env={"TRACEHOOK_COLLECTOR_TOKENS_FILE": tokens_file})
    assert [t.name for t in cfg.access.tokens] == ["ops"]
    with pytest.raises(CollectorConfigError, match="^cannot read tokens_file /nonexistent.toml: No such file"):
        CollectorConfig(data_dir="d", tokens_file="/nonexistent.toml")
    with pytest.raises(CollectorConfigError, match=r"^tokens_file .*: unknown keys \['port'\]"):
        CollectorConfig(data_dir="d", tokens_file=_toml(tmp_path, "port = 1\n", "bad.toml"))


def test_a_bad_token_exits_2_with_one_line(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    for var in [v for v in os.environ if v.startswith("TRACEHOOK_COLLECTOR_")]:
        monkeypatch.delenv(var)
    monkeypatch.setattr(serve, "configure_logging", lambda *args: None)  # leave the test run's logging alone
    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    path = _toml(tmp_path, '[[tokens]]\nname = "ui"\nscopes = ["query"]\ntoken = "short"\n')
    assert serve.run(parser.parse_args(["--config", path, "--log-level", "WARNING"])) == 2
    assert capsys.readouterr().err == f"tracehook collector: {path}: tokens[0] ('ui'): token is shorter than 16 characters\n"


def test_token_values_never_show_in_repr(tmp_path: pathlib.Path) -> None:
    cfg = CollectorConfig(data_dir=str(tmp_path), ingest_token="legacy-ingest", query_token="legacy-query",
                          tokens=TOKENS)
    shown = repr(cfg) + repr(cfg.access) + repr(cfg.access.tokens[2]) + str(cfg)
    assert "reader" in shown  # names are shown
    for value in ("legacy-ingest", "legacy-query", OLD_INGEST, NEW_INGEST, READER, ADMIN):
        assert value not in shown


async def test_scopes_401_403_and_rotation(aiohttp_client, collector_config, caplog) -> None:
    cfg = dataclasses.replace(collector_config, tokens=TOKENS, otlp_token_header="X-Tracehook-Token")
    client = await aiohttp_client(create_app(cfg))
    caplog.set_level(logging.DEBUG)
    # rotation: the old and the new ingest token both work, each batch taken
    for seq, token in enumerate((OLD_INGEST, NEW_INGEST), 1):
        resp = await client.post("/v1/batches", data=make_batch("c1", seq), headers={**MSGPACK, **_auth(token)})
        assert resp.status == 200 and (await resp.json())["duplicate"] is False
    assert (await client.post("/v1/batches", data=make_batch("c1", 9), headers=MSGPACK)).status == 401
    unknown = await client.post("/v1/batches", data=make_batch("c1", 9), headers={**MSGPACK, **_auth("nope")})
    assert (unknown.status, (await unknown.json())["detail"]) == (401, "unknown token for ingest")
    for token in (READER, ADMIN):
        resp = await client.post("/v1/batches", data=make_batch("c1", 9), headers={**MSGPACK, **_auth(token)})
        assert (resp.status, (await resp.json())["detail"]) == (403, "this token is not allowed for ingest")
    # OTLP takes an ingest token in its header option too
    otlp = request(span("send orders", PRODUCER, {"messaging.system": "kafka", "messaging.destination.name": "t",
                                                 "messaging.message.id": "m1"})).SerializeToString()
    proto = {"Content-Type": "application/x-protobuf"}
    assert (await client.post("/v1/traces", data=otlp, headers={**proto, "X-Tracehook-Token": NEW_INGEST})).status == 200
    assert (await client.post("/v1/traces", data=otlp, headers={**proto, "X-Tracehook-Token": READER})).status == 403
    # queries: the query scope only
    assert (await client.get("/v1/console/config", headers=_auth(READER))).status == 200
    for token in (OLD_INGEST, ADMIN):
        assert (await client.get("/v1/console/config", headers=_auth(token))).status == 403
    assert (await client.get("/v1/console/config")).status == 401
    # the admin route: admin, or ingest as it always was
    for token, status in ((ADMIN, 200), (NEW_INGEST, 200), (READER, 403), ("nope", 401)):
        assert (await client.post("/v1/admin/roll", headers=_auth(token))).status == status
    for value in (OLD_INGEST, NEW_INGEST, READER, ADMIN):
        assert value not in caplog.text


async def test_a_scope_no_token_holds_stays_open(aiohttp_client, collector_config) -> None:
    cfg = dataclasses.replace(collector_config, tokens=[Token("reader", frozenset({"query"}), READER)])
    client = await aiohttp_client(create_app(cfg))
    assert (await client.post("/v1/batches", data=make_batch(), headers=MSGPACK)).status == 200
    assert (await client.post("/v1/admin/roll")).status == 200
    assert (await client.get("/v1/console/config")).status == 401

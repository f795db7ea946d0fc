"""No secrets out: credentials in an engine URL or a password file reach only the Authorization header.

Checked on the real path (config -> EngineSource -> runner -> store ->
rendered /metrics) against a real local HTTP server, for a good scrape and
for every failure that prints a URL (HTTP 401, connection refused, redirect,
timeout): the password appears in no label, source name, log line (caplog at
DEBUG), error message or exposition.
"""

from __future__ import annotations

import argparse
import base64
import logging
import socket
from pathlib import Path

import pytest

from exporter.collector import ExpositionCache
from exporter.config import add_serve_arguments, load_config
from exporter.engines.source import EngineSource
from exporter.engines.urls import host_port, safe_url, split_userinfo
from exporter.errors import UsageError
from exporter.runner import SourceRunner
from exporter.samples import SourceError
from exporter.store import SnapshotStore
from tests.engines.engine_helpers import fixture
from tests.support.fake_engine import FakeEngine, RawServer, redirect
from tests.support.ports import closed_port_url

VLLM = fixture("vllm-0.33-v1-2dp.prom").encode()
USER, PASSWORD = "scraper", "Pa55-w0rd-hunter2"


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_serve_arguments(p)
    return p.parse_args(["--gpu-source", "none", *argv])


def with_creds(url: str, password: str = PASSWORD) -> str:
    return url.replace("http://", f"http://{USER}:{password}@")


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def assert_clean(*texts: str) -> None:
    for text in texts:
        assert PASSWORD not in text, text[:300]
        assert f"{USER}:" not in text and f"{USER}@" not in text, text[:300]


def test_url_helpers_drop_userinfo() -> None:
    url = "http://u:p%40ss@[::1]:8000/metrics?x=1"
    assert safe_url(url) == "http://[::1]:8000/metrics?x=1"
    assert split_userinfo(url) == ("http://[::1]:8000/metrics?x=1", ("u", "p@ss"))
    assert host_port(url) == "[::1]:8000"
    assert split_userinfo("http://h/metrics") == ("http://h/metrics", None)


def test_credentials_in_the_url_become_basic_auth_and_nothing_else(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with FakeEngine(VLLM) as srv:
        cfg = load_config(_args("--engine", with_creds(srv.url)), environ={}).engines[0]
        source = EngineSource(cfg)
        store = SnapshotStore()
        runner = SourceRunner(source, store)
        runner.sample_once()
        assert store.states()[source.name].up
        assert srv.seen_headers[-1]["Authorization"] == basic(USER, PASSWORD)
        ok_render = ExpositionCache(store).render(False).decode() + ExpositionCache(store).render(True).decode()
        srv.status = 401  # the engine starts refusing the password
        runner.sample_once()
        refused = store.states()[source.name]
        source.close()
    host = srv.url.split("/")[2]
    assert cfg.name == host and source.name == f"engine:{host}"
    labels = " ".join(f"{k}={v}" for p in store.snapshot().points for k, v in p.labels.items())
    assert f"server={host}" in labels
    assert refused.last_error is not None and refused.last_error.reason == "http_status"
    assert_clean(
        cfg.name, source.name, labels, ok_render, caplog.text, str(refused.last_error), repr(source.__dict__.get("name"))
    )


def test_a_percent_encoded_password_is_decoded_for_the_header() -> None:
    with FakeEngine(VLLM) as srv:
        cfg = load_config(_args("--engine", with_creds(srv.url, "p%40ss%3Aword")), environ={}).engines[0]
        EngineSource(cfg).sample()
    assert srv.seen_headers[-1]["Authorization"] == basic(USER, "p@ss:word")


def _failure(source: EngineSource) -> SourceError:
    with pytest.raises(SourceError) as caught:
        source.sample()
    return caught.value


def test_failures_that_print_the_url_never_print_the_password(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    errors: list[SourceError] = []
    refused = load_config(_args("--engine", with_creds(closed_port_url())), environ={}).engines[0]
    errors.append(_failure(EngineSource(refused)))
    with RawServer(redirect(lambda srv: with_creds(srv.url.replace("/metrics", "/elsewhere")))) as srv:
        cfg = load_config(_args("--engine", with_creds(srv.url)), environ={}).engines[0]
        errors.append(_failure(EngineSource(cfg)))

    def hang(conn: socket.socket, srv: RawServer) -> None:
        srv.stopping.wait(5)

    with RawServer(hang) as srv:
        cfg = load_config(
            _args("--engine", with_creds(srv.url), "--engine-interval", "1", "--engine-timeout", "0.3"), environ={}
        ).engines[0]
        errors.append(_failure(EngineSource(cfg)))
    assert [e.reason for e in errors] == ["connection", "redirect", "timeout"]
    assert "/elsewhere" in errors[1].message
    assert_clean(caplog.text, *(str(e) for e in errors))


def test_basic_auth_password_file_is_reread_every_scrape(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    password_file = tmp_path / "password"
    password_file.write_text(PASSWORD + "\n")
    with FakeEngine(VLLM) as srv:
        config = tmp_path / "exporter.yaml"
        config.write_text(
            f"engines:\n  - url: '{srv.url}'\n    name: eng1\n"
            f"    basic_auth: {{username: {USER}, password_file: '{password_file}'}}\n"
        )
        cfg = load_config(_args("--config", str(config)), environ={}).engines[0]
        source = EngineSource(cfg)
        source.sample()
        assert srv.seen_headers[-1]["Authorization"] == basic(USER, PASSWORD)
        password_file.write_text("rotated-password")
        source.sample()
        assert srv.seen_headers[-1]["Authorization"] == basic(USER, "rotated-password")
        password_file.write_text("")
        empty = _failure(source)
        password_file.unlink()
        missing = _failure(source)
    assert (empty.reason, missing.reason) == ("malformed", "file_missing")
    assert_clean(caplog.text, str(empty), str(missing), repr(cfg))
    assert "rotated-password" not in caplog.text


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("basic_auth: {username: u}", "exactly username and password_file"),
        ("basic_auth: {username: u, password: inline-secret}", "exactly username and password_file"),
        ("basic_auth: {username: 'a:b', password_file: PW}", "cannot contain ':'"),
        ("basic_auth: {username: u, password_file: /nonexistent/pw}", "basic_auth.password_file"),
        ("basic_auth: {username: u, password_file: PW}\n    bearer_token_file: PW", "one kind of credentials"),
    ],
)
def test_bad_basic_auth_settings_are_one_line_errors(tmp_path: Path, entry: str, message: str) -> None:
    pw = tmp_path / "pw"
    pw.write_text("x")
    config = tmp_path / "exporter.yaml"
    config.write_text("engines:\n  - url: http://127.0.0.1:1/metrics\n    " + entry.replace("PW", str(pw)) + "\n")
    with pytest.raises(UsageError) as caught:
        load_config(_args("--config", str(config)), environ={})
    text = str(caught.value)
    assert message in text and "\n" not in text and "engines[0]: " in text
    assert "inline-secret" not in text


def test_url_credentials_and_basic_auth_together_are_refused(tmp_path: Path) -> None:
    pw = tmp_path / "pw"
    pw.write_text("x")
    config = tmp_path / "exporter.yaml"
    config.write_text(
        f"engines:\n  - url: 'http://u:{PASSWORD}@127.0.0.1:1/metrics'\n    basic_auth: {{username: u, password_file: '{pw}'}}\n"
    )
    with pytest.raises(UsageError) as caught:
        load_config(_args("--config", str(config)), environ={})
    assert "one kind of credentials" in str(caught.value) and PASSWORD not in str(caught.value)


def test_a_name_made_from_the_netloc_is_cleaned_even_when_built_by_hand() -> None:
    from exporter.engines.config import EngineConfig

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://{USER}:{PASSWORD}@127.0.0.1:{port}/metrics"
    source = EngineSource(EngineConfig(url=url, name=f"{USER}:{PASSWORD}@127.0.0.1:{port}"))
    assert source.name == f"engine:127.0.0.1:{port}"
    assert_clean(source.name, str(_failure(source)))

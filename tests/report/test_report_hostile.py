"""`report` and `diagnose` against a hostile or broken exporter, and with credentials that must not leak.

Real HTTP on 127.0.0.1 (tests/support/fake_engine.py's RawServer writes the bytes by
hand: wrong shapes, trickles, oversize bodies) and the real command lines (exporter.cli
main, in-process: a traceback would fail the test). What once went wrong: 24 wrong
shapes ended in a traceback, a 1 B/s answer ran past 90 s with --timeout 5, a 1 GB
/diagnosis took 1.9 GB RSS, and the basic-auth password in --exporter was printed in
error lines and written into report.md and report.html.
"""

from __future__ import annotations

import base64
import copy
import json
import math
import re
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from exporter.cli import main
from exporter.httpget import MAX_RESPONSE_BYTES
from exporter.report import Context, render_markdown, write_report
from tests.report.fake_exporter import FakeExporter, recorded_verdict
from tests.support.asgi import UvicornThread
from tests.support.fake_engine import RawServer, head_for, trickle, whole
from tests.support.ports import free_port

SECRET = "s3cret-Pa55"


def _json_server(body: bytes, status: str = "200 OK") -> RawServer:
    def handle(conn: socket.socket, srv: RawServer) -> None:
        head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        srv.send(conn, head.encode() + body)

    return RawServer(handle)


def _root(srv: RawServer) -> str:
    return f"http://127.0.0.1:{srv.port}"


def _with(path: str, value: Any) -> bytes:
    """The recorded verdict with ``value`` at the dotted ``path`` (``""``: the whole body)."""
    v: Any = recorded_verdict()
    if not path:
        return json.dumps(value).encode()
    node = v
    keys = path.split(".")
    for key in keys[:-1]:
        node = node[int(key)] if isinstance(node, list) else node[key]
    last = keys[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return json.dumps(v, allow_nan=True).encode()


WRONG_SHAPES: list[tuple[str, bytes]] = [
    ("layers is a list", _with("layers", [])),
    ("layers is a string", _with("layers", "x")),
    ("a layer is a list", _with("layers.memory", [])),
    ("a layer score is text", _with("layers.memory.score", "high")),
    ("a layer headroom is NaN", _with("layers.memory.headroom", math.nan)),
    ("a layer score is 1e999", _with("layers.memory.score", "@INF@").replace(b'"@INF@"', b"1e999")),
    ("primary is a string", _with("primary", "x")),
    ("primary is a list", _with("primary", [])),
    ("primary layer is a number", _with("primary.layer", 5)),
    ("primary score is an object", _with("primary.score", {})),
    ("primary confidence is text", _with("primary.confidence", "0.9")),
    ("primary evidence is a list", _with("primary.evidence", [])),
    ("an evidence value is a list", _with("primary.evidence", {"k": [1]})),
    ("an evidence value is -Infinity", _with("primary.evidence", {"k": -math.inf})),
    ("primary explains is a string", _with("primary.explains", "ttft_high")),
    ("primary advice is a number", _with("primary.advice", 5)),
    ("bottlenecks is an object", _with("bottlenecks", {})),
    ("a bottleneck is a number", _with("bottlenecks", [5])),
    ("a bottleneck score is true", _with("bottlenecks.0.score", True)),
    ("timestamp is 1e300", _with("timestamp", 1e300)),
    ("timestamp is negative", _with("timestamp", -1)),
    ("timestamp is text", _with("timestamp", "now")),
    ("state is a number", _with("state", 5)),
    ("symptoms is an object", _with("symptoms", {})),
    ("a symptom id is null", _with("symptoms", [{"id": None}])),
    ("notices is a string", _with("notices", "none")),
    ("a notice is a number", _with("notices", [5])),
    ("holding is an object", _with("holding", {"a": 1})),
    ("schema_version is true", _with("schema_version", True)),
    ("contributing is a string", _with("contributing", "x")),
    ("signals is a list", _with("signals", [])),
    ("a score of 5000 digits", _with("primary.score", "@BIG@").replace(b'"@BIG@"', b"9" * 5000)),
    ("nested 100000 deep", b'{"layers": {}, "bottlenecks": [], "signals": ' + b"[" * 100000 + b"]" * 100000 + b"}"),
    ("the body is a list", _with("", [])),
    ("the body is not JSON", b"<html>hello</html>"),
    ("the body is not UTF-8", b'{"layers": "\xff\xfe"}'),
]


@pytest.mark.parametrize("command", ["diagnose", "report"])
@pytest.mark.parametrize("label, body", WRONG_SHAPES, ids=[label for label, _ in WRONG_SHAPES])
def test_a_verdict_of_the_wrong_shape_is_one_line_and_exit_1(
    command: str, label: str, body: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert len(WRONG_SHAPES) >= 24
    out = tmp_path / "snap"
    with _json_server(body) as srv:
        argv = [command, "--exporter", _root(srv), "--timeout", "5"]
        if command == "report":
            argv += ["--out", str(out), "--sample-seconds", "0"]
        rc = main(argv)
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert rc == 1, (label, captured.err)
    assert len(lines) == 1 and lines[0].startswith(f"llm-layer-exporter {command}: "), captured.err
    assert "/diagnosis" in lines[0] and "Traceback" not in captured.err
    assert not out.exists() or not any(out.iterdir()), "nothing is written when the verdict is refused"


def test_the_shape_error_names_the_field(capsys: pytest.CaptureFixture[str]) -> None:
    for body, needle in [
        (_with("layers", []), "layers: expected an object, got a list"),
        (_with("primary", "x"), "primary: expected an object, got a string"),
        (_with("timestamp", 1e300), "timestamp: expected seconds since 1970"),
        (_with("layers.memory.headroom", math.nan), "NaN is not JSON"),
    ]:
        with _json_server(body) as srv:
            assert main(["diagnose", "--exporter", _root(srv)]) == 1
        assert needle in capsys.readouterr().err


def _head_trickle(gap: float) -> Any:
    """The response head itself one byte per ``gap`` seconds: a per-read timeout never fires."""

    def handle(conn: socket.socket, srv: RawServer) -> None:
        for i, byte in enumerate(head_for("content-length", 10)):
            srv.send(conn, bytes([byte]))
            if i > 500 or srv.stopping.wait(gap):
                return

    return handle


@pytest.mark.parametrize("where", ["body", "head"])
def test_a_trickling_answer_ends_at_the_timeout(where: str, capsys: pytest.CaptureFixture[str]) -> None:
    body = json.dumps(recorded_verdict()).encode()
    handler = trickle("content-length", body, 0.2) if where == "body" else _head_trickle(0.2)
    with RawServer(handler) as srv:
        started = time.monotonic()
        rc = main(["diagnose", "--exporter", _root(srv), "--timeout", "2"])
        elapsed = time.monotonic() - started
    err = capsys.readouterr().err
    assert rc == 1 and "sent no complete answer within 2 s" in err, err
    # the request ended at its deadline, not when the body did (at 5 B/s it would take ~20 min);
    # the bound is loose for a loaded 2-core machine, the point is that it ends
    assert elapsed < 2 + 8, elapsed
    assert srv.sent < len(body) // 10


def test_an_answer_over_the_byte_cap_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    def declared(conn: socket.socket, srv: RawServer) -> None:
        srv.send(conn, head_for("content-length", 10**9) + b"{" * 1000)

    with RawServer(declared) as srv:
        assert main(["diagnose", "--exporter", _root(srv)]) == 1
    assert f"sent an answer over {MAX_RESPONSE_BYTES} bytes (1000000000 declared)" in capsys.readouterr().err

    big = b" " * (4 * MAX_RESPONSE_BYTES)
    with RawServer(whole("chunked", big, step=256 * 1024)) as srv:
        assert main(["diagnose", "--exporter", _root(srv)]) == 1
        sent = srv.sent
    assert f"sent an answer over {MAX_RESPONSE_BYTES} bytes" in capsys.readouterr().err
    assert sent < len(big) // 2  # the client stopped reading: the server could not send all of it
    assert sent > MAX_RESPONSE_BYTES // 2


def _auth_of(srv: RawServer) -> str:
    head = srv.requests[-1].decode("latin-1")
    return next((line.split(":", 1)[1].strip() for line in head.split("\r\n") if line.lower().startswith("authorization:")), "")


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_credentials_from_a_file_the_environment_or_the_url_go_in_a_header(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pw = tmp_path / "pw"
    pw.write_text(SECRET + "\n")
    token = tmp_path / "token"
    token.write_text("tok-123\n")
    body = json.dumps(recorded_verdict()).encode()
    with _json_server(body) as srv:
        root = _root(srv)
        assert main(["diagnose", "--exporter", root, "--exporter-username", "prom", "--exporter-password-file", str(pw)]) == 0
        assert _auth_of(srv) == _basic("prom", SECRET)
        assert main(["diagnose", "--exporter", root, "--exporter-bearer-token-file", str(token)]) == 0
        assert _auth_of(srv) == "Bearer tok-123"
        assert main(["diagnose", "--exporter", f"http://prom:{SECRET}@127.0.0.1:{srv.port}"]) == 0
        assert _auth_of(srv) == _basic("prom", SECRET)
        assert b"@" not in srv.requests[-1].split(b"\r\n")[0], "user info never goes into the request line"
        monkeypatch.setenv("LLM_EXPORTER_EXPORTER_USERNAME", "env-user")
        monkeypatch.setenv("LLM_EXPORTER_EXPORTER_PASSWORD", SECRET)
        assert main(["diagnose", "--exporter", root]) == 0
        assert _auth_of(srv) == _basic("env-user", SECRET)
        monkeypatch.delenv("LLM_EXPORTER_EXPORTER_PASSWORD")
        monkeypatch.setenv("LLM_EXPORTER_EXPORTER_BEARER_TOKEN", "tok-env")
        monkeypatch.delenv("LLM_EXPORTER_EXPORTER_USERNAME")
        assert main(["diagnose", "--exporter", root]) == 0
        assert _auth_of(srv) == "Bearer tok-env"
    assert SECRET not in capsys.readouterr().out
    # two kinds at once, or a file that cannot be read: one line, exit 2, no secret
    rc = main(["diagnose", "--exporter", f"http://prom:{SECRET}@127.0.0.1:1", "--exporter-bearer-token-file", str(token)])
    assert rc == 2
    rc2 = main(["diagnose", "--exporter", "http://127.0.0.1:1", "--exporter-password-file", str(tmp_path / "nope")])
    assert rc2 == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 2 and SECRET not in err


def test_an_unreachable_exporter_or_prometheus_prints_no_password(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dead = free_port()
    assert main(["diagnose", "--exporter", f"http://prom:{SECRET}@127.0.0.1:{dead}"]) == 1
    assert main(["report", "--exporter", f"http://prom:{SECRET}@127.0.0.1:{dead}", "--out", str(tmp_path / "a")]) == 1
    with _json_server(json.dumps(recorded_verdict()).encode()) as srv:
        rc = main(
            [
                "report",
                "--exporter",
                f"http://prom:{SECRET}@127.0.0.1:{srv.port}",
                "--prometheus",
                f"http://admin:{SECRET}@127.0.0.1:{dead}",
                "--out",
                str(tmp_path / "b"),
            ]
        )
        assert rc == 1
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 3 and all(f"127.0.0.1:{dead}" in line for line in lines), lines
    assert SECRET not in captured.err + captured.out and "prom:" not in captured.err


def test_report_files_never_hold_the_url_password(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeExporter(recorded_verdict())
    out = tmp_path / "snap"
    with UvicornThread(fake.app()) as server:
        url = f"http://prom:{SECRET}@127.0.0.1:{server.port}"
        assert main(["report", "--exporter", url, "--out", str(out), "--sample-seconds", "0"]) == 0
    captured = capsys.readouterr()
    for name in ("report.md", "report.html", "diagnosis.json"):
        text = (out / name).read_text(encoding="utf-8")
        assert SECRET not in text and "prom:" not in text, name
        assert f"127.0.0.1:{server.port}" in text or name == "diagnosis.json"
    assert SECRET not in captured.out + captured.err


def test_report_md_escapes_the_verdicts_markdown() -> None:
    v = recorded_verdict()
    hostile = "**bold** [click](http://evil.example) <img src=x onerror=alert(1)> | cell _em_ `code` &amp;"
    v["primary"]["advice"] = hostile + "\n# heading\n- item\n1. first\n    indented"
    v["primary"]["cause"] = "x](http://evil.example)"
    v["notices"] = ["<script>alert(1)</script>", "a | b"]
    v["layers"]["memory"]["limit"] = "97 % | ![img](http://evil.example/i.png)"
    md = render_markdown(v, Context(exporter_url="http://127.0.0.1:9750"))
    for raw in ("[click](http", "<img", "<script>", "**bold**", "_em_", "`code`", "&amp;", "![img]", "](http://evil"):
        assert not re.search(r"(?<!\\)" + re.escape(raw), md), raw  # only escaped: \<img, \*\*bold
    assert "\\*\\*bold\\*\\* \\[click\\](http://evil.example) \\<img" in md
    assert "97 % \\| !\\[img\\]" in md  # a pipe cannot open a new table cell
    lines = md.splitlines()
    assert "\\# heading" in lines and "\\- item" in lines and "1\\. first" in lines and "indented" in lines


def test_non_finite_numbers_are_written_as_null(tmp_path: Path) -> None:
    from exporter.ramp.report import write_json

    v = copy.deepcopy(recorded_verdict())
    v["signals"] = {"a": math.nan, "b": [math.inf, 1.0]}
    write_report(tmp_path, v, Context(exporter_url="http://127.0.0.1:9750"))
    written = json.loads((tmp_path / "diagnosis.json").read_text(), parse_constant=lambda c: pytest.fail(c))
    assert written["signals"] == {"a": None, "b": [None, 1.0]}
    path = write_json(tmp_path, {"steps": [{"ttft": -math.inf}], "knee": math.nan})
    assert json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(c)) == {"steps": [{"ttft": None}], "knee": None}


def test_nulls_where_an_engine_reported_non_finite_values_are_shown_not_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The exporter writes NaN/Inf as null (scores, headroom, evidence): a valid verdict, shown as n/a."""
    v = recorded_verdict()
    v["primary"]["score"] = None
    v["primary"]["confidence"] = None
    v["primary"]["evidence"] = {**v["primary"]["evidence"], "llm_kv_cache_usage_ratio": None}
    v["bottlenecks"][0]["score"] = None
    v["layers"]["memory"].update(score=None, headroom=None)
    with _json_server(json.dumps(v).encode()) as srv:
        assert main(["diagnose", "--exporter", _root(srv)]) == 0
        assert main(["diagnose", "--exporter", _root(srv), "--format", "json"]) == 0
    out = capsys.readouterr().out
    assert "confidence n/a  score n/a" in out
    md = render_markdown(v, Context(exporter_url="http://127.0.0.1:9750"))
    assert "score n/a" in md and "not measured" in md

"""``serve`` start-up failures: an address it cannot listen on is one line and exit status 4, before anything starts."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from exporter.commands import serve
from tests.support.ports import free_port
from tests.support.processes import Child, exporter_argv

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}


def _serve(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "exporter", "serve", "--gpu-source", "none", "--log-level", "info", *args],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_port_in_use_is_one_line_and_exit_4_before_serving() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = _serve("--listen-address", f"127.0.0.1:{port}")
    assert out.returncode == serve.EXIT_CANNOT_LISTEN == 4, out
    lines = (out.stdout + out.stderr).strip().splitlines()
    assert lines == [f"llm-layer-exporter serve: cannot listen on 127.0.0.1:{port}: address already in use"], lines
    assert "serving" not in out.stdout + out.stderr


def test_address_not_on_this_host_is_exit_4() -> None:
    out = _serve("--listen-address", f"192.0.2.1:{free_port()}")  # TEST-NET-1: never a local address
    assert out.returncode == 4, out
    assert (
        out.stderr.strip().splitlines() == [out.stderr.strip()]
        and "cannot listen on 192.0.2.1:" in out.stderr
        and "serving" not in out.stderr
    )


def test_bad_config_is_still_exit_2() -> None:
    out = _serve("--listen-address", "nowhere")
    assert out.returncode == 2 and "listen" in out.stderr and len(out.stderr.strip().splitlines()) == 1, out


def test_help_documents_the_exit_statuses() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "exporter", "serve", "--help"], env=ENV, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0
    assert "exit status:" in out.stdout and "4    cannot listen on --listen-address" in out.stdout
    assert "2    a bad flag" in out.stdout


def test_bind_listen_socket_names_the_reason() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        try:
            serve.bind_listen_socket("127.0.0.1", port, f"127.0.0.1:{port}")
        except serve.CannotListen as err:
            assert str(err) == f"cannot listen on 127.0.0.1:{port}: address already in use"
        else:  # pragma: no cover
            raise AssertionError("bound a port that is in use")
    sock = serve.bind_listen_socket("127.0.0.1", 0, "127.0.0.1:0")
    try:
        assert sock.getsockname()[1] > 0
    finally:
        sock.close()


def test_accepted_connections_have_nagle_off() -> None:
    """asyncio sets TCP_NODELAY on an accepted socket only when the listener says TCP; without it a
    keep-alive scrape's response waited ~40 ms for the client's delayed ACK (exporter/commands/serve.py)."""
    import asyncio

    async def accept_one() -> int:
        sock = serve.bind_listen_socket("127.0.0.1", 0, "127.0.0.1:0")
        nodelay: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                accepted = transport.get_extra_info("socket")
                nodelay.set_result(accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        server = await asyncio.get_running_loop().create_server(Probe, sock=sock)
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
            value = await asyncio.wait_for(nodelay, 10)
            writer.close()
            return value
        finally:
            server.close()
            await server.wait_closed()

    assert asyncio.run(accept_one()) != 0


def test_serve_on_a_free_port_answers_and_ends_by_sigterm() -> None:
    port = free_port()
    argv = exporter_argv("serve", "--gpu-source", "none", "--log-level", "info", "--listen-address", f"127.0.0.1:{port}")
    with Child(argv, "serve", env=ENV) as proc:
        proc.wait_http(f"http://127.0.0.1:{port}/metrics", 60)
        code = proc.stop(grace_s=30)  # TERM; KILL (and a wrong status) only if it ignores TERM for 30 s
    output = proc.output()
    assert code == -signal.SIGTERM, output  # uvicorn shuts down, then re-raises the signal
    assert f"serving on 127.0.0.1:{port}" in output

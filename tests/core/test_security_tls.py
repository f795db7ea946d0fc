"""TLS settings from the web config change real handshakes, or stop start-up with one line.

Every server here is a real uvicorn on 127.0.0.1 and every client a real `ssl`
handshake; "refused" means the client got no HTTP answer.
"""

from __future__ import annotations

import socket
import ssl
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from exporter.server import create_app
from exporter.store import SnapshotStore
from exporter.webconfig import WebConfig, load_web_config
from tests.support.asgi import UvicornThread
from tests.support.ports import free_port
from tests.support.processes import Child
from tests.tls import self_signed_cert


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A server pair, a client pair (its own CA) and a foreign client pair nobody trusts."""
    paths: dict[str, Path] = {}
    for who in ("server", "client", "foreign"):
        d = tmp_path_factory.mktemp(who)
        paths[f"{who}_cert"], paths[f"{who}_key"] = self_signed_cert(d)
    return paths


def _web_config(tmp_path: Path, pki: dict[str, Path], extra: str = "") -> WebConfig:
    f = tmp_path / "web.yml"
    f.write_text(f"tls_server_config:\n  cert_file: {pki['server_cert']}\n  key_file: {pki['server_key']}\n{extra}")
    return load_web_config(str(f))


def _client(
    pki: dict[str, Path],
    *,
    min_v: ssl.TLSVersion | None = None,
    max_v: ssl.TLSVersion | None = None,
    ciphers: str | None = None,
    cert: str | None = None,
) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki["server_cert"]))
    if min_v:
        ctx.minimum_version = min_v
    if max_v:
        ctx.maximum_version = max_v
    if ciphers:
        ctx.set_ciphers(ciphers)
    if cert:
        ctx.load_cert_chain(str(pki[f"{cert}_cert"]), str(pki[f"{cert}_key"]))
    return ctx


def _get(port: int, ctx: ssl.SSLContext) -> tuple[str, str, bytes] | None:
    """(TLS version, cipher, status line) of GET /healthz, or None when the server refused us.

    With TLS 1.3 a rejected client certificate surfaces after the client's handshake,
    on the first read, so "refused" is judged by whether an HTTP answer arrives.
    """
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                data = tls.recv(4096)
                negotiated = tls.cipher()
                assert negotiated is not None  # the handshake is done
                version, cipher = tls.version() or "", negotiated[0]
    except (TimeoutError, ssl.SSLError, ConnectionError):
        return None
    if not data:
        return None
    return version, cipher, data.split(b"\r\n", 1)[0]


def _serve(cfg: WebConfig) -> UvicornThread:
    assert cfg.tls is not None
    return UvicornThread(create_app(SnapshotStore(), web_config=cfg), **cfg.tls.uvicorn_kwargs())


def test_min_version_tls13_refuses_a_tls12_handshake(tmp_path: Path, pki: dict[str, Path]) -> None:
    with _serve(_web_config(tmp_path, pki, "  min_version: TLS13\n")) as srv:
        assert _get(srv.port, _client(pki, max_v=ssl.TLSVersion.TLSv1_2)) is None
        ok = _get(srv.port, _client(pki))
    assert ok is not None and ok[0] == "TLSv1.3" and ok[2] == b"HTTP/1.1 200 OK"


def test_default_accepts_tls12(tmp_path: Path, pki: dict[str, Path]) -> None:
    """The control for the test above: the same TLS 1.2 client is served without min_version."""
    with _serve(_web_config(tmp_path, pki)) as srv:
        ok = _get(srv.port, _client(pki, max_v=ssl.TLSVersion.TLSv1_2))
    assert ok is not None and ok[0] == "TLSv1.2"


def test_max_version_tls12_refuses_a_tls13_only_client(tmp_path: Path, pki: dict[str, Path]) -> None:
    with _serve(_web_config(tmp_path, pki, "  max_version: TLS12\n")) as srv:
        assert _get(srv.port, _client(pki, min_v=ssl.TLSVersion.TLSv1_3)) is None
        ok = _get(srv.port, _client(pki))
    assert ok is not None and ok[0] == "TLSv1.2"


def test_cipher_suites_restrict_tls12(tmp_path: Path, pki: dict[str, Path]) -> None:
    tls12 = ssl.TLSVersion.TLSv1_2
    with _serve(_web_config(tmp_path, pki, "  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384]\n")) as srv:
        assert _get(srv.port, _client(pki, max_v=tls12, ciphers="ECDHE-ECDSA-AES128-GCM-SHA256")) is None
        ok = _get(srv.port, _client(pki, max_v=tls12, ciphers="ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-AES128-GCM-SHA256"))
    assert ok is not None and ok[1] == "ECDHE-ECDSA-AES256-GCM-SHA384"
    with _serve(_web_config(tmp_path, pki)) as srv:  # control: the refused suite works by default
        assert _get(srv.port, _client(pki, max_v=tls12, ciphers="ECDHE-ECDSA-AES128-GCM-SHA256")) is not None


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_require_and_verify_client_cert(tmp_path: Path, pki: dict[str, Path], version: ssl.TLSVersion) -> None:
    extra = f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki['client_cert']}\n"
    with _serve(_web_config(tmp_path, pki, extra)) as srv:
        assert _get(srv.port, _client(pki, min_v=version, max_v=version)) is None
        assert _get(srv.port, _client(pki, min_v=version, max_v=version, cert="foreign")) is None
        ok = _get(srv.port, _client(pki, min_v=version, max_v=version, cert="client"))
    assert ok is not None and ok[2] == b"HTTP/1.1 200 OK"


def test_verify_client_cert_if_given(tmp_path: Path, pki: dict[str, Path]) -> None:
    extra = f"  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: {pki['client_cert']}\n"
    with _serve(_web_config(tmp_path, pki, extra)) as srv:
        assert _get(srv.port, _client(pki)) is not None
        assert _get(srv.port, _client(pki, cert="client")) is not None
        assert _get(srv.port, _client(pki, cert="foreign")) is None


def _write_bad_keys(tmp_path: Path, pki: dict[str, Path]) -> dict[str, Path]:
    key = serialization.load_pem_private_key(pki["server_key"].read_bytes(), password=None)
    encrypted = tmp_path / "encrypted.pem"
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(b"pw")
        )
    )
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    return {"encrypted": encrypted, "junk": junk}


@pytest.mark.parametrize(
    "tls_lines, needle",
    [
        ("min_version: TLS10", "min_version: TLS10 is refused"),
        ("min_version: TLS11", "min_version: TLS11 is refused"),
        ("min_version: TLS14", "min_version: expected TLS12 or TLS13"),
        ("max_version: TLS11", "max_version: TLS11 is refused"),
        ("min_version: TLS13\n  max_version: TLS12", "max_version: TLS12 is below min_version TLS13"),
        ("min_version: 1.3", "min_version: expected a string"),
        ("client_auth_type: RequestClientCert\n  client_ca_file: {client_cert}", "RequestClientCert is refused"),
        ("client_auth_type: RequireAnyClientCert\n  client_ca_file: {client_cert}", "RequireAnyClientCert is refused"),
        ("client_auth_type: Sometimes", "client_auth_type: expected one of"),
        ("client_auth_type: RequireAndVerifyClientCert", "client_ca_file: required"),
        ("client_ca_file: {client_cert}", "client_auth_type is NoClientCert"),
        (
            "client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: {junk}",
            "client_ca_file: " + "{junk} holds no PEM certificate",
        ),
        (
            "client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: /nope.pem",
            "client_ca_file: file '/nope.pem' does not exist",
        ),
        ("cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]", "unknown or insecure suite"),
        ("cipher_suites: [TLS_AES_128_GCM_SHA256]", "TLS 1.3 suites are fixed"),
        ("cipher_suites: TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "expected a list"),
        ("min_version: TLS13\n  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384]", "would be ignored"),
        ("curve_preferences: [X25519]", "unsupported key(s) curve_preferences"),
        ("client_allowed_sans: [a]", "unsupported key(s) client_allowed_sans"),
    ],
)
def test_settings_that_cannot_be_honoured_are_refused(tmp_path: Path, pki: dict[str, Path], tls_lines: str, needle: str) -> None:
    names = {k: str(v) for k, v in {**pki, **_write_bad_keys(tmp_path, pki)}.items()}
    with pytest.raises(ValueError) as err:
        _web_config(tmp_path, pki, "  " + tls_lines.format(**names) + "\n")
    message = str(err.value)
    assert needle.format(**names) in message and "\n" not in message


@pytest.mark.parametrize(
    "cert, key, needle",
    [
        ("server_cert", "server_cert", "key_file: {server_cert} holds no PEM private key (it is a certificate"),
        ("server_key", "server_key", "cert_file: {server_key} holds no PEM certificate"),
        ("server_cert", "client_key", "key_file: {client_key} does not load with cert_file"),
        ("server_cert", "encrypted", "key_file: {encrypted} is encrypted"),
        ("junk", "server_key", "cert_file: {junk} holds no PEM certificate"),
    ],
)
def test_tls_files_are_loaded_at_start_up(tmp_path: Path, pki: dict[str, Path], cert: str, key: str, needle: str) -> None:
    names = {k: str(v) for k, v in {**pki, **_write_bad_keys(tmp_path, pki)}.items()}
    f = tmp_path / "web.yml"
    f.write_text(f"tls_server_config:\n  cert_file: {names[cert]}\n  key_file: {names[key]}\n")
    with pytest.raises(ValueError) as err:
        load_web_config(str(f))
    message = str(err.value)
    assert needle.format(**names) in message and "\n" not in message


def test_serve_honours_min_version_end_to_end(tmp_path: Path, pki: dict[str, Path]) -> None:
    """The real CLI wires the web config's context into uvicorn: no TLS 1.2 handshake gets through."""
    web = tmp_path / "web.yml"
    web.write_text(
        f"tls_server_config:\n  cert_file: {pki['server_cert']}\n  key_file: {pki['server_key']}\n  min_version: TLS13\n"
    )
    port = free_port()
    script = Path(sys.executable).with_name("llm-layer-exporter")
    cli = [str(script)] if script.exists() else [sys.executable, "-m", "exporter"]
    argv = [
        *cli,
        "serve",
        "--gpu-source",
        "none",
        "--listen-address",
        f"127.0.0.1:{port}",
        "--web-config-file",
        str(web),
        "--log-level",
        "error",
    ]
    with Child(argv, "serve-tls13").start() as proc:
        proc.wait_ready(lambda: _get(port, _client(pki)) is not None, 60, "a TLS 1.3 handshake")
        ok = _get(port, _client(pki))
        refused = _get(port, _client(pki, max_v=ssl.TLSVersion.TLSv1_2))
    assert ok is not None and ok[0] == "TLSv1.3" and ok[2] == b"HTTP/1.1 200 OK"
    assert refused is None

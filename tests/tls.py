"""Certificates for 127.0.0.1 made in the test, for tests that serve or scrape over real TLS.

``self_signed_cert`` is one certificate that is its own CA; ``make_ca`` + ``issue`` make a
CA and leaves signed by it, so a test can rotate the CA a client trusts (exporter/tlsclient.py).
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _builder(subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey) -> x509.CertificateBuilder:
    """A certificate for ``key`` valid from five minutes ago for a day (clock skew between processes)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )


def _write(cert: x509.Certificate, key: ec.EllipticCurvePrivateKey, cert_path: Path, key_path: Path) -> tuple[Path, Path]:
    """PEM files: the certificate, and its key unencrypted (PKCS#8)."""
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def self_signed_cert(directory: Path) -> tuple[Path, Path]:
    """Write cert.pem and key.pem (a CA-capable cert valid for 127.0.0.1) and return their paths."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    cert = (
        _builder(name, name, key)
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return _write(cert, key, directory / "cert.pem", directory / "key.pem")


@dataclass(frozen=True)
class CA:
    """A test certificate authority: its PEM file (what a client trusts) and what signs with it."""

    cert_path: Path
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey


def make_ca(directory: Path, name: str = "test-ca") -> CA:
    """Write ``<name>.pem``, a self-signed CA certificate, and return the CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        _builder(subject, subject, key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    path = directory / f"{name}.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return CA(path, cert, key)


def issue(ca: CA, directory: Path, name: str, *, client: bool = False) -> tuple[Path, Path]:
    """Write ``<name>.crt`` and ``<name>.key``: a leaf for 127.0.0.1 signed by ``ca`` (server, or client)."""
    key = ec.generate_private_key(ec.SECP256R1())
    usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
    cert = (
        _builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]), ca.cert.subject, key)
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
            critical=False,
        )
        .sign(ca.key, hashes.SHA256())
    )
    return _write(cert, key, directory / f"{name}.crt", directory / f"{name}.key")


def server_context(cert: Path, key: Path, client_ca: Path | None = None) -> ssl.SSLContext:
    """A server context serving ``cert``; ``client_ca`` set: a client certificate from it is required.

    Rotate the server's certificate with ``context.load_cert_chain(new_cert, new_key)``:
    every handshake after it presents the new one (the listening socket keeps its context)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    if client_ca is not None:
        context.load_verify_locations(cafile=client_ca)
        context.verify_mode = ssl.CERT_REQUIRED
    return context

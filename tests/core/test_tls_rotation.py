"""One TLS client context (exporter/tlsclient.py): a rotated CA bundle or client certificate is used at once.

Against real TLS servers on 127.0.0.1 with certificates made here: each path (the
engine scrape, the canary probe, the Kubernetes pod list) first scrapes a server
whose certificate the trusted CA signed; then the server switches to a certificate
from a new CA, and the next attempt fails (so the client really checks, and the old
trust is what it still has); then the CA file is rewritten with the new CA, and the
very next attempt succeeds, in the same process, on the same object.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
from pathlib import Path

import pytest

from exporter.engines.config import EngineConfig
from exporter.engines.fetch import Request, get
from exporter.engines.source import EngineSource
from exporter.kubernetes.pods import PodLister
from exporter.probe.config import ProbeConfig
from exporter.probe.source import ProbeSource
from exporter.samples import Sample, SampleResult, SourceError
from exporter.store import SnapshotStore
from exporter.tlsclient import ClientTLS, TLSFiles
from tests.engines.engine_helpers import fixture
from tests.probe.probe_http import Behaviour, ProbeHTTPServer
from tests.support.fake_engine import FakeEngine
from tests.support.k8s import NODE, pods_json
from tests.tls import CA, issue, make_ca, server_context

VLLM = fixture("vllm-0.33-v1-2dp.prom").encode()


class Rotation:
    """Two CAs, a server certificate from each, and the CA file the client trusts (the old CA at first)."""

    def __init__(self, directory: Path) -> None:
        self.old: CA = make_ca(directory, "old-ca")
        self.new: CA = make_ca(directory, "new-ca")
        self.old_leaf = issue(self.old, directory, "server-old")
        self.new_leaf = issue(self.new, directory, "server-new")
        self.bundle = directory / "ca-bundle.pem"
        shutil.copyfile(self.old.cert_path, self.bundle)
        self.server = server_context(*self.old_leaf)

    def rotate_server(self) -> None:
        """The server presents the new CA's certificate from its next handshake on."""
        self.server.load_cert_chain(*self.new_leaf)

    def rotate_bundle(self) -> None:
        """The CA file now holds the new CA, written in place as a ConfigMap update or cert-manager does."""
        tmp = self.bundle.with_suffix(".tmp")
        shutil.copyfile(self.new.cert_path, tmp)
        os.replace(tmp, self.bundle)


def test_engine_scrape_trusts_the_rotated_ca_bundle_at_the_next_scrape(tmp_path: Path) -> None:
    r = Rotation(tmp_path)
    with FakeEngine(VLLM, tls=r.server) as srv:
        source = EngineSource(EngineConfig(url=srv.url, name="eng1", timeout=2.0, interval=5.0, ca_bundle=str(r.bundle)))
        assert source.sample().points
        r.rotate_server()
        with pytest.raises(SourceError) as caught:
            source.sample()
        assert caught.value.reason == "connection" and "TLS failed" in caught.value.message
        r.rotate_bundle()
        assert source.sample().points


def _last_result(result: SampleResult) -> str:
    (ok,) = [p.labels["result"] for p in result.points if p.name == "llm_probe_last_result" and isinstance(p, Sample) and p.value]
    return ok


def test_probe_trusts_the_rotated_ca_bundle_at_the_next_probe(tmp_path: Path) -> None:
    r = Rotation(tmp_path)
    with ProbeHTTPServer(Behaviour(prompt_ms=3.0), tls=r.server) as server:
        engine = EngineConfig(
            url=server.url + "/metrics",
            name="fake",
            interval=0.1,
            timeout=0.09,
            ca_bundle=str(r.bundle),
            probe=ProbeConfig(interval=1.0, timeout=2.0),
        )
        src = ProbeSource(engine, SnapshotStore())
        assert _last_result(src.sample()) == "ok"
        r.rotate_server()
        assert _last_result(src.sample()) == "refused"
        assert src.last is not None and "TLS failed" in src.last.detail
        r.rotate_bundle()
        assert _last_result(src.sample()) == "ok"
    assert len(server.completions()) == 2  # the refused probe never reached the engine


def test_kubernetes_pod_list_trusts_the_rotated_ca_file_at_the_next_list(tmp_path: Path) -> None:
    r = Rotation(tmp_path)
    with FakeEngine(json.dumps(pods_json()), tls=r.server) as srv:
        lister = PodLister(srv.url + "/pods", NODE, token_file=str(tmp_path / "no-token"), ca_file=str(r.bundle))
        pods, _ = lister.list()
        assert pods
        r.rotate_server()
        with pytest.raises(SourceError) as caught:
            lister.list()
        assert caught.value.reason == "connection" and "TLS failed" in caught.value.message
        r.rotate_bundle()
        assert lister.list()[0] == pods


# --------------------------------------------------------------------------- the helper itself


def test_the_context_is_rebuilt_only_when_a_file_changed_even_with_its_old_mtime(tmp_path: Path) -> None:
    r = Rotation(tmp_path)
    tls = ClientTLS(TLSFiles(ca_file=str(r.bundle)))
    first = tls.context()
    assert tls.context() is first and tls.builds == 1  # unchanged: the same context, nothing rebuilt
    assert first.minimum_version == ssl.TLSVersion.TLSv1_2 and first.verify_mode == ssl.CERT_REQUIRED
    before = r.bundle.stat()
    r.rotate_bundle()
    os.utime(r.bundle, ns=(before.st_atime_ns, before.st_mtime_ns))  # a rotation inside one timestamp tick
    second = tls.context()
    assert second is not first and tls.builds == 2
    assert tls.context() is second


def test_a_rotated_client_certificate_is_presented_at_the_next_connection(tmp_path: Path) -> None:
    r = Rotation(tmp_path)
    clients_old, clients_new = make_ca(tmp_path, "clients-old"), make_ca(tmp_path, "clients-new")
    cert, key = tmp_path / "client.crt", tmp_path / "client.key"
    for src, dst in zip(issue(clients_old, tmp_path, "client-old", client=True), (cert, key), strict=True):
        shutil.copyfile(src, dst)
    server = server_context(*r.old_leaf, client_ca=clients_new.cert_path)  # trusts only the new client CA
    tls = ClientTLS(TLSFiles(ca_file=str(r.bundle), cert_file=str(cert), key_file=str(key)))
    with FakeEngine(VLLM, tls=server) as srv:
        with pytest.raises(SourceError) as caught:
            get(Request(srv.url, timeout=2.0, max_body_bytes=1 << 20, tls=tls.context()))
        assert caught.value.reason == "connection"
        for src, dst in zip(issue(clients_new, tmp_path, "client-new", client=True), (cert, key), strict=True):
            shutil.copyfile(src, dst)
        answer = get(Request(srv.url, timeout=2.0, max_body_bytes=1 << 20, tls=tls.context()))
    assert answer.status == 200 and bytes(answer.body) == VLLM
    assert srv.seen_headers  # the second connection, and only it, got a request through


def test_a_missing_or_broken_ca_file_is_one_line_naming_the_setting_and_heals(tmp_path: Path) -> None:
    r = Rotation(tmp_path)
    tls = ClientTLS(TLSFiles(ca_file=str(r.bundle)))
    good = r.bundle.read_bytes()
    r.bundle.unlink()
    with pytest.raises(SourceError) as missing:
        tls.context()
    r.bundle.write_text("not a certificate\n")
    with pytest.raises(SourceError) as broken:
        tls.context()
    assert missing.value.reason == "file_missing" and f"ca_bundle {r.bundle}" in missing.value.message
    assert broken.value.reason == "malformed" and "not a PEM certificate bundle" in broken.value.message
    assert "\n" not in missing.value.message + broken.value.message
    r.bundle.write_bytes(good)
    assert tls.context().verify_mode == ssl.CERT_REQUIRED


def test_verification_off_checks_neither_name_nor_chain(tmp_path: Path) -> None:
    r = Rotation(tmp_path)
    context = ClientTLS(TLSFiles(verify=False)).context()
    assert (context.check_hostname, context.verify_mode) == (False, ssl.CERT_NONE)
    with FakeEngine(VLLM, tls=r.server) as srv:
        assert get(Request(srv.url, timeout=2.0, max_body_bytes=1 << 20, tls=context)).status == 200

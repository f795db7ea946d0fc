"""What the rotation check of the TLS client context costs per connection (exporter/tlsclient.py).

Why it matters: ``ClientTLS.context()`` runs before every scrape, probe and pod
list, and reads and hashes the CA bundle (and client certificate and key) each
time, so that a rotated file is trusted at the next connection. This prints that
per-call cost for a one-certificate bundle and for the system bundle (the
largest a ``ca_bundle`` usually is): unchanged and settled (one stat() per file),
just written (read and hashed, the racy rule), and building a context anew (what
a check that always rebuilt would pay).

    python -m bench.tls_client_context
"""

from __future__ import annotations

import argparse
import json
import ssl
import tempfile
import time
from pathlib import Path

from bench.normalize_cost import median_seconds
from exporter.tlsclient import RACY_S, ClientTLS, TLSFiles
from tests.tls import make_ca

#: where Debian keeps the system trust store as one PEM file
SYSTEM_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


def measure(bundle: Path, repeat: int) -> dict[str, float]:
    """Per-call seconds of ``context()`` on an unchanged ``bundle``: while it is recent (hashed), then settled (stat)."""
    tls = ClientTLS(TLSFiles(ca_file=str(bundle)))
    tls.context()
    changed = max(bundle.stat().st_mtime, bundle.stat().st_ctime)
    recent = median_seconds(tls.context, repeat) if time.time() - changed < RACY_S else None
    time.sleep(max(0.0, changed + RACY_S + 0.2 - time.time()))
    settled = median_seconds(tls.context, repeat)
    rebuild = median_seconds(lambda: ssl.create_default_context(cafile=str(bundle)), max(3, repeat // 100))
    figures = {"bundle_kib": bundle.stat().st_size / 1024, "settled_us": settled * 1e6, "rebuild_us": rebuild * 1e6}
    if recent is not None:
        figures["recent_us"] = recent * 1e6
    figures["builds"] = float(tls.builds)
    return figures


def run(repeat: int = 2000) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        out["one certificate"] = measure(make_ca(Path(tmp)).cert_path, repeat)
    if SYSTEM_BUNDLE.exists():
        out["system bundle"] = measure(SYSTEM_BUNDLE, repeat)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=2000)
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    a = p.parse_args(argv)
    figures = run(a.repeat)
    if a.json:
        print(json.dumps(figures, indent=2))
        return 0
    for name, f in figures.items():
        recent = f", {f['recent_us']:.1f} us while changed < {RACY_S:g} s ago (hashed)" if "recent_us" in f else ""
        print(
            f"{name} ({f['bundle_kib']:.1f} KiB): {f['settled_us']:.1f} us per context() unchanged (stat){recent}; "
            f"{f['rebuild_us']:.0f} us to build a context anew (contexts built: {f['builds']:.0f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

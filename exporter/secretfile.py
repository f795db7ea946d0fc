"""Read a token or password file for one request, and remember it so it is scrubbed from messages.

Why read per request: a rotated Kubernetes secret or a renewed token takes effect
without a restart. Why remember it: every error message a source writes passes
through its scrubber (``exporter/engines/urls.py``), which must know the secrets
the source holds now; the URL's own pair plus the latest file contents suffice.
"""

from __future__ import annotations

from pathlib import Path

from exporter.samples import SourceError

#: secrets kept for scrubbing per source: the URL's pair and the latest file contents
KEPT_SECRETS = 4


def read_secret_file(path: str | None, what: str, known: list[str]) -> str | None:
    """The stripped contents of ``path`` (None when no path); added to ``known``; never logged.

    ``what`` names the setting in error messages. A ``...bearer_token_file`` must be
    printable ASCII (it becomes an HTTP header). Raises ``SourceError``
    (``file_missing`` or ``malformed``) with a message that holds no secret.
    """
    if not path:
        return None
    try:
        secret = Path(path).read_text(encoding="utf-8").strip()
    except OSError as err:
        raise SourceError("file_missing", f"cannot read {what} {path}: {err.strerror}") from None
    except UnicodeDecodeError:
        raise SourceError("malformed", f"{what} {path} is not UTF-8 text") from None
    if not secret:
        raise SourceError("malformed", f"{what} {path} is empty")
    if what.endswith("bearer_token_file") and not all(33 <= ord(c) <= 126 for c in secret):
        raise SourceError("malformed", f"{what} {path} holds characters not allowed in an HTTP header")
    if len(secret) >= 3 and secret not in known:
        known.append(secret)
        del known[:-KEPT_SECRETS]
    return secret

"""Check the target before the first step: reachable, serving the model, accepting a request.

Why before the ramp rather than discovering it in step 1: a wrong URL or a
model name the server rejects would otherwise show up as "step 1: 100 %
errors" after a full step's wait; here it is one clear line within seconds,
with the server's own error message.
"""

from __future__ import annotations

from typing import Any

import httpx

from exporter.ramp.model import RampError


def target_base(url: str) -> str:
    """The server root: a trailing /v1 (or /v1/...) is dropped, a scheme added when missing."""
    url = url.rstrip("/")
    if "://" not in url:
        url = "http://" + url
    cut = url.find("/v1")
    if cut != -1 and (len(url) == cut + 3 or url[cut + 3] == "/"):
        url = url[:cut]
    return url


def _server_message(resp: httpx.Response) -> str:
    """The error text an OpenAI-compatible server put in its body (or the body itself, shortened)."""
    try:
        body: Any = resp.json()
    except ValueError:
        return resp.text.strip()[:200]
    if isinstance(body, dict):
        err = body.get("error", body.get("detail", body.get("message")))
        if isinstance(err, dict):
            err = err.get("message", err)
        if err is not None:
            return str(err)[:300]
    return str(body)[:200]


def served_models(base: str, timeout: float = 5.0) -> list[str]:
    """Model ids from /v1/models; RampError when the server cannot be reached at all."""
    try:
        resp = httpx.get(base + "/v1/models", timeout=timeout)
    except httpx.HTTPError as err:
        raise RampError(f"target {base} is unreachable: {err.__class__.__name__}: {err}") from None
    if resp.status_code != 200:
        return []  # some servers do not list models; the probe request decides
    try:
        data = resp.json().get("data", [])
        return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]
    except (ValueError, AttributeError, TypeError):
        return []


def check_target(base: str, model: str | None, timeout: float = 30.0) -> str:
    """Return the model to use; RampError when the target is down or rejects the model."""
    models = served_models(base, timeout=min(timeout, 5.0))
    if model is None:
        if not models:
            raise RampError(f"target {base} lists no model on /v1/models: pass --model NAME")
        model = models[0]
    payload = {"model": model, "prompt": "ping", "max_tokens": 1, "stream": False}
    try:
        resp = httpx.post(base + "/v1/completions", json=payload, timeout=timeout)
    except httpx.HTTPError as err:
        raise RampError(f"target {base} is unreachable: {err.__class__.__name__}: {err}") from None
    if resp.status_code in (400, 404, 422):
        served = f" (served: {', '.join(models)})" if models else ""
        raise RampError(f"target {base} rejected model {model!r}: HTTP {resp.status_code}: {_server_message(resp)}{served}")
    if resp.status_code >= 400:
        raise RampError(f"target {base} failed a one-token test request: HTTP {resp.status_code}: {_server_message(resp)}")
    return model

"""Start and stop an engine's own profiler over HTTP, and find the traces it wrote.

Why the engine's routes: vLLM and SGLang carry torch.profiler behind
``POST /start_profile`` and ``POST /stop_profile``; the engine knows its worker
processes and ranks, the exporter does not. vLLM serves the routes only when it
was started with a profiler (``--profiler-config '{"profiler": "torch",
"torch_profiler_dir": DIR}'``, or ``VLLM_TORCH_PROFILER_DIR=DIR`` on releases
before 0.11) and writes the traces into that DIR; SGLang always serves them and
writes into the ``output_dir`` the start request names (here: ``--profile-dir``),
else ``SGLANG_TORCH_PROFILER_DIR``. TGI, llama.cpp and trtllm-serve have no such
route: asking them is a clear 4xx before anything is sent.

Why the scrape's credentials: the routes sit behind the same proxy or token as
/metrics, so the bearer token, basic auth and TLS settings of the engine's
``engines:`` entry are used (exporter/engines/source.py builds them), re-read on
every call. Every answer is read under ``MAX_ANSWER_BYTES``.

Why the probe's exchange: each call is held to one deadline from connect to
the answer's last byte (calls.py says why), which ``http.client``'s per-read
timeout could not do; exporter/probe/client.py already does exactly that for a
POST, TLS included.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from exporter.engines.llamacpp_slots import base_of
from exporter.engines.urls import safe_url
from exporter.probe.client import ProbeFailure, exchange
from exporter.profile.calls import CallDeadline, Shutdown
from exporter.samples import SourceError

if TYPE_CHECKING:
    from exporter.engines.config import EngineConfig

#: families whose server has start/stop profile routes: (start path, stop path)
PROFILER_ROUTES: dict[str, tuple[str, str]] = {
    "vllm": ("/start_profile", "/stop_profile"),
    "sglang": ("/start_profile", "/stop_profile"),
}
#: families known to have no profiler route, with what to use instead
NO_PROFILER: dict[str, str] = {
    "tgi": "TGI has no profiler route (profile it with nsys or torch.profiler around the launcher)",
    "llamacpp": "llama.cpp's server has no profiler route (build with GGML profiling or run nsys)",
    "trtllm": "trtllm-serve has no profiler route (use nsys with TLLM_PROFILE_START_STOP)",
}
#: bytes read of any answer to a profiler route (they answer an empty body or a line)
MAX_ANSWER_BYTES = 64 * 1024
#: seconds /start_profile may take (vLLM starts the profiler on every worker first)
START_TIMEOUT_S = 30.0


class ProfilerError(Exception):
    """The profiler could not be driven; ``status`` is the HTTP status the exporter answers with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Answer:
    status: int
    body: str


def hint_for(family: str) -> str:
    """How to start ``family`` so its profiler routes answer and write where the exporter reads."""
    if family == "vllm":
        return (
            'start vLLM with --profiler-config \'{"profiler": "torch", "torch_profiler_dir": "DIR"}\' '
            "(VLLM_TORCH_PROFILER_DIR=DIR before 0.11), DIR being the exporter's --profile-dir"
        )
    return "SGLang writes into the output_dir the exporter sends (its --profile-dir); check the engine's log"


class EngineProfiler:
    """The profiler routes of one configured engine."""

    def __init__(self, cfg: EngineConfig, family: str, shutdown: Shutdown | None = None) -> None:
        from exporter.engines.source import EngineSource

        if family not in PROFILER_ROUTES:
            raise ProfilerError(422, f"engine {cfg.name!r} is {family}: {NO_PROFILER.get(family, 'no profiler route known')}")
        self.cfg = cfg
        self.family = family
        #: begun: every call ends within its grace (calls.py)
        self.shutdown = shutdown or Shutdown()
        # the scrape's own credentials and TLS settings, built (and re-read) the way the scrape does
        self._scraper = EngineSource(cfg)
        self.base = base_of(self._scraper._url)  # no userinfo: that travels as a header

    def start(self, output_dir: str, timeout: float | None = None) -> None:
        """Ask the engine to start profiling (SGLang: into ``output_dir``); the whole call within ``timeout``
        (default ``START_TIMEOUT_S``)."""
        body = None
        if self.family == "sglang":
            body = json.dumps({"output_dir": output_dir, "activities": ["CPU", "GPU"]}).encode()
        self._call(PROFILER_ROUTES[self.family][0], body, START_TIMEOUT_S if timeout is None else timeout)

    def stop(self, timeout: float) -> None:
        """Ask the engine to stop and write its traces (this can take a while on a GPU: ``timeout``, the whole call)."""
        self._call(PROFILER_ROUTES[self.family][1], None, timeout)

    def _call(self, path: str, body: bytes | None, timeout: float) -> Answer:
        url = self.base + path
        shown = safe_url(url)
        try:
            answer = self._post(url, body, CallDeadline(timeout, self.shutdown))
        except SourceError as err:  # credentials or TLS files
            raise ProfilerError(502, f"{shown}: {err.message}") from None
        except ProbeFailure as err:
            if self.shutdown.begun:
                raise ProfilerError(503, f"{shown}: cut short, the exporter is shutting down") from None
            if err.result == "timeout":
                raise ProfilerError(502, f"{shown}: no complete answer within the {timeout:g} s deadline") from None
            said = "the engine did not answer" if err.result == "refused" else "a broken answer"
            raise ProfilerError(502, f"{shown}: {said} ({_detail(err, shown)})") from None
        if answer.status == 404:
            raise ProfilerError(422, f"{shown}: HTTP 404, the engine serves no profiler route: {hint_for(self.family)}")
        if answer.status in (401, 403):
            raise ProfilerError(502, f"{shown}: HTTP {answer.status} (check the engine's bearer_token_file / basic_auth)")
        if not 200 <= answer.status < 300:
            said = " ".join(answer.body.split())[:200]
            raise ProfilerError(502, f"{shown}: HTTP {answer.status}" + (f": {said}" if said else ""))
        return answer

    def _post(self, url: str, body: bytes | None, deadline: CallDeadline) -> Answer:
        tls = self._scraper._tls_context() if urlsplit(url).scheme == "https" else None
        headers = dict(self._scraper._headers())
        headers["Accept"] = "application/json, text/plain;q=0.5, */*;q=0.1"
        headers["Content-Type"] = "application/json"
        with exchange("POST", url, headers, body or b"", deadline, tls) as response:
            data = response.body(MAX_ANSWER_BYTES)
            return Answer(response.status, data.decode("utf-8", errors="replace"))


def _detail(err: ProbeFailure, shown: str) -> str:
    """The exchange's reason without the URL it already put in front (ours comes first)."""
    detail = err.detail.removeprefix(f"{shown}: ")
    return detail[:200]

"""Asynchronous OpenAI-compatible load generator (used by the demo, the simulator tests and ``ramp``).

API::

    from exporter.loadgen import LoadSpec, run_load
    result = asyncio.run(run_load(LoadSpec(base_url="http://127.0.0.1:8000", concurrency=16, duration_s=30)))
    result.summary.output_tokens_per_s, result.summary.ttft_p95_s, result.records[0].itl_s

``run_load(spec, stop=event, on_record=callback)`` ends at ``spec.duration_s``,
after ``spec.max_requests``, or when ``stop`` is set; requests in flight then
are cancelled and recorded as ``cancelled``. With ``spec.drain=True`` the
duration only stops new requests: those in flight finish (each bounded by
``spec.timeout_s``, no retry after the deadline) and nothing is cancelled
unless ``stop`` is set. Streaming requests measure TTFT and inter-chunk
latency on the client; a request that exceeds ``spec.timeout_s`` closes its
connection and may be retried (``spec.retries``), as are 429, 5xx and
connection errors.

Prompts never repeat from one run to the next: each run salts the unique part
of its prompts (``spec.prompt_salt``, random unless set); only the shared
prefixes (``spec.shared_prefix_ratio``) are meant to be reused, across runs too.
"""

from exporter.loadgen.runner import run_load
from exporter.loadgen.spec import LoadResult, LoadSpec, LoadSummary, RequestRecord
from exporter.loadgen.summary import percentile, summarize

__all__ = ["LoadResult", "LoadSpec", "LoadSummary", "RequestRecord", "percentile", "run_load", "summarize"]

"""A simulated LLM inference server with bottleneck scenarios (``llm-layer-exporter simulate``).

Layout: :mod:`.settings` (knobs), :mod:`.scenarios` (the named bottlenecks),
:mod:`.scheduler` + :mod:`.kvcache` (continuous batching over a paged KV cache),
:mod:`.roofline` + :mod:`.calibration` + :mod:`.gpu` (GPU time and telemetry
calibrated on the H200 traces), :mod:`.engine` (the stepping scheduler thread),
:mod:`.dialects` (each engine's /metrics), :mod:`.instance` (one simulated
server), :mod:`.api` (HTTP), :mod:`.server` (running it); the command is
exporter/commands/simulate.py.
"""

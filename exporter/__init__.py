"""llm-layer-exporter: find which layer of an LLM inference service is the bottleneck."""

__version__ = "0.1.0"

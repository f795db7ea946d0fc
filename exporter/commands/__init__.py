"""Command modules of the `llm-layer-exporter` CLI (see exporter/cli.py)."""

"""Grafana dashboards generated from exporter/schema.py and alerts/ (see generate.py)."""

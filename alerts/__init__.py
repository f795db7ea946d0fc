"""Prometheus recording and alerting rules, Alertmanager config and runbooks (generated; see generate.py)."""

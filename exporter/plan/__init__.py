"""`llm-layer-exporter plan`: replicas for peak and trough from a Prometheus' history and the measured capacity at SLO.

One job per module: durations.py (flag parsing), prometheus.py (the bounded range
query), queries.py (the PromQL), profiles.py (capacity from tune.json / ramp
report.json), demand.py (the series on one grid, hours, spans), compute.py (the
arithmetic), render.py and chart.py (plan.md/.html/.json and plan.png). The
decisions are written down in docs/plan.md.
"""

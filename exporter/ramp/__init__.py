"""`llm-layer-exporter ramp`: raise concurrency step by step, find the knee and the layer that gave out.

Why a package of small modules: the knee logic (``knee``), the per-step
aggregation of exporter samples (``aggregate``), the HTTP probing of the exporter
(``probe``), the report writers (``report``, ``plot``) and the step driver
(``driver``) are each testable alone; only ``cli`` wires them together.
"""

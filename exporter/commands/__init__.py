"""Command modules of the `llm-layer-exporter` CLI, one per command (dispatched by exporter/cli.py).

Runtime: ``serve``, ``diagnose``, ``schema``. Tools (the ``tools`` extra, checked by
``tools.py``): ``simulate``, ``demo``, ``ramp``, ``report``. Each module holds the
argparse wiring and ``run``; the implementation is imported when the command runs.
"""

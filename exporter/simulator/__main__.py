"""``python -m exporter.simulator``: the ``simulate`` command without the rest of the CLI."""

from exporter.simulator.cli import main

raise SystemExit(main())

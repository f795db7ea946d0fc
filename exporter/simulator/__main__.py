"""``python -m exporter.simulator``: the ``simulate`` command without the rest of the CLI."""

from exporter.commands.simulate import main

raise SystemExit(main())

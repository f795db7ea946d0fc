"""One module per dashboard; each exposes build(settings) -> grafana.Dashboard."""

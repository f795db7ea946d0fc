"""`llm-layer-exporter serve`: wire config -> sources -> runners -> HTTP server.

Start-up order matters: every bad setting is found before a thread starts
(exit status 2, one line), runners start before the server so /readyz turns
ready after the first sample, and shutdown stops runners after the server.
"""

from __future__ import annotations

import argparse
import logging
import sys

from exporter.cli import UsageError
from exporter.config import Config, add_serve_arguments, load_config

log = logging.getLogger("exporter")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_serve_arguments(parser)


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def build_sources(config: Config, store):  # type: ignore[no-untyped-def]
    """Every source this config asks for, plus the derived ones; and contributed routers."""
    from exporter.diagnosis import build_diagnosis
    from exporter.gpu import build_gpu_source

    try:  # first: a bad `diagnosis:` section must stop start-up before any GPU probe
        bundle = build_diagnosis(config, store)
    except ValueError as err:
        raise UsageError(str(err)) from None
    sources = []
    gpu = build_gpu_source(config.gpu_source, config.gpu_interval, config.gpu_timeout)
    if gpu is not None:
        sources.append(gpu)
    if config.engines:
        from exporter.engines.source import EngineSource

        sources.extend(EngineSource(e) for e in config.engines)
    if any(e.pid or e.process for e in config.engines):
        from exporter.process import build_process_sources

        sources.extend(build_process_sources(config))
    sources.extend(bundle.sources)
    return sources, [bundle.router]


def run(args: argparse.Namespace) -> int:
    config = load_config(args)
    setup_logging(config.log_level)
    web_config = None
    if config.web_config_file:
        from exporter.webconfig import load_web_config

        try:
            web_config = load_web_config(config.web_config_file)
        except ValueError as err:
            raise UsageError(f"--web-config-file: {err}") from None

    import uvicorn

    from exporter.runner import RunnerGroup
    from exporter.server import create_app
    from exporter.store import SnapshotStore

    store = SnapshotStore()
    sources, routers = build_sources(config, store)
    group = RunnerGroup(store)
    for source in sources:
        group.add(source)
    app = create_app(store, routers, web_config)
    # the context was built (files loaded, versions and ciphers set) when the web config was read
    uv_kwargs = web_config.tls.uvicorn_kwargs() if web_config and web_config.tls else {}
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=config.host,
            port=config.port,
            log_level="warning",
            access_log=False,
            lifespan="off",
            **uv_kwargs,
        )
    )
    log.info(
        "serving on %s (gpu source %s, %d engine(s), %d source(s))",
        config.listen_address,
        config.gpu_source,
        len(config.engines),
        len(sources),
    )
    group.start()
    try:
        server.run()
    finally:
        group.stop()
        auth = getattr(app.state, "auth", None)
        if auth is not None:
            auth.close()
    return 0 if server.started else 1

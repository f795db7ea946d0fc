"""`llm-layer-exporter serve`: wire config -> sources -> runners -> HTTP server.

Start-up order matters: every bad setting is found before a thread starts
(exit status 2, one line); then the listening socket is bound, so an address
that cannot be used (in use, not on this host, a privileged port) is one line
and exit status 4, before any "serving" line and before a runner starts;
runners start before the server so /readyz turns ready after the first sample,
and shutdown stops runners after the server.

Exit statuses (also in ``serve --help``): 1 the HTTP server did not start, 2 a
bad flag, environment variable or config value, 4 cannot listen on
--listen-address; on SIGTERM or Ctrl-C the server shuts down and the process
ends by that signal (143 / 130 in a shell).
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys
from typing import TYPE_CHECKING

from exporter.config import Config, add_serve_arguments, load_config
from exporter.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import FrameType

    import uvicorn
    from fastapi import APIRouter

    from exporter.commands.registry import Build, Listener
    from exporter.runner import BringsItsLoop
    from exporter.sources import Source
    from exporter.store import SnapshotStore
    from exporter.tlscontext import UvicornTLS

log = logging.getLogger("exporter")

#: ``serve`` could not bind --listen-address (in use, not an address of this host, permission denied)
EXIT_CANNOT_LISTEN = 4
EPILOG = """exit status:
  1    the HTTP server did not start
  2    a bad flag, environment variable or config value (one line on stderr)
  4    cannot listen on --listen-address: address in use, not available or
       permission denied (one line on stderr, before anything starts)
  143  SIGTERM, 130 Ctrl-C: the server shut down, the process ends by the signal"""


class CannotListen(Exception):
    """The listening socket could not be bound; the message is the one line to print."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from exporter.commands import registry

    add_serve_arguments(parser, sections=(registry.CONFIG_SECTION,))  # `sources:` and --source.NAME
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def bind_listen_socket(host: str, port: int, listen_address: str) -> socket.socket:
    """Bind the server's socket now (the way uvicorn would, exporter/listen.py), so a bad address
    fails before anything starts."""
    from exporter.listen import bind_tcp

    try:
        return bind_tcp(host, port, listen_address)
    except OSError as err:
        raise CannotListen(str(err)) from None


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def build_sources(config: Config, store: SnapshotStore) -> tuple[list[Source | BringsItsLoop], list[APIRouter]]:
    """Every source that is switched on and asked for, then the derived ones; and contributed routers.

    The table, its order and the switches are exporter/commands/registry.py's; a source that is
    off is never constructed.
    """
    built = build_serving(config, store)
    return [*built.sources, *built.derived], built.routers


def build_serving(config: Config, store: SnapshotStore) -> Build:
    """What ``build_sources`` returns, plus the servers the sources bring (``Build.listeners``)."""
    from exporter.commands import registry

    off = [name for name in registry.SOURCES if not registry.enabled(config, name)]
    if off:
        log.info("sources switched off: %s", ", ".join(off))
    return registry.build(config, store)


def _log_family_filter(config: Config) -> None:
    """What --metrics.include / --metrics.exclude leave out, and a warning per pattern that misses
    or would remove a health family (exporter/familyfilter.py): said once, at start-up."""
    families = config.metrics
    for line in families.warnings():
        log.warning("%s", line)
    if families.active:
        left_out = families.excluded()
        log.info(
            "metric families left out of /metrics: %d of the schema (llm_exporter_metric_family_excluded names them)",
            len(left_out),
        )


def _on_exit_signal(server: uvicorn.Server, action: Callable[[], None]) -> None:
    """Run ``action`` when SIGTERM/SIGINT reaches ``server``, before its graceful shutdown.

    Why: uvicorn waits for every request in flight before ``run`` returns, and a
    ``POST /profile`` is one (exporter/profile/run.py): told at the signal, it ends
    within its grace instead of holding the exit for its seconds and a 120 s stop.
    """
    handle_exit = server.handle_exit

    def handle(sig: int, frame: FrameType | None) -> None:
        action()
        handle_exit(sig, frame)

    server.handle_exit = handle  # type: ignore[method-assign]  # uvicorn installs self.handle_exit per run


def run(args: argparse.Namespace) -> int:
    config = load_config(args)
    setup_logging(config.log_level)
    _log_family_filter(config)
    from exporter.memtrim import pin_mmap_threshold

    pin_mmap_threshold()  # before any scrape: large bodies get mappings of their own (exporter/memtrim.py)
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
    built = build_serving(config, store)
    sources, routers = [*built.sources, *built.derived], built.routers
    # the on-demand profile (exporter/profile, docs/profile.md): its routes always (off: a 404 that says
    # so), its publishing source only with --enable-profile
    from exporter.profile import build_profile

    profile = build_profile(config.profile, config.engines, store)
    sources, routers = [*sources, *profile.sources], [*routers, profile.router]
    # bound here, handed to uvicorn below: an unusable address is one line and exit 4 before any
    # runner starts and before the "serving on" line (uvicorn would log it and exit 3 much later)
    try:
        sock = bind_listen_socket(config.host, config.port, config.listen_address)
    except CannotListen as err:
        print(f"llm-layer-exporter serve: {err}", file=sys.stderr, flush=True)
        return EXIT_CANNOT_LISTEN
    # the servers sources bring (the OTLP receiver): the same rule, after the main socket
    started: list[Listener] = []
    for listener in built.listeners:
        try:
            listener.start()
        except OSError as err:
            for other in started:
                other.stop()
            sock.close()
            print(f"llm-layer-exporter serve: {err}", file=sys.stderr, flush=True)
            return EXIT_CANNOT_LISTEN
        started.append(listener)
    group = RunnerGroup(store)
    for source in sources:
        group.add(source)
    app = create_app(store, routers, web_config, families=config.metrics)
    # the context was built (files loaded, versions and ciphers set) when the web config was read
    uv_kwargs: UvicornTLS = web_config.tls.uvicorn_kwargs() if web_config and web_config.tls else {}
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
    if profile.profiler is not None:
        _on_exit_signal(server, profile.profiler.begin_shutdown)
    bound = sock.getsockname()
    log.info(
        "serving on %s (gpu source %s, %d engine(s), %d source(s))",
        config.listen_address if config.port else f"{config.host}:{bound[1]}",
        config.gpu_source,
        len(config.engines),
        len(sources),
    )
    group.start()
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        for listener in started:  # no span is taken once the sources stop
            listener.stop()
        group.stop()
        auth = getattr(app.state, "auth", None)
        if auth is not None:
            auth.close()
    return 0 if server.started else 1

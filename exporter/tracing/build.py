"""What ``serve`` wires in for request tracing (``--otlp-grpc-listen-address``, ``--otlp-http-listen-address``).

One bundle: the receiver (started by ``serve`` once its main socket is bound, so an address in
use is one line and exit 4 like the main one; stopped first at shutdown), the ``tracing``
source that publishes its series, ``GET /requests``, and the history step the diagnosis stage
runs after each verdict (exporter/tracing/history.py). The receiver takes TLS and basic auth
from the same ``--web-config-file`` as the exporter's other endpoints.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from fastapi import APIRouter

from exporter.basicauth import BasicAuthVerifier
from exporter.diagnosis.verdict import Verdict
from exporter.engines.config import EngineConfig
from exporter.tracing.api import build_router
from exporter.tracing.forward import SpanForwarder
from exporter.tracing.history import HistoryStep, VerdictHistory
from exporter.tracing.log import RequestLog, TracingSource
from exporter.tracing.normalize import SpanNormalizer, TraceRouting
from exporter.tracing.receiver import TraceReceiver
from exporter.webconfig import WebConfig

#: seconds between two publications of the tracing series (and flushes of held SGLang spans)
PUBLISH_INTERVAL_S = 5.0


@dataclass
class TracingBundle:
    receiver: TraceReceiver
    source: TracingSource
    router: APIRouter
    history_step: HistoryStep
    log: RequestLog
    verifier: BasicAuthVerifier | None = None

    def start(self) -> None:
        """Bind and serve the receiver; OSError naming the address when it cannot."""
        self.receiver.start()
        if self.log.forwarder is not None:
            self.log.forwarder.start()

    def stop(self, grace: float = 2.0) -> None:
        self.receiver.stop(grace)
        if self.log.forwarder is not None:  # after the receiver: nothing more is offered
            self.log.forwarder.stop(grace)
        if self.verifier is not None:
            self.verifier.close()


def build_tracing(
    grpc_address: str | None,
    http_address: str | None,
    engines: Sequence[EngineConfig],
    latest: Callable[[], Mapping[str, Verdict]],
    web_config: WebConfig | None,
    cycle_s: float,
    forward_url: str | None = None,
) -> TracingBundle:
    """The bundle; ``latest`` is the diagnosis's verdicts by engine (``NodeDiagnosis.latest.engines``),
    ``cycle_s`` its interval (a request is read one cycle past its end)."""
    routing = TraceRouting.from_engines([(e.name, e.type, e.trace_service) for e in engines])
    history = VerdictHistory()
    forwarder = SpanForwarder(forward_url) if forward_url else None
    log = RequestLog(SpanNormalizer(routing), history, slack_s=cycle_s, forwarder=forwarder)
    users = web_config.basic_auth_users if web_config else {}
    verifier = BasicAuthVerifier(users) if users else None
    receiver = TraceReceiver(
        log.consume,
        grpc_address=grpc_address,
        http_address=http_address,
        tls=web_config.tls if web_config else None,
        basic_auth=verifier,
    )
    return TracingBundle(
        receiver=receiver,
        source=TracingSource(log, lambda: list(receiver.points()), PUBLISH_INTERVAL_S),
        router=build_router(log, receiving=True),
        history_step=HistoryStep(history, latest),
        log=log,
        verifier=verifier,
    )

"""Request tracing: "why was THIS request slow?" (docs/tracing.md).

The engines say per request where its time went, in OpenTelemetry spans; this package
receives them and joins each request with what every layer was doing while it lived.

| module | job |
|---|---|
| ``record`` | ``RequestRecord``: one finished request in one shape for every engine |
| ``receiver`` | the OTLP/gRPC and OTLP/HTTP trace receiver of ``serve``, bounded |
| ``normalize`` | vLLM, SGLang, TGI and TensorRT-LLM spans -> ``RequestRecord`` |
| ``reservoir`` | the bounded per-engine keep: the slowest of each recent window and a uniform sample |
| ``join`` | a record + the verdict history over its life -> layers, primary cause, sentence |
"""

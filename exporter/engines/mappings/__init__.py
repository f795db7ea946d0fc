"""The registry of engine mapping tables: one module per engine family.

To support a new engine, write ``mappings/<family>.py`` with a ``MAPPING`` built
from the vocabulary in ``exporter/engines/table.py`` and add it below; detection,
the wanted-name set of the parser and ``coverage()`` follow from the table.
"""

from __future__ import annotations

from exporter.engines.mappings import llamacpp, sglang, tgi, trtllm, vllm
from exporter.engines.table import EngineMapping

#: family -> table, in detection tie-break order
MAPPINGS: dict[str, EngineMapping] = {
    m.family: m for m in (vllm.MAPPING, sglang.MAPPING, tgi.MAPPING, trtllm.MAPPING, llamacpp.MAPPING)
}

FAMILIES: tuple[str, ...] = tuple(MAPPINGS)

"""Fake DCGM bindings (tests only): the ``dcgm_structs`` names DcgmSource uses.

Status codes are DCGM's real values (dcgm_structs.h); DCGMError carries
``.value`` like the real class.
"""

DCGM_OPERATION_MODE_AUTO = 1
DCGM_ST_NOT_SUPPORTED = -6
DCGM_ST_CONNECTION_NOT_VALID = -21
DCGM_ST_REQUIRES_ROOT = -29
DCGM_ST_PROFILING_NOT_SUPPORTED = -36


class DCGMError(Exception):
    """Base of DCGM's errors; ``value`` is the DCGM_ST_* status."""

    def __init__(self, value: int) -> None:
        super().__init__(f"DCGM error {value}")
        self.value = value

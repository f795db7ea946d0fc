"""Fake DCGM bindings (tests only): DcgmSource imports this module but keys fields by number."""

DCGM_FT_DOUBLE = "d"
DCGM_FT_INT64 = "i"
DCGM_FT_STRING = "s"

"""Errors every layer may raise and the CLI turns into an exit status.

Why a module of its own: config parsing, the source registry and the command
modules all raise ``UsageError``; defining it in exporter/cli.py made the
configuration import the command-line front end (and, through it, every command).
"""

from __future__ import annotations

#: exit status of a bad flag, environment variable or config value
EXIT_USAGE = 2


class UsageError(Exception):
    """A bad flag or config value: the CLI prints one line and exits with status 2."""


__all__ = ["EXIT_USAGE", "UsageError"]

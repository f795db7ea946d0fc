"""Value parsers every configuration section shares: seconds, counts, files, booleans, addresses.

Why a leaf: each component's section (exporter/engines/config.py, exporter/probe/config.py,
exporter/kubernetes/settings.py, ...) parses its own keys with these, and exporter/config.py
assembles the sections; if the parsers lived in config.py every section would import the
assembly back. This module imports nothing of the package but exporter/errors.py.

A parser takes the raw value (a YAML scalar, an environment string, a flag) and returns the
typed value or raises ValueError with a short reason; ``parsed`` turns that into the one-line
UsageError naming the setting.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from typing import Any, TypeVar

import yaml

from exporter.errors import UsageError

#: every setting can be given as LLM_EXPORTER_<NAME>
ENV_PREFIX = "LLM_EXPORTER_"
#: sampling loops faster than this burn a core for nothing (`--gpu-interval 1e-9` once did)
MIN_INTERVAL_S = 0.1
MAX_INTERVAL_S = 3600.0
MIN_TIMEOUT_S = 0.01
#: a timeout nobody set is this share of its interval (at most the documented default)
DEFAULT_TIMEOUT_SHARE = 0.9
#: longest value an error line shows (a 5000-character file name is cut, not printed whole)
SHOWN_CHARS = 80
#: the largest config or web config file read (a real one is a few KiB)
MAX_CONFIG_FILE_BYTES = 4 * 1024 * 1024

T = TypeVar("T")

_USERINFO = re.compile(r"://[^/\s@'\"]*@")


# --------------------------------------------------------------------------- error lines


def shown(value: Any) -> str:
    """A value as an error line may show it: repr()-ed (no raw newline or control character), cut short.

    Why: a bad value is echoed so the operator sees it, but a 5000-character file name or an
    integer of 400 digits must not become a screenful, and str() of a 5000-digit integer raises.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {len(format(value, 'x')) * 4 * 3 // 10}+ digits"
    try:
        text = _USERINFO.sub("://***@", repr(value))  # a URL's password never reaches an error line
    except ValueError:  # a huge integer inside a list or mapping
        return f"a {type(value).__name__}"
    return text if len(text) <= SHOWN_CHARS else f"{text[: SHOWN_CHARS - 20]}... ({len(text)} characters)"


def plain(path: str) -> str:
    """A file or setting name as an error line shows it: as it is when short and printable, else as shown() cuts it."""
    return path if len(path) <= 4 * SHOWN_CHARS and path.isprintable() else shown(path)


def one_line(message: str) -> str:
    """An error message on exactly one line, of bounded length, whatever the value in it held."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
    text = _USERINFO.sub("://***@", text)  # a URL's password never reaches an error line
    return text if len(text) <= 400 else text[:380] + "... (cut)"


def redacted_url(value: str) -> str:
    """A URL as an error line may show it: user info (a password) replaced by ***."""
    scheme, sep, rest = value.partition("://")
    netloc, slash, tail = rest.partition("/")
    if "@" in netloc:
        netloc = "***@" + netloc.rpartition("@")[2]
    return shown(f"{scheme}{sep}{netloc}{slash}{tail}" if sep else ("***" if "@" in value else value))


def parsed(parse: Callable[[Any], T], value: Any, where: str) -> T:
    """parse(value), its ValueError (OverflowError, TypeError: a parser's bug) as one UsageError line."""
    try:
        return parse(value)
    except (ValueError, OverflowError, TypeError) as err:
        raise UsageError(one_line(f"{where}: {err}")) from None


# --------------------------------------------------------------------------- scalars


def string(value: Any) -> str:
    """YAML may hand us a number, list or null where a string belongs; say so instead of str()-ing it."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a non-empty string, got {shown(value)}")
    return value


def ascii_digits(text: str) -> bool:
    """ "123", not "１２３" or "²": str.isdigit() and int() accept every Unicode digit."""
    return text.isascii() and text.isdigit()


def boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    text = value.strip().lower() if isinstance(value, str) else None
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {shown(value)}")


def positive_int(value: Any) -> int:
    """A positive integer: a YAML int, a whole float, or ASCII digits (at most 18 of them)."""
    bad = ValueError(f"expected a positive integer, got {shown(value)}")
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise bad
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer() or abs(value) > 2**63:
            raise bad
        number = int(value)
    elif isinstance(value, str):
        text = value.strip().removeprefix("+")
        if not ascii_digits(text) or len(text) > 18:  # int() takes "１２" and raises past 4300 digits
            raise bad
        number = int(text)
    else:
        number = int(value)
    if number <= 0:
        raise bad
    return number


# --------------------------------------------------------------------------- durations
#
# Why one grammar: `tune --slo-ttft 500ms` worked while `diagnosis: {slo_ttft_p95_seconds: 500ms}`
# was exit 2 and "5ss" passed as 5 (issue 32). Every setting in seconds of serve (flag, environment,
# config file) and the commands' duration flags are read by ``duration_seconds``; the callers differ
# only in their range and in the wording of their error line.

#: seconds per unit, largest first: a spelling lists its units in this order, each at most once
DURATION_UNITS: dict[str, float] = {
    "w": 604800.0,
    "d": 86400.0,
    "h": 3600.0,
    "m": 60.0,
    "s": 1.0,
    "ms": 1e-3,
    "us": 1e-6,
    "\u00b5s": 1e-6,  # micro sign
    "\u03bcs": 1e-6,  # Greek mu
}
_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"  # ASCII digits only ([0-9], not \d)
#: a bare number of seconds (what YAML, an environment variable or an old flag value gives)
_BARE = re.compile(rf"{_NUMBER}(?:e[+-]?[0-9]+)?")
#: one "<number><unit>" part; the longer units first, so "ms" is not read as "m" then "s"
_PART = re.compile(rf"({_NUMBER})\s*(ms|us|\u00b5s|\u03bcs|[wdhms])\s*")
_NON_FINITE = frozenset({"nan", "inf", "infinity"})
DURATION_EXAMPLES = "500ms, 2s or 1m30s"


class DurationError(ValueError):
    """A value outside the duration grammar; ``kind`` lets each caller word its own line.

    ``kind``: ``syntax`` (not a duration), ``non_finite`` (NaN, infinite, overflowing) or
    ``negative``. The message is the generic one (``diagnosis:`` keys and argparse types use it).
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _not_a_duration(value: Any) -> DurationError:
    return DurationError("syntax", f"expected a number of seconds or a duration such as {DURATION_EXAMPLES}, got {shown(value)}")


def _spelled_seconds(text: str) -> float | None:
    """``text`` (stripped, lower case, unsigned) in the grammar as seconds, or None."""
    if _BARE.fullmatch(text):
        return float(text)
    total, pos, last = 0.0, 0, math.inf
    while pos < len(text):
        part = _PART.match(text, pos)
        if part is None or DURATION_UNITS[part.group(2)] >= last:  # out of order or repeated: "1s1m", "5s5s"
            return None
        last = DURATION_UNITS[part.group(2)]
        total += float(part.group(1)) * last
        pos = part.end()
    return total if pos else None


def _text_seconds(value: str) -> float:
    """A duration as text: "500ms", "2s", "1m30s", "1h", "1.5", "+2"; DurationError otherwise."""
    text = value.strip().lower()
    sign, body = (text[0], text[1:].lstrip()) if text[:1] in ("+", "-") else ("", text)
    if body in _NON_FINITE:
        raise DurationError("non_finite", f"expected a finite number of seconds, got {shown(value)}")
    seconds = _spelled_seconds(body)
    if seconds is None:
        raise _not_a_duration(value)
    return -seconds if sign == "-" else seconds


def duration_seconds(value: Any) -> float:
    """THE duration grammar: seconds >= 0 from "500ms", "2s", "1m30s", "1h", "7d", "90" or a YAML number.

    Units w d h m s ms us (µs), largest first, each at most once ("1h30m", not "30m1h" or
    "5ss"); a bare number is seconds. NaN, infinities and negatives are refused: DurationError.
    """
    if isinstance(value, str):
        seconds = _text_seconds(value)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except OverflowError:  # float(10**400)
            seconds = math.inf
    else:
        raise _not_a_duration(value)
    if not math.isfinite(seconds):
        raise DurationError("non_finite", f"expected a finite number of seconds, got {shown(value)}")
    if seconds < 0:
        raise DurationError("negative", f"expected 0 or a positive number of seconds, got {shown(value)}")
    return seconds


def parse_duration(value: Any, setting: str, *, positive: bool = True, expected: str = "") -> float:
    """A command's duration flag as seconds; UsageError (one line naming ``setting``) otherwise.

    ``expected`` words the line for a value outside the grammar (default: "a duration such as
    500ms, 2s or 1m30s"), so each flag keeps the examples its help shows.
    """
    try:
        seconds = duration_seconds(value)
    except DurationError as err:
        if err.kind != "negative":
            wanted = expected or f"a duration such as {DURATION_EXAMPLES}"
            raise UsageError(one_line(f"{setting}: expected {wanted}, got {shown(value)}")) from None
        seconds = -1.0
    if seconds < 0 or (positive and seconds == 0):
        least = "a positive duration" if positive else "a duration of 0 or more"
        raise UsageError(one_line(f"{setting}: expected {least}, got {shown(value)}"))
    return seconds


def seconds_type(positive: bool = True) -> Callable[[str], float]:
    """An argparse ``type=`` for a flag in seconds: the grammar ("90", "1m30s"); 0 only when not ``positive``.

    Why ArgumentTypeError: argparse prints its message after the flag's name; a ValueError
    would become "invalid ... value" and lose what was expected.
    """

    def parse(text: str) -> float:
        try:
            seconds = duration_seconds(text)
        except DurationError as err:
            if not (positive and err.kind == "negative"):
                raise argparse.ArgumentTypeError(str(err)) from None
            seconds = 0.0
        if positive and seconds == 0:
            raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {shown(text)}")
        return seconds

    return parse


def positive_seconds(value: Any) -> float:
    """A ``serve`` interval or timeout: the grammar, above 0 (the range is the caller's)."""
    try:
        f = duration_seconds(value)
    except DurationError:
        f = 0.0
    if not f > 0:
        raise ValueError(f"expected a positive number of seconds or a duration such as {DURATION_EXAMPLES}, got {shown(value)}")
    return f


def interval_seconds(value: Any) -> float:
    f = positive_seconds(value)
    if not MIN_INTERVAL_S <= f <= MAX_INTERVAL_S:
        raise ValueError(f"expected {MIN_INTERVAL_S:g} to {MAX_INTERVAL_S:g} seconds, got {shown(value)}")
    return f


def timeout_seconds(value: Any) -> float:
    f = positive_seconds(value)
    if not MIN_TIMEOUT_S <= f <= MAX_INTERVAL_S:
        raise ValueError(f"expected {MIN_TIMEOUT_S:g} to {MAX_INTERVAL_S:g} seconds, got {shown(value)}")
    return f


def default_timeout(interval: float, default: float) -> float:
    """The timeout nobody set: a share of its interval, at most the documented default."""
    return min(default, round(interval * DEFAULT_TIMEOUT_SHARE, 6))


# --------------------------------------------------------------------------- addresses, files


def _host(host: str) -> bool:
    """A host a socket can bind: an IP literal or a DNS name (bounded, ASCII, no control character)."""
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host == "" or (len(host) <= 253 and host.isascii() and host.isprintable() and " " not in host)


def split_listen_address(value: Any) -> tuple[str, int]:
    host, sep, port = string(value).rpartition(":")
    if not sep or not ascii_digits(port) or len(port) > 5 or not (1 <= int(port) <= 65535):
        raise ValueError(f"expected HOST:PORT with a port 1-65535, got {shown(value)}")
    if not _host(host):
        raise ValueError(
            f"expected HOST:PORT with an IP address or a DNS name of at most 253 ASCII characters, got {shown(value)}"
        )
    return host.strip("[]") or "0.0.0.0", int(port)


def readable_file(value: Any) -> str:
    """A file we can open now, not at the first scrape."""
    path = string(value)
    try:
        with open(path, "rb"):
            pass
    except IsADirectoryError:
        raise ValueError(f"{plain(path)} is a directory, not a file") from None
    except OSError as err:  # ENOENT, EACCES, ENAMETOOLONG (a 5000-character name), ...
        raise ValueError(f"cannot read {plain(path)}: {err.strerror or err}") from None
    except ValueError:  # a NUL byte in the name
        raise ValueError(f"cannot read {plain(path)}: not a valid file name") from None
    return path


def read_yaml_file(path: str) -> Any:
    """A YAML file's document; ValueError (one line) when it cannot be read or is not YAML.

    Why so many cases: yaml.safe_load raises ValueError for an integer of 5000 digits and
    RecursionError for a deeply nested document, and a non-UTF-8 file is UnicodeDecodeError;
    each would otherwise end start-up in a traceback.
    """
    try:
        with open(path, "rb") as f:  # bounded: `--config /dev/zero` must not fill the memory
            raw = f.read(MAX_CONFIG_FILE_BYTES + 1)
        if len(raw) > MAX_CONFIG_FILE_BYTES:
            raise ValueError(f"{plain(path)} is over {MAX_CONFIG_FILE_BYTES >> 20} MiB: not a config file")
        text = raw.decode("utf-8")
    except OSError as err:
        raise ValueError(f"cannot read {plain(path)}: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"{plain(path)} is not UTF-8 text (byte {err.start})") from None
    except ValueError as err:
        if "embedded null" not in str(err):
            raise
        raise ValueError(f"cannot read {plain(path)}: not a valid file name") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ValueError(f"{plain(path)} is not valid YAML: {str(err).splitlines()[0]}") from None
    except (ValueError, OverflowError) as err:
        raise ValueError(f"{plain(path)} is not valid YAML: {err}") from None
    except RecursionError:
        raise ValueError(f"{plain(path)} is not valid YAML: nested too deeply") from None


# --------------------------------------------------------------------------- sections


def setting_key(key: Any, where: str | None) -> str:
    """A mapping key as a setting name; YAML may give an int (10**400 cannot even be str()-ed) or a list."""
    if isinstance(key, str):
        return key.replace("-", "_")
    if isinstance(key, bool) or not isinstance(key, (int, float)) or (isinstance(key, int) and key.bit_length() > 64):
        raise UsageError(one_line(f"{where}: unknown setting {shown(key)}"))
    return str(key)


def section_keys(raw: dict[Any, Any], known: set[str] | frozenset[str], where: str, hint: str = "") -> dict[str, Any]:
    """A mapping section with its keys as setting names; UsageError for a key outside ``known``."""
    item = {setting_key(k, where): v for k, v in raw.items()}
    unknown = sorted(set(item) - known)
    if unknown:
        raise UsageError(one_line(f"{where}: unknown setting(s) {', '.join(map(plain, unknown))}{hint}"))
    return item


__all__ = [
    "DURATION_EXAMPLES",
    "DURATION_UNITS",
    "ENV_PREFIX",
    "DurationError",
    "boolean",
    "default_timeout",
    "duration_seconds",
    "interval_seconds",
    "one_line",
    "parse_duration",
    "parsed",
    "plain",
    "positive_int",
    "positive_seconds",
    "read_yaml_file",
    "readable_file",
    "redacted_url",
    "seconds_type",
    "section_keys",
    "setting_key",
    "shown",
    "split_listen_address",
    "string",
    "timeout_seconds",
]

"""The user-facing error tree.

Everything a user can get wrong (a config key, a path, a URI, a malformed input file) raises a
subclass of :class:`UserError` whose message names the thing, quotes the bad value and says what
is allowed. Entry points catch ``UserError`` and print ``error: <message>`` without a traceback;
anything else is a bug and keeps its traceback.

>>> str(ConfigError("prepare.min_elo: -5 is not allowed: must be >= 0", source="configs/tiny.yaml"))
'configs/tiny.yaml: prepare.min_elo: -5 is not allowed: must be >= 0'
"""

from __future__ import annotations


class UserError(Exception):
    """A mistake in what the user gave us: printed as one line, never with a traceback."""

    def __init__(self, message: str, *, source: str | None = None) -> None:
        self.message = message
        self.source = source
        super().__init__(f"{source}: {message}" if source else message)


class ConfigError(UserError, ValueError):
    """A bad config file, key or value."""


class StorageError(UserError, OSError):
    """A missing path, an unsupported URI scheme, or an unreachable bucket."""


class InputDataError(UserError, ValueError):
    """Input data that cannot be used at all (as opposed to bad records, which are counted)."""

"""The shape of a :class:`~chessrl.search.network.PolicyValueNet`, without torch: the selfplay
phase's driver (and so its ``--help``) reads it; the network itself imports torch.

>>> NetConfig(blocks=2, channels=32, history=2).input_channels
35
>>> NetConfig(channels=0)
Traceback (most recent call last):
...
ValueError: NetConfig.channels must be an integer >= 1, got 0
"""

from __future__ import annotations

from dataclasses import dataclass

from chessrl.search.board_encoding import input_channels

__all__ = ["NetConfig"]


@dataclass(frozen=True)
class NetConfig:
    """The shape of a :class:`PolicyValueNet`."""

    #: Residual blocks in the tower (AlphaZero: 19 or 39).
    blocks: int = 4
    #: Convolution channels throughout the tower (AlphaZero: 256).
    channels: int = 64
    #: Positions of history in the input planes (AlphaZero: 8); fixes the input channels.
    history: int = 2
    #: Hidden units of the value head's fully connected layer (AlphaZero: 256).
    value_hidden: int = 64

    def __post_init__(self) -> None:
        for name in ("blocks", "channels", "history", "value_hidden"):
            value = getattr(self, name)
            least = 0 if name == "blocks" else 1
            if not isinstance(value, int) or value < least:
                raise ValueError(f"NetConfig.{name} must be an integer >= {least}, got {value!r}")

    @property
    def input_channels(self) -> int:
        """Planes of the input: ``input_channels(history)``."""
        return input_channels(self.history)

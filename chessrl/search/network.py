"""AlphaZero's residual policy/value network and its loss.

The network reads :func:`chessrl.search.board_encoding.encode_board` planes and returns one logit per
action of the 8×8×73 move space (index ``plane * 64 + square``, the layout of
:mod:`chessrl.search.board_encoding`) and a value in ``[-1, 1]`` from the side to move's perspective.

>>> import chess
>>> from chessrl.search.board_encoding import encode_boards
>>> net = PolicyValueNet(NetConfig(blocks=1, channels=16, history=2))
>>> logits, values = net.predict(encode_boards([chess.Board()] * 3, history=2))
>>> logits.shape, values.shape, bool(abs(values).max() <= 1)
((3, 4672), (3,), True)

Training minimises AlphaZero's loss: cross-entropy of the policy against the search's visit
distribution, squared error of the value against the game's result, and an L2 penalty:

>>> planes = torch.from_numpy(encode_boards([chess.Board()], history=2))
>>> target_pi = torch.zeros(1, 4672)
>>> target_pi[0, 76] = 1.0                                 # e2e4
>>> logits, values = net(planes)
>>> total, policy_ce, value_mse = alphazero_loss(logits, values, target_pi, torch.ones(1), net)
>>> bool(total > policy_ce + value_mse)                    # plus the L2 term
True
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from chessrl.search.board_encoding import NUM_ACTIONS, NUM_PLANES
from chessrl.search.net_config import NetConfig

__all__ = [
    "NetConfig",
    "PolicyValueNet",
    "ResidualBlock",
    "alphazero_loss",
    "count_parameters",
    "load_network",
]


def _conv_bn(cin: int, cout: int, kernel: int) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, kernel, padding=kernel // 2, bias=False), nn.BatchNorm2d(cout)]


class ResidualBlock(nn.Module):
    """conv-bn-relu-conv-bn, plus the input, then relu."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            *_conv_bn(channels, channels, 3), nn.ReLU(inplace=True), *_conv_bn(channels, channels, 3)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x + self.body(x))


class PolicyValueNet(nn.Module):
    """A residual tower with a policy head (``(B, 4672)`` logits) and a value head (``(B,)`` in
    ``[-1, 1]``)."""

    def __init__(self, config: NetConfig | None = None) -> None:
        super().__init__()
        self.config = config if config is not None else NetConfig()
        c = self.config.channels
        self.stem = nn.Sequential(*_conv_bn(self.config.input_channels, c, 3), nn.ReLU(inplace=True))
        self.tower = nn.Sequential(*[ResidualBlock(c) for _ in range(self.config.blocks)])
        self.policy_head = nn.Sequential(
            *_conv_bn(c, c, 3), nn.ReLU(inplace=True), nn.Conv2d(c, NUM_PLANES, kernel_size=1)
        )
        self.value_head = nn.Sequential(
            *_conv_bn(c, 1, 1),
            nn.ReLU(inplace=True),
            nn.Flatten(),
            nn.Linear(64, self.config.value_hidden),
            nn.ReLU(inplace=True),
            nn.Linear(self.config.value_hidden, 1),
            nn.Tanh(),
        )

    def forward(self, planes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``planes`` (B, C, 8, 8) -> policy logits (B, 4672), values (B,)."""
        x = self.tower(self.stem(planes))  # (B, channels, 8, 8)
        logits = self.policy_head(x).flatten(1)  # (B, 73, 8, 8) -> (B, 73 * 64): plane * 64 + square
        values = self.value_head(x).squeeze(1)  # (B,)
        return logits, values

    @torch.inference_mode()
    def predict(self, planes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Policy logits ``(B, 4672)`` and values ``(B,)`` as float32 numpy arrays for a batch of
        planes, in eval mode (a module in training mode is put back afterwards)."""
        was_training = self.training
        if was_training:  # switching modes walks every submodule: not on every call
            self.eval()
        try:
            device = next(self.parameters()).device
            x = torch.from_numpy(np.ascontiguousarray(planes, dtype=np.float32)).to(device)
            logits, values = self(x)
            return logits.float().cpu().numpy(), values.float().cpu().numpy()
        finally:
            if was_training:
                self.train()


def load_network(uri: str) -> PolicyValueNet:
    """A network saved by the selfplay phase (``best.pt``, ``gen0.pt``, ``<run>_stepXXXX.pt``: a
    dict with ``model`` and ``net``), from a local path or ``s3://``; in eval mode on the CPU."""
    import io

    from cluster.errors import StorageError
    from cluster.storage import split_uri

    storage, rel = split_uri(uri)
    if not storage.exists(rel):
        raise StorageError(f"no network at {storage.uri_of(rel)}")
    try:
        saved = torch.load(io.BytesIO(storage.read_bytes(rel)), map_location="cpu", weights_only=False)
        net = PolicyValueNet(NetConfig(**saved["net"]))
        net.load_state_dict(saved["model"])
    except Exception as exc:  # a file that is not a selfplay network
        raise StorageError(f"{storage.uri_of(rel)} is not a network saved by selfplay: {exc}") from None
    return net.eval()


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters of ``model``.

    >>> count_parameters(PolicyValueNet(NetConfig(blocks=0, channels=8, history=1)))
    7012
    """
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def alphazero_loss(
    logits: torch.Tensor,
    values: torch.Tensor,
    target_pi: torch.Tensor,
    target_z: torch.Tensor,
    model: nn.Module | None = None,
    l2: float = 1e-4,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """AlphaZero's ``(z - v)^2 - pi^T log p + c ||theta||^2``, averaged over the batch.

    ``logits`` (B, 4672) may hold ``-inf`` at illegal moves where ``target_pi`` (B, 4672, rows
    summing to 1) is 0; ``values`` and ``target_z`` (B,) are from the side to move. The L2 term
    covers every parameter of ``model`` (none when ``model`` is None). Returns
    ``(total, policy_ce, value_mse)``.

    >>> logits = torch.zeros(2, 4672)
    >>> pi = torch.full((2, 4672), 1 / 4672)
    >>> total, policy_ce, value_mse = alphazero_loss(logits, torch.zeros(2), pi, torch.ones(2))
    >>> round(float(policy_ce), 4), float(value_mse), round(float(total), 4)   # log(4672), 1
    (8.4493, 1.0, 9.4493)
    """
    if logits.shape[-1] != NUM_ACTIONS or target_pi.shape != logits.shape:
        raise ValueError(
            f"logits and target_pi must both be (B, {NUM_ACTIONS}), got {tuple(logits.shape)} "
            f"and {tuple(target_pi.shape)}"
        )
    log_p = F.log_softmax(logits.float(), dim=-1)
    log_p = log_p.masked_fill(target_pi <= 0, 0.0)  # 0 * -inf at masked moves counts as 0
    policy_ce = -(target_pi.float() * log_p).sum(-1).mean()
    value_mse = F.mse_loss(values.float(), target_z.float())
    l2_term = torch.zeros((), device=logits.device)
    if model is not None and l2 > 0:
        l2_term = l2 * torch.stack([p.float().pow(2).sum() for p in model.parameters()]).sum()
    total = policy_ce + value_mse + l2_term
    return total, policy_ce, value_mse

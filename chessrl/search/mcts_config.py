"""The settings of a :class:`~chessrl.search.mcts.BatchedMCTS` search: :class:`MCTSConfig`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["MCTSConfig"]


@dataclass(frozen=True)
class MCTSConfig:
    """Search settings (AlphaZero's values, except the number of simulations)."""

    #: Simulations (leaf evaluations or terminal visits) per root and search.
    simulations: int = 64
    #: Exploration constant of PUCT: ``Q + c_puct * P * sqrt(N_parent) / (1 + N)``.
    c_puct: float = 1.5
    #: Concentration of the Dirichlet noise mixed into the root's priors.
    dirichlet_alpha: float = 0.3
    #: Weight of that noise: ``(1 - eps) * P + eps * Dir(alpha)``.
    dirichlet_eps: float = 0.25
    #: Loss counted on an edge while a leaf below it waits for its evaluation.
    virtual_loss: float = 1.0
    #: Leaves gathered per game per round (virtual loss spreads them when more than 1; a leaf
    #: reached twice in a round is evaluated once and counts as two simulations).
    leaves_per_game: int = 1
    #: First-play urgency: None scores an unvisited move 0, as AlphaZero; a number scores it as the
    #: node's mean value so far minus this (Leela Chess Zero's "FPU reduction"), so that a winning
    #: side still tries new moves instead of only the first ones it saw.
    fpu_reduction: float | None = None
    #: Plies (from the game's start) whose move is sampled from the visit counts; argmax after.
    temperature_moves: int = 30
    #: Temperature of that sampling: probabilities proportional to ``N ** (1 / temperature)``.
    temperature: float = 1.0
    #: ``puct``: AlphaZero's search (above). ``gumbel``: Gumbel root search (Danihelka et al.
    #: 2022, as mctx): ``gumbel_actions`` root moves sampled by Gumbel-top-k, sequential halving
    #: over the simulations, the deterministic selection below the root, and the improved policy
    #: ``softmax(logits + sigma(completed Q))`` as the policy target (see :mod:`chessrl.search.gumbel`);
    #: the root's noise is Gumbel noise, not Dirichlet, and the move played is the search's choice.
    #: The halving schedule counts this search's visits; a kept subtree's earlier visits still
    #: count in Q and sigma.
    search: Literal["puct", "gumbel"] = "puct"
    #: Gumbel: root moves considered (``m``; fewer when fewer are legal).
    gumbel_actions: int = 16
    #: Gumbel: ``sigma(q) = (c_visit + max_b N(b)) * c_scale * q``, q rescaled to [0, 1].
    c_visit: float = 50.0
    c_scale: float = 1.0

    def __post_init__(self) -> None:
        if self.search not in ("puct", "gumbel"):
            raise ValueError(f"MCTSConfig.search must be 'puct' or 'gumbel', got {self.search!r}")
        for name in ("simulations", "leaves_per_game", "gumbel_actions"):
            if getattr(self, name) < 1:
                raise ValueError(f"MCTSConfig.{name} must be at least 1, got {getattr(self, name)!r}")
        for name in ("c_puct", "dirichlet_alpha", "temperature", "c_scale"):
            if not getattr(self, name) > 0:
                raise ValueError(f"MCTSConfig.{name} must be positive, got {getattr(self, name)!r}")
        if not 0 <= self.dirichlet_eps <= 1:
            raise ValueError(f"MCTSConfig.dirichlet_eps must be in [0, 1], got {self.dirichlet_eps!r}")
        if self.virtual_loss < 0 or self.temperature_moves < 0 or self.c_visit < 0:
            raise ValueError("MCTSConfig.virtual_loss, temperature_moves and c_visit must not be negative")

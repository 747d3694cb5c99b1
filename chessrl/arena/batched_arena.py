"""Matches between search players, many games at once: one batched MCTS search per side per move.

:func:`chessrl.arena.game.play_game` plays one game at a time through the :class:`~chessrl.arena.players.Player`
protocol, which for an MCTS player means one network call per leaf. Gating a self-play network
and measuring it against a random mover needs tens of games between search players, so this
arena plays them side by side: every round, the games where side A is to move are searched
together (one evaluator call per round of leaves across those games), then side B's. A side
with no evaluator plays uniformly random legal moves. Games end by the
rules the search itself scores (:func:`chessrl.search.mcts.terminal_value`): checkmate, stalemate,
insufficient material, a position on the board for the third time, the fifty-move rule, or a
draw at ``max_plies``; there is no adjudication. (:func:`chessrl.arena.game.play_game` also ends a
game when a threefold repetition could be claimed with the next move, one ply earlier.)

>>> from chessrl.arena.game import random_openings
>>> from chessrl.search.mcts import MCTSConfig, UniformEvaluator
>>> search = SearchSide("uniform", UniformEvaluator(), MCTSConfig(simulations=8))
>>> games = play_batched_match(search, SearchSide("random"), random_openings(2, 2, seed=1),
...                            max_plies=12, seed=3)
>>> len(games), sorted({g.white for g in games}), {g.termination for g in games}
(4, ['random', 'uniform'], {'max_plies'})
>>> match_record(games, "uniform")   # wins, draws, losses
(0, 4, 0)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import chess
import numpy as np

from chessrl.arena.game import ArenaGame, Opening
from chessrl.search.mcts import BatchedMCTS, Evaluator, MCTSConfig, Node, terminal_value

__all__ = ["SearchSide", "match_record", "play_batched_match"]


@dataclass(frozen=True)
class SearchSide:
    """A player of :func:`play_batched_match`: MCTS over ``evaluator`` (no root noise, the most
    visited move), or a uniformly random mover when ``evaluator`` is None."""

    name: str
    evaluator: Evaluator | None = None
    mcts: MCTSConfig = field(default_factory=MCTSConfig)


@dataclass
class _Game:
    record: ArenaGame
    board: chess.Board
    sides: tuple[SearchSide, SearchSide]  # white, black
    trees: dict[str, Node]
    rng: np.random.Generator


def play_batched_match(
    a: SearchSide, b: SearchSide, openings: Sequence[Opening], *, max_plies: int = 300, seed: int = 0
) -> list[ArenaGame]:
    """Two games per opening (``a`` with white, then with black), all played at once."""
    if a.name == b.name:
        raise ValueError(f"the two sides need different names, both are {a.name!r}")
    games: list[_Game] = []
    for i, opening in enumerate(openings):
        for white, black in ((a, b), (b, a)):
            board = chess.Board(opening.fen) if opening.fen else chess.Board()
            for uci in opening.moves:
                board.push_uci(uci)
            record = ArenaGame(
                white=white.name, black=black.name, result="*", termination="", moves=[], opening=opening
            )
            rng = np.random.default_rng([seed, i, len(games)])
            games.append(_Game(record, board, (white, black), {}, rng))
    searchers = {
        side.name: BatchedMCTS(side.evaluator, replace(side.mcts, temperature_moves=0), seed=seed)
        for side in (a, b)
        if side.evaluator is not None
    }
    running = [g for g in games if not _over(g, max_plies)]
    while running:
        for side in (a, b):
            turn = [g for g in running if g.sides[0 if g.board.turn == chess.WHITE else 1].name == side.name]
            if not turn:
                continue
            if side.evaluator is None:
                moves = [g.rng.choice(list(g.board.legal_moves)) for g in turn]  # type: ignore[arg-type]
            else:
                roots = [g.trees.get(side.name) or Node(g.board.copy()) for g in turn]
                searchers[side.name].search(roots, add_noise=False)
                moves = [root.best_move() for root in roots]
                for g, root in zip(turn, roots, strict=True):
                    g.trees[side.name] = root
            for g, move in zip(turn, moves, strict=True):
                g.board.push(move)
                g.record.moves.append(move.uci())
                g.record.comments.append("")
                for name, tree in list(g.trees.items()):
                    g.trees[name] = BatchedMCTS.advance(tree, move)
            running = [g for g in running if not _over(g, max_plies)]
    return [g.record for g in games]


def _over(game: _Game, max_plies: int) -> bool:
    board = game.board
    value = terminal_value(board)
    if value is not None:
        if value < 0:
            game.record.result = "0-1" if board.turn == chess.WHITE else "1-0"
            game.record.termination = "checkmate"
        else:
            outcome = board.outcome(claim_draw=True)
            game.record.result = "1/2-1/2"
            game.record.termination = outcome.termination.name.lower() if outcome is not None else "draw"
        return True
    if len(game.record.moves) >= max_plies:
        game.record.result, game.record.termination = "1/2-1/2", "max_plies"
        return True
    return False


def match_record(games: Sequence[ArenaGame], name: str) -> tuple[int, int, int]:
    """Wins, draws and losses of the player ``name`` over ``games``."""
    wins = draws = losses = 0
    for game in games:
        score = game.score_for(name)
        if score == 1.0:
            wins += 1
        elif score == 0.5:
            draws += 1
        else:
            losses += 1
    return wins, draws, losses

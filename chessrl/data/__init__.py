"""Games and positions, the data every phase reads.

- :mod:`~chessrl.data.games`: the games table (one row per game, moves in UCI), its schema and reader.
- :mod:`~chessrl.data.pgn`: streaming PGN: split, parse, filter, count.
- :mod:`~chessrl.data.pgn_filters`: what a game's headers say (time control, termination, result), the game filter.
- :mod:`~chessrl.data.positions`: training positions by game phase (openings, middlegames, endgames).

Imports: no other ``chessrl`` package.
"""

"""Measuring players: games between them, ratings, suites and paired move quality.

- :mod:`~chessrl.arena.players`: the player protocol; LM, MCTS, Stockfish, random and UCI players.
- :mod:`~chessrl.arena.saved_models`: one loader (and a cheap check) for saved models and networks.
- :mod:`~chessrl.arena.game`: one game between two players, openings, adjudication, PGN out.
- :mod:`~chessrl.arena.batched_arena`: many games between search players at once.
- :mod:`~chessrl.arena.rating`: Elo arithmetic, intervals, ratings from many games.
- :mod:`~chessrl.arena.sprt`: the SPRT of an A/B match, on games or on game pairs.
- :mod:`~chessrl.arena.ladder`: the low Elo ladder below Stockfish's weakest level.
- :mod:`~chessrl.arena.suites`: EPD test suites, centipawn loss, accuracy.
- :mod:`~chessrl.arena.move_quality`: two policies' moves on the same positions, scored by Stockfish.
- :mod:`~chessrl.arena.eval_report`: the evaluate phase's report, plots and summary lines.
- :mod:`~chessrl.arena.paired_report`: the report and summary lines of ``evaluate --mode paired``.

Imports: :mod:`chessrl.data`, :mod:`chessrl.engine`, :mod:`chessrl.lm`, :mod:`chessrl.search`.
"""

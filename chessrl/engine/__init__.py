"""Chess engines over UCI, both sides of the protocol.

- :mod:`~chessrl.engine.client`: one Stockfish process (:class:`~chessrl.engine.client.UCIEngine`),
  its typed limits, scores and analyses.
- :mod:`~chessrl.engine.group`: a group of them with a cache, a bounded queue and restarts.
- :mod:`~chessrl.engine.uci`: the lean blocking UCI client they use.
- :mod:`~chessrl.engine.annotation`: Stockfish's value of every legal move of a board (the
  annotated-positions table's rows), and their colour flips.
- :mod:`~chessrl.engine.move_value`: what a move is worth to its side on a value scale that
  keeps ranking moves once a game is won (the RL grade's and the judge's target).
- :mod:`~chessrl.engine.engine_games`: Stockfish-against-Stockfish games for a training corpus.
- :mod:`~chessrl.engine.uci_server`: the engine side: a policy served as a UCI engine.

Imports: :mod:`chessrl.data` only.
"""

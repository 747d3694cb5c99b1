"""Chess engines over UCI, both sides of the protocol.

- :mod:`~chessrl.engine.client`: Stockfish processes (:class:`~chessrl.engine.client.UCIEngine`)
  and a group of them with a cache, a bounded queue and restarts.
- :mod:`~chessrl.engine.uci`: the lean blocking UCI client they use.
- :mod:`~chessrl.engine.engine_games`: Stockfish-against-Stockfish games for a training corpus.
- :mod:`~chessrl.engine.uci_server`: the engine side: a policy served as a UCI engine.

Imports: :mod:`chessrl.data` only.
"""

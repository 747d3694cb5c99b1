"""AlphaZero-style search and its network.

- :mod:`~chessrl.search.board_encoding`: input planes and the 8×8×73 move space.
- :mod:`~chessrl.search.move_codes`: moves as integer codes; python-chess's legal moves as codes, faster.
- :mod:`~chessrl.search.network`, :mod:`~chessrl.search.net_config`: the residual policy/value network and its loss, and its shape (no torch).
- :mod:`~chessrl.search.mcts`: batched PUCT (or Gumbel) search over many games at once.
- :mod:`~chessrl.search.mcts_config`, :mod:`~chessrl.search.mcts_node`: the search's settings, and a node of its trees.
- :mod:`~chessrl.search.mcts_tree`, :mod:`~chessrl.search.mcts_leaves`: the flat array trees and how a node gets its moves.
- :mod:`~chessrl.search.mcts_compiled`, :mod:`~chessrl.search.compiled`: the numba-compiled walks (PUCT, Gumbel) and backup.
- :mod:`~chessrl.search.compiled_board`, :mod:`~chessrl.search.mcts_native`: the rules in numba over arrays, and the search's nodes on them.
- :mod:`~chessrl.search.compiled_bitboards`: the compiled rules' bitboard tables and steps (attacks, lowest bit, zobrist numbers).
- :mod:`~chessrl.search.native_board`: the same answers from ``rust_chess`` boards (a reference in the tests; which boards a native search takes).
- :mod:`~chessrl.search.search_board`: exact python-chess board operations in fewer steps.
- :mod:`~chessrl.search.gumbel`, :mod:`~chessrl.search.mcts_gumbel`: Gumbel root search's math, and its steps on a tree.
- :mod:`~chessrl.search.selfplay`: many self-play games at once.
- :mod:`~chessrl.search.replay`: replay shards of self-play positions.

Imports: :mod:`chessrl.data` only.
"""

"""The chess and learning domain, Ray-free: PGN and the games table, and (as phases land) board
encoding, move vocabulary, tokenizer, text formats, models, MCTS, losses and Elo.

Nothing in this package imports ray; everything here is unit-testable in milliseconds.
"""

__version__ = "0.1.0"

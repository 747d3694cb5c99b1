"""The chess and learning domain, Ray-free, in six packages. Each may import only the packages
named before it in :data:`LAYERS` (a unit test, ``tests/unit/test_layering.py``, checks every
import statement), and nothing here imports ray, ``actors``, ``pipelines`` or ``cluster`` beyond
its two Ray-free modules (``cluster.errors``, the user-facing errors; ``cluster.storage``, local and
S3 paths): everything is unit-testable in milliseconds.

    data    ← games, PGN, training positions
    engine  ← Stockfish and UCI, both sides of the protocol           (imports data)
    lm      ← the chess language model: tokenizer, formats, models     (imports data)
    search  ← AlphaZero: board encoding, network, batched MCTS, replay (imports data)
    arena   ← players, games between them, Elo, suites, move quality  (imports the four above)
    rl      ← the RL phases' math: preferences, reward, DPO, PPO, GRPO (imports all of the above)

>>> LAYERS["arena"]
('data', 'engine', 'lm', 'search')
"""

__version__ = "0.1.0"

#: Each package and the packages it may import (besides the standard library and third parties).
LAYERS: dict[str, tuple[str, ...]] = {
    "data": (),
    "engine": ("data",),
    "lm": ("data",),
    "search": ("data",),
    "arena": ("data", "engine", "lm", "search"),
    "rl": ("data", "engine", "lm", "search", "arena"),
}

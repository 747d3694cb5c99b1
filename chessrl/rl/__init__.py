"""The math of the phases that improve a policy from feedback, Ray-free.

- :mod:`~chessrl.rl.preferences`: Stockfish-judged preference pairs (the pair rule, the schema).
- :mod:`~chessrl.rl.reward`: the reward model's query, scoring and normalisation.
- :mod:`~chessrl.rl.dpo`: direct preference optimisation on those pairs.
- :mod:`~chessrl.rl.policy_gradient`: advantages, KL estimators, clipped losses.
- :mod:`~chessrl.rl.ppo`: PPO episodes, experience and the update.
- :mod:`~chessrl.rl.grpo`: GRPO's verified rewards, group advantages and loss.

Imports: every other ``chessrl`` package.
"""

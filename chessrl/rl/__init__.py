"""The math of the phases that improve a policy from feedback, Ray-free.

- :mod:`~chessrl.rl.preferences`: Stockfish-judged preference pairs (the pair rule, the schema).
- :mod:`~chessrl.rl.reward`: the reward model's query, scoring and normalisation.
- :mod:`~chessrl.rl.judge_player`: a reward model as an arena player (its best legal move).
- :mod:`~chessrl.rl.scorer_policy`: a reward model's shape as a policy (softmax of its move scores).
- :mod:`~chessrl.rl.dpo`: direct preference optimisation on those pairs.
- :mod:`~chessrl.rl.policy_gradient`: advantages, KL estimators, clipped losses.
- :mod:`~chessrl.rl.ppo_types`: PPO's settings and a recorded action.
- :mod:`~chessrl.rl.ppo`: PPO episodes, opponents and the rollout shards.
- :mod:`~chessrl.rl.ppo_forward`: PPO's forward passes: action log-probs, entropies, values.
- :mod:`~chessrl.rl.ppo_learner`: PPO's learner: per-action rewards, GAE batches and the update.
- :mod:`~chessrl.rl.grpo_types`: GRPO's settings, prompts and samples.
- :mod:`~chessrl.rl.grpo`: GRPO's verified rewards, prompts and sampled groups.
- :mod:`~chessrl.rl.grpo_learner`: GRPO's update: the group loss or online DPO, legality, the step.
- :mod:`~chessrl.rl.grpo_loss`: GRPO's group advantages, loss types and completion log-probabilities.
- :mod:`~chessrl.rl.grpo_scorer`: GRPO with a scorer as the policy: its sampled groups and log-probabilities.
- :mod:`~chessrl.rl.own_games`: GRPO prompts from the policy's own games.
- :mod:`~chessrl.rl.data_parallel`: gradients averaged over the learner's workers (grpo, ppo).

Imports: every other ``chessrl`` package.
"""

"""PPO for a chess language model, Ray-free: episodes where the policy plays one colour, the
experience they make, and the learner's update. The Ray phase (``pipelines/ppo.py``) runs the
same pieces on collectors and a Ray Train learner; :func:`ppo_iteration` on one process is also
the baseline that ``bench/rl_step.py`` compares it with.

One policy move is one action, one token (the chess tokenizer has a token per UCI move; a
tokenizer without one is refused by :class:`chessrl.lm.legality.MoveTokens`). For each action the
collector records the prompt (the game so far), the sampled token, its log-probability under the
sampling policy and the weights' version, whether it was a legal move, and the reward model's
normalised score of it. The learner adds the reference policy's log-probability and the critic's
value, then (OpenRLHF's ``compute_reward``, veRL's GAE)::

    r_t = score_t - kl_coef * (logprob_t - ref_logprob_t)         (k1, per action)
    r_t = illegal_penalty                                          (an illegal move: the episode ends)
    r_T += result_weight * result                                  (+1 / 0 / -1 from the policy's side)
    A, R = GAE(r, V; gamma, lam) ; A whitened ; R = A_raw + V

and takes ``ppo_epochs`` passes of clipped-surrogate and clipped-value minibatch steps
(:mod:`chessrl.rl.policy_gradient`).

>>> s = PPOSettings(kl_coef=0.1)
>>> action_rewards([0.5, 1.0], [True, True], [-1.0, -1.2], [-1.1, -1.0], s, result=0.0)
[0.49, 1.02]
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import chess
import pyarrow as pa
import torch

from chessrl.arena.players import PlayerSpec, parse_player_spec
from chessrl.lm.formats import MovesFormat
from chessrl.lm.legality import MoveTokens
from chessrl.lm.models import right_padded
from chessrl.rl.policy_gradient import (
    compute_gae_advantage_return,
    compute_policy_loss,
    compute_value_loss,
    explained_variance,
    masked_mean,
)
from chessrl.rl.reward import score_ids
from cluster.errors import ConfigError


@dataclass(frozen=True)
class PPOSettings:
    """The algorithm's knobs (the ``ppo`` config section passes them through)."""

    kl_coef: float = 0.05
    """beta: weight of the per-action k1 KL to the reference policy in the reward."""
    clip: float = 0.2
    """epsilon of the clipped surrogate."""
    value_clip: float = 0.2
    """Clip range of the value loss around the old values."""
    gamma: float = 1.0
    """Discount over the policy's moves."""
    lam: float = 0.95
    """GAE lambda."""
    ppo_epochs: int = 2
    """Passes over each iteration's experience."""
    minibatch: int = 64
    """Actions per optimiser step."""
    temperature: float = 1.0
    """Sampling temperature (the log-probabilities are taken at the same temperature)."""
    illegal_penalty: float = -3.0
    """The reward of an illegal or unparseable move (in normalised reward units); it ends the episode."""
    result_weight: float = 0.0
    """Weight of the game result (+1 win, 0 draw or unfinished, -1 loss) added to the last action."""
    entropy_coef: float = 0.0
    """Weight of an entropy bonus in the policy loss (0: none)."""
    max_grad_norm: float = 1.0
    """Gradient clipping of both models."""
    legal_coef: float = 0.0
    """Weight of an auxiliary legal-move loss (-log of the probability mass on the legal moves of
    each action's position, :func:`chessrl.lm.legality.legal_move_loss`) added to the policy loss,
    like InstructGPT's PPO-ptx mixes in the pretraining loss. Negative advantages push a sampled
    token's probability onto the whole vocabulary, mostly illegal tokens that are never sampled
    back: on the demo, PPO alone lowered the sampled legal rate from 76% to 70%."""
    masked: bool = False
    """Sample the policy's moves from its distribution restricted to the legal moves (their
    tokens' logits renormalised), with the same masked log-probs for the behaviour policy, the
    learner and the reference: no illegal move is played, and ``legal_coef`` trains legality.
    """
    center_scores: bool = True
    """Subtract the mean score of the batch's legal moves from each legal move's score. Without
    it, a policy whose moves the reward model rates below its training average (a weak sft
    policy: -0.4 on the demo) earns a negative reward per move, so an early illegal move, which
    ends the episode, beats playing on: with gamma = 1 the illegal moves got the higher
    advantages and PPO taught the policy to play them (measured on the demo run)."""


@dataclass
class Action:
    """One policy move of an episode, as a collector records it (a row of a rollout shard)."""

    episode: str
    t: int
    prompt_ids: list[int]
    action_id: int
    move: str
    legal: bool
    logprob: float
    version: int
    score: float = 0.0
    """The reward model's normalised score of the move (0 for an illegal one)."""
    result: float = 0.0
    """The game's result from the policy's side, on the episode's last action (0 elsewhere)."""
    last: bool = False
    opponent: int = 0
    """Index of the episode's opponent in the configured pool."""


def last_token_logits(model: Any, rows: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
    """``(B, V)`` logits at each row's last token (right-padded batch, one forward pass)."""
    device = next(model.parameters()).device
    ids, mask = right_padded(rows, pad_id, device)
    last = torch.tensor([len(r) - 1 for r in rows], device=device)
    head = model.get_output_embeddings()
    if head is None:  # no separate head to apply: the full logits
        logits = model(input_ids=ids, attention_mask=mask).logits  # (B, width, V)
        return logits[torch.arange(len(rows), device=device), last].float()
    # the head on the last position only: (B, V) rather than (B, width, V)
    hidden = model.base_model(input_ids=ids, attention_mask=mask).last_hidden_state
    return head(hidden[torch.arange(len(rows), device=device), last]).float()


def action_logprobs(
    model: Any, rows: Sequence[Sequence[int]], actions: torch.Tensor, pad_id: int, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probability ``(B,)`` of each row's action token after its prompt, and the entropy
    ``(B,)`` of that next-token distribution; differentiable when grad is on."""
    logprob, entropy, _ = action_terms(model, rows, actions, pad_id, temperature)
    return logprob, entropy


def action_terms(
    model: Any,
    rows: Sequence[Sequence[int]],
    actions: torch.Tensor,
    pad_id: int,
    temperature: float = 1.0,
    legal_ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`action_logprobs` and the raw ``(B, V)`` logits they come from (one forward pass).
    With ``legal_ids`` (``(B, W)``, -1 padded) the log-probs and entropy are the masked policy's:
    the softmax over the legal moves alone."""
    raw = last_token_logits(model, rows, pad_id)
    if legal_ids is not None:
        from chessrl.lm.masked import masked_log_softmax

        legal_ids = legal_ids.to(raw.device)
        logp = masked_log_softmax(raw, legal_ids, temperature)
        valid = legal_ids >= 0
        finite = logp.masked_fill(~valid, 0.0)  # -inf padding times 0 would make the gradient NaN
        entropy = -(finite.exp() * finite * valid).sum(-1)
        index = (legal_ids == actions.view(-1, 1).to(raw.device)).float().argmax(-1, keepdim=True)
        return logp.gather(-1, index).squeeze(-1), entropy, raw
    logp = torch.log_softmax(raw / temperature, dim=-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return logp.gather(-1, actions.view(-1, 1).to(logp.device)).squeeze(-1), entropy, raw


def state_values(critic: Any, rows: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
    """``(B,)`` values of the states (a one-label sequence-classification model reads each row
    up to its last token); differentiable when grad is on."""
    ids, mask = right_padded(rows, pad_id, next(critic.parameters()).device)
    return critic(input_ids=ids, attention_mask=mask).logits[:, 0].float()


def sample_actions(
    model: Any,
    rows: Sequence[Sequence[int]],
    pad_id: int,
    temperature: float,
    generator: torch.Generator,
    legal: Sequence[Sequence[int]] | None = None,
) -> tuple[list[int], list[float]]:
    """One batched forward pass: a sampled next token per row and its log-probability; with
    ``legal`` (each row's legal move tokens) drawn from the masked policy."""
    with torch.no_grad():
        raw = last_token_logits(model, rows, pad_id)
        if legal is not None:
            from chessrl.lm.masked import masked_log_softmax, pad_ids

            table = pad_ids(legal)
            logp = masked_log_softmax(raw, table.to(raw.device), temperature).cpu()
            picks = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(-1)
            chosen = logp.gather(-1, picks.view(-1, 1)).squeeze(-1)
            return table.gather(-1, picks.view(-1, 1)).squeeze(-1).tolist(), chosen.tolist()
        logp = torch.log_softmax(raw / max(temperature, 1e-6), dim=-1)
        tokens = torch.multinomial(logp.exp().cpu(), 1, generator=generator).squeeze(-1)
    picked = logp.cpu().gather(-1, tokens.view(-1, 1)).squeeze(-1)
    return tokens.tolist(), picked.tolist()


#: An opponent chooses a move for each board it is given (batched; a random mover, a frozen
#: policy, Stockfish through the EnginePool).
Opponent = Callable[[Sequence[chess.Board]], list[chess.Move]]


def random_opponent(seed: int) -> Opponent:
    """A uniformly random legal mover."""
    rng = random.Random(seed)

    def choose(boards: Sequence[chess.Board]) -> list[chess.Move]:
        return [rng.choice(list(b.legal_moves)) for b in boards]

    return choose


@dataclass
class Episode:
    """A game in progress: the policy plays ``colour`` from ``moves`` (UCI from the start)."""

    name: str
    board: chess.Board
    colour: chess.Color
    opponent: int
    moves: list[str] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    done: bool = False


def result_for(board: chess.Board, colour: chess.Color) -> float:
    """+1 / -1 / 0 from ``colour``'s side for a finished game; 0 for an unfinished one."""
    outcome = board.outcome(claim_draw=True)
    if outcome is None or outcome.winner is None:
        return 0.0
    return 1.0 if outcome.winner == colour else -1.0


def play_episodes(
    policy: Any,
    tokenizer: Any,
    moves_table: MoveTokens,
    starts: Sequence[tuple[str, Sequence[str]]],
    opponents: Sequence[Opponent],
    settings: PPOSettings,
    max_actions: int,
    version: int,
    generator: torch.Generator,
    score: Callable[[list[tuple[list[str], str]]], list[float]],
    seed: int = 0,
    refresh: Callable[[], tuple[Any, int] | None] | None = None,
) -> list[Action]:
    """Play one episode per start ``(name, moves so far)`` at once: the policy moves for every
    game whose turn it is in one forward pass, the opponents answer, until each game ends, an
    illegal move, or ``max_actions`` policy moves. The policy plays the side to move at the
    start; opponents are taken in turn. ``score([(moves, move), ...])`` gives the reward model's
    normalised scores of the legal moves, batched per step. ``refresh()``, called between moves,
    returns ``(newer policy, its version)`` or None: each action records the version that chose
    it. Returns every action."""
    from chessrl.lm.models import prompt_ids

    fmt = MovesFormat()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    episodes = []
    for i, (name, moves) in enumerate(starts):
        board = chess.Board()
        for uci in moves:
            board.push_uci(uci)
        episodes.append(Episode(name, board, board.turn, i % max(1, len(opponents)), list(moves)))
    while True:
        live = [e for e in episodes if not e.done]
        if not live:
            break
        newer = refresh() if refresh is not None else None
        if newer is not None:
            policy, version = newer
        # the policy's turn in every live game (opponents answered at the end of the last step)
        rows = [prompt_ids(tokenizer, fmt.prompt(e.moves)) for e in live]
        legal = None
        if settings.masked:
            from chessrl.lm.masked import MaskedMoves

            masked = MaskedMoves(tokenizer)
            legal = [masked.legal_ids(e.board, bool(e.moves)) for e in live]
        tokens, logprobs = sample_actions(policy, rows, pad, settings.temperature, generator, legal)
        legal_queries: list[tuple[list[str], str]] = []
        owners: list[Action] = []
        for e, row, token, logprob in zip(live, rows, tokens, logprobs, strict=True):
            found = moves_table.move_of.get(token)
            move = found[0] if found else None
            legal = move is not None and move in e.board.legal_moves
            uci = move.uci() if move is not None else tokenizer.decode([token]).strip()
            action = Action(
                e.name, len(e.actions), row, token, uci, legal, logprob, version, opponent=e.opponent
            )
            e.actions.append(action)
            if legal:
                legal_queries.append((list(e.moves), uci))
                owners.append(action)
                e.board.push_uci(uci)
                e.moves.append(uci)
            else:
                e.done = True
        for action, value in zip(owners, score(legal_queries) if legal_queries else [], strict=True):
            action.score = value
        # the opponents answer, batched per opponent
        waiting = [e for e in live if not e.done and not e.board.is_game_over(claim_draw=True)]
        for k, opponent in enumerate(opponents):
            mine = [e for e in waiting if e.opponent == k]
            if mine:
                for e, reply in zip(mine, opponent([e.board for e in mine]), strict=True):
                    e.board.push(reply)
                    e.moves.append(reply.uci())
        for e in live:
            if e.done:
                continue
            if e.board.is_game_over(claim_draw=True) or len(e.actions) >= max_actions:
                e.done = True
    out = []
    for e in episodes:
        if e.actions:
            e.actions[-1].last = True
            if e.actions[-1].legal:
                e.actions[-1].result = result_for(e.board, e.colour)
        out.extend(e.actions)
    return out


def action_rewards(
    scores: Sequence[float],
    legal: Sequence[bool],
    logprobs: Sequence[float],
    ref_logprobs: Sequence[float],
    settings: PPOSettings,
    result: float,
) -> list[float]:
    """The rewards of one episode's actions: the normalised score minus ``kl_coef`` times the k1
    KL (behaviour log-prob minus the reference's), the penalty for an illegal move, the result
    (times ``result_weight``) on the last action. See the module docstring's example."""
    out = []
    for score, ok, lp, ref in zip(scores, legal, logprobs, ref_logprobs, strict=True):
        kl = lp - ref
        out.append((score if ok else settings.illegal_penalty) - settings.kl_coef * kl)
    if out:
        out[-1] += settings.result_weight * result
    return [round(r, 12) for r in out]


@dataclass
class Batch:
    """One iteration's experience as flat tensors over its N actions (episode order kept)."""

    rows: list[list[int]]
    actions: torch.Tensor  # (N,) token ids
    old_logprobs: torch.Tensor  # (N,)
    advantages: torch.Tensor  # (N,) whitened
    returns: torch.Tensor  # (N,)
    old_values: torch.Tensor  # (N,)
    rewards: torch.Tensor  # (N,)
    kl: torch.Tensor  # (N,) k1 to the reference
    legal: torch.Tensor  # (N,) bool
    legal_ids: torch.Tensor | None = None  # (N, W) legal move token ids of each position, -1 padded
    masked: bool = False  # log-probs are the masked policy's (over legal_ids)


def make_batch(
    actions: Sequence[Action],
    policy_ref: Any,
    critic: Any,
    pad_id: int,
    settings: PPOSettings,
    chunk: int = 64,
    moves_table: MoveTokens | None = None,
) -> Batch:
    """Reference log-probs and values for every action (no grad), the per-action rewards, and
    GAE over each episode's actions (returns before whitening, advantages whitened over all)."""
    by_episode: dict[str, list[Action]] = {}
    for a in actions:
        by_episode.setdefault(a.episode, []).append(a)
    episodes = [sorted(v, key=lambda a: a.t) for v in by_episode.values()]
    flat = [a for ep in episodes for a in ep]
    rows = [a.prompt_ids for a in flat]
    tokens = torch.tensor([a.action_id for a in flat])
    legal_ids = legal_move_ids(rows, tokens.tolist(), moves_table) if moves_table is not None else None
    if settings.masked and legal_ids is None:
        raise ValueError("masked PPO needs the move tokens (moves_table) to list each position's legal moves")
    masked = legal_ids if settings.masked else None
    with torch.no_grad():
        ref = torch.cat(
            [
                action_terms(
                    policy_ref, rows[i : i + chunk], tokens[i : i + chunk], pad_id, settings.temperature,
                    masked[i : i + chunk] if masked is not None else None,
                )[0]
                for i in range(0, len(rows), chunk)
            ]
        ).cpu()  # fmt: skip
    values = torch.tensor(score_ids(critic, rows, pad_id, chunk))
    old = torch.tensor([a.logprob for a in flat])
    legal_scores = [a.score for a in flat if a.legal]
    shift = sum(legal_scores) / len(legal_scores) if settings.center_scores and legal_scores else 0.0
    width = max(len(ep) for ep in episodes)
    rewards = torch.zeros(len(episodes), width)
    vals = torch.zeros(len(episodes), width)
    mask = torch.zeros(len(episodes), width)
    position = 0
    for e, ep in enumerate(episodes):
        n = len(ep)
        got = action_rewards(
            [a.score - shift for a in ep],
            [a.legal for a in ep],
            old[position : position + n].tolist(),
            ref[position : position + n].tolist(),
            settings,
            ep[-1].result,
        )
        rewards[e, :n] = torch.tensor(got)
        vals[e, :n] = values[position : position + n]
        mask[e, :n] = 1
        position += n
    whiten = int(mask.sum()) >= 2
    advantages, returns = compute_gae_advantage_return(
        rewards, vals, mask, settings.gamma, settings.lam, whiten
    )
    keep = mask.bool()
    return Batch(
        rows=rows,
        actions=tokens,
        old_logprobs=old,
        advantages=advantages[keep],
        returns=returns[keep],
        old_values=values,
        rewards=rewards[keep],
        kl=old - ref,
        legal=torch.tensor([a.legal for a in flat]),
        legal_ids=legal_ids,
        masked=settings.masked,
    )


def legal_move_ids(
    rows: Sequence[Sequence[int]], actions: Sequence[int], moves_table: MoveTokens
) -> torch.Tensor:
    """``(N, W)`` token ids of the legal moves after each prompt (``-1`` padded), in the form
    (space or not) of the action's token; a row whose action is not a move token has none."""
    from chessrl.lm.legality import legal_move_targets, pad_legal_targets

    flats, counts = [], []
    for row, action in zip(rows, actions, strict=True):
        flat, count = legal_move_targets([*row, action], moves_table, start_id=row[0])
        n = count[len(row) - 1]
        flats.append(flat[len(flat) - n :] if n else [])
        counts.append([n])
    return torch.from_numpy(pad_legal_targets(flats, counts)[:, 0, :])


def ppo_update(
    policy: Any,
    critic: Any,
    policy_opt: torch.optim.Optimizer | None,
    critic_opt: torch.optim.Optimizer,
    batch: Batch,
    pad_id: int,
    settings: PPOSettings,
    generator: torch.Generator,
) -> dict[str, float]:
    """``ppo_epochs`` passes of shuffled minibatches: the clipped surrogate (token-mean over the
    minibatch's actions; no policy step when ``policy_opt`` is None: critic warm-up) and the
    clipped value loss. Returns the mean of each diagnostic over the minibatch steps."""
    n = len(batch.rows)
    totals: dict[str, float] = {}
    steps = 0
    for _ in range(settings.ppo_epochs):
        order = torch.randperm(n, generator=generator).tolist()
        for i in range(0, n, settings.minibatch):
            idx = order[i : i + settings.minibatch]
            rows = [batch.rows[j] for j in idx]
            mask = torch.ones(len(idx), 1)
            metrics: dict[str, float] = {}
            if policy_opt is not None:
                logprob, entropy, raw = action_terms(
                    policy, rows, batch.actions[idx], pad_id, settings.temperature,
                    batch.legal_ids[idx] if batch.masked and batch.legal_ids is not None else None,
                )  # fmt: skip
                pg_loss, pg_metrics = compute_policy_loss(
                    batch.old_logprobs[idx].view(-1, 1).to(logprob.device),
                    logprob.view(-1, 1),
                    batch.advantages[idx].view(-1, 1).to(logprob.device),
                    mask.to(logprob.device),
                    clip_ratio_low=settings.clip,
                )
                loss = pg_loss - settings.entropy_coef * entropy.mean()
                if settings.legal_coef > 0 and batch.legal_ids is not None:
                    from chessrl.lm.legality import legal_move_loss

                    legal_ids = batch.legal_ids[idx].unsqueeze(1).to(raw.device)
                    legal_loss, mass = legal_move_loss(raw.unsqueeze(1), legal_ids)
                    loss = loss + settings.legal_coef * legal_loss
                    metrics.update(legal_loss=legal_loss.item(), legal_mass=mass.item())
                policy_opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(policy.parameters(), settings.max_grad_norm)
                policy_opt.step()
                metrics.update(
                    pg_loss=pg_loss.item(),
                    clipfrac=float(pg_metrics["pg_clipfrac"]),
                    approx_kl=float(pg_metrics["ppo_kl"]),
                    entropy=entropy.mean().item(),
                )
            values = state_values(critic, rows, pad_id)
            vf_loss, vf_clipfrac = compute_value_loss(
                values.view(-1, 1),
                batch.returns[idx].view(-1, 1).to(values.device),
                batch.old_values[idx].view(-1, 1).to(values.device),
                mask.to(values.device),
                cliprange_value=settings.value_clip,
            )
            critic_opt.zero_grad()
            vf_loss.backward()
            torch.nn.utils.clip_grad_norm_(critic.parameters(), settings.max_grad_norm)
            critic_opt.step()
            metrics.update(value_loss=vf_loss.item(), value_clipfrac=float(vf_clipfrac))
            for k, v in metrics.items():
                totals[k] = totals.get(k, 0.0) + v
            steps += 1
    out = {k: v / max(1, steps) for k, v in totals.items()}
    legal = batch.legal.float()
    out.update(
        reward_mean=batch.rewards.mean().item(),
        kl_to_ref=batch.kl.mean().item(),
        legal_rate=legal.mean().item(),
        explained_variance=float(
            explained_variance(batch.old_values.view(1, -1), batch.returns.view(1, -1), torch.ones(1, n))
        ),
        actions=float(n),
        legal_reward_mean=float(masked_mean(batch.rewards, batch.legal.float())) if n else 0.0,
    )
    return out


#: What ``ppo.opponents`` may name.
OPPONENTS_ALLOWED = "self, random, stockfish[:skill=N|elo=N|nodes=N|random=P,...]"


@dataclass(frozen=True)
class OpponentSpec:
    """One opponent of the pool: ``self`` (the policy as the collector last pulled it, sampled at
    the policy's temperature), ``random``, or ``stockfish[:...]`` (weak Stockfish, the player
    syntax of ``evaluate``).

    >>> parse_opponent("stockfish:skill=0").player.skill_level
    0
    """

    kind: Literal["self", "random", "stockfish"]
    text: str
    player: PlayerSpec | None = None


def parse_opponent(spec: str, key: str = "ppo.opponents (--opponents)") -> OpponentSpec:
    """Parse one opponent; anything else is a :class:`ConfigError` naming ``key`` and what is allowed."""
    text = spec.strip()
    if text in ("self", "random"):
        return OpponentSpec(text, text)  # type: ignore[arg-type]
    if text == "stockfish" or text.startswith("stockfish:"):
        return OpponentSpec("stockfish", text, parse_player_spec(text, key=key))
    raise ConfigError(f"{key}: unknown opponent {spec!r}; allowed: {OPPONENTS_ALLOWED}")


def policy_opponent(
    model: Any, tokenizer: Any, moves_table: MoveTokens, temperature: float, generator: torch.Generator
) -> Opponent:
    """The policy itself as an opponent: one batched forward pass for all boards, a sampled move
    each; an illegal sample is replaced by a random legal move (the opponent's moves are
    observations, never trained on)."""
    from chessrl.lm.models import prompt_ids

    fmt = MovesFormat()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    rng = random.Random(int(torch.randint(0, 2**31 - 1, (1,), generator=generator)))

    def choose(boards: Sequence[chess.Board]) -> list[chess.Move]:
        rows = [prompt_ids(tokenizer, fmt.prompt([m.uci() for m in b.move_stack])) for b in boards]
        tokens, _ = sample_actions(model, rows, pad, temperature, generator)
        out = []
        for board, token in zip(boards, tokens, strict=True):
            found = moves_table.move_of.get(token)
            move = found[0] if found else None
            out.append(
                move
                if move is not None and move in board.legal_moves
                else rng.choice(list(board.legal_moves))
            )
        return out

    return choose


def start_positions(
    games: Iterable[Mapping[str, Any]], n: int, *, seed: int, max_ply: int, prefix: str
) -> list[tuple[str, list[str]]]:
    """``n`` episode starts ``(name, moves so far)``: a seeded game of ``games`` (rows with a
    ``moves`` string of UCI moves) cut at a ply in ``[0, max_ply]`` where the game went on, so
    the side to move has a move; the start position when there are no games.

    >>> start_positions([{"moves": "e2e4 e7e5 g1f3"}], 2, seed=3, max_ply=1, prefix="c0")
    [('c0-0', []), ('c0-1', ['e2e4'])]
    """
    rng = random.Random(seed)
    pool = [str(g["moves"]).split() for g in games if g.get("moves")]
    out: list[tuple[str, list[str]]] = []
    for i in range(n):
        moves = rng.choice(pool) if pool else []
        ply = rng.randint(0, min(max_ply, len(moves) - 1)) if moves else 0
        out.append((f"{prefix}-{i}", moves[:ply]))
    return out


#: A rollout shard: one row per policy action (episode order kept).
ROLLOUT_SCHEMA = pa.schema(
    [
        ("episode", pa.string()),
        ("t", pa.int32()),
        ("prompt_ids", pa.list_(pa.int32())),
        ("action_id", pa.int32()),
        ("move", pa.string()),
        ("legal", pa.bool_()),
        ("logprob", pa.float64()),
        ("version", pa.int64()),
        ("score", pa.float64()),
        ("result", pa.float64()),
        ("last", pa.bool_()),
        ("opponent", pa.int32()),
    ]
)


def rollout_table(actions: Sequence[Action]) -> pa.Table:
    """Actions as a :data:`ROLLOUT_SCHEMA` table (see :func:`actions_from_rows` for the way back).

    >>> a = Action("g0", 0, [1, 5], 9, "e2e4", True, -0.5, 3, score=0.2, last=True)
    >>> actions_from_rows(rollout_table([a]).to_pylist()) == [a]
    True
    """
    rows = [asdict(a) for a in actions]
    return pa.Table.from_pylist(rows, schema=ROLLOUT_SCHEMA)


def actions_from_rows(rows: Iterable[Mapping[str, Any]]) -> list[Action]:
    """Rows of a rollout shard (``to_pylist()``, Ray Data rows) as :class:`Action` s."""
    names = [f.name for f in ROLLOUT_SCHEMA]
    out = []
    for r in rows:
        values = {k: r[k] for k in names}
        values["prompt_ids"] = [int(x) for x in values["prompt_ids"]]
        out.append(Action(**values))
    return out


def stale_episodes(actions: Sequence[Action], learner_version: int, max_staleness: int) -> set[str]:
    """Episodes with an action chosen by weights more than ``max_staleness`` versions older than
    the learner's (the learner drops them whole: GAE needs every action of an episode).

    >>> a = [Action("x", 0, [1], 2, "e2e4", True, 0.0, 1), Action("y", 0, [1], 2, "e2e4", True, 0.0, 3)]
    >>> stale_episodes(a, learner_version=4, max_staleness=2)
    {'x'}
    """
    return {a.episode for a in actions if learner_version - a.version > max_staleness}


def ppo_iteration(
    policy: Any,
    reference: Any,
    critic: Any,
    policy_opt: torch.optim.Optimizer | None,
    critic_opt: torch.optim.Optimizer,
    tokenizer: Any,
    moves_table: MoveTokens,
    starts: Sequence[tuple[str, Sequence[str]]],
    opponents: Sequence[Opponent],
    settings: PPOSettings,
    max_actions: int,
    version: int,
    generator: torch.Generator,
    score: Callable[[list[tuple[list[str], str]]], list[float]],
) -> dict[str, float]:
    """One PPO iteration in one process, with no Ray: play the episodes, score them, train. The
    baseline of ``bench/rl_step.py``; the phase runs the same steps on collectors and a learner."""
    import time

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    started = time.perf_counter()
    policy.eval()
    actions = play_episodes(
        policy, tokenizer, moves_table, starts, opponents, settings, max_actions, version, generator, score
    )
    played = time.perf_counter()
    critic.eval()  # dropout off in both models throughout, as in the phase
    batch = make_batch(actions, reference, critic, pad, settings, moves_table=moves_table)
    metrics = ppo_update(policy, critic, policy_opt, critic_opt, batch, pad, settings, generator)
    done = time.perf_counter()
    metrics.update(play_s=played - started, learn_s=done - played, episodes=float(len(starts)))
    return metrics

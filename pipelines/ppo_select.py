"""``ppo.select_every``: ppo keeps the policy that plays best against its start, not simply the last.

PPO against a learned judge can overshoot: the judge's errors take over once the policy has
learned what the judge gets right (docs/results.md, "judge-chain-seed-11": the same run beat its
start at iteration 50, Elo +47, and lost to it at iteration 100, Elo -66). So with
``select_every`` the learner saves the policy every that many iterations and at the end
(``ppo/candidates/iteration-N``, :func:`pipelines.learner.ppo.export_candidate`), and after
training :func:`select_policy` plays each candidate against the start, ``select_games`` games
each, and copies the best scorer into ``ppo/model``::

    selection = select_policy(context, start_path)   # in run_ppo, after the learner is done
    selection["kept"], [c["score"] for c in selection["candidates"]]

The games are the SPRT's kind (both players masked, Stockfish adjudicating at ``select_max_plies``:
ahead by 300 centipawns wins) from openings of **training** games, so the held-out openings an SPRT
decides on afterwards are not the ones the choice was made on. Each match's games are written
under ``ppo/select/iteration-N`` as they finish: a re-run plays only the missing ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pipelines.common.phase import PhaseContext
from pipelines.learner.ppo import CANDIDATE_LAST_FILE, candidate_folder

#: Selection games reaching ``select_max_plies`` go to the side Stockfish puts this far ahead.
ADJUDICATE_CP = 300


def candidate_iterations(select_every: int, iterations: int, last: int) -> list[int]:
    """The iterations whose policies are candidates: every ``select_every`` up to ``iterations``,
    and ``last`` (the iteration the learner ended at, earlier on a time limit).

    >>> candidate_iterations(25, 100, 100)
    [25, 50, 75, 100]
    >>> candidate_iterations(25, 100, 60)
    [25, 50, 60]
    """
    return sorted({*range(select_every, min(iterations, last) + 1, select_every), last} - {0})


def best_candidate(scores: Sequence[tuple[int, float]]) -> int:
    """The iteration with the highest score against the start; ties go to the earlier one (the
    one nearer the start).

    >>> best_candidate([(25, 0.55), (50, 0.6), (75, 0.6), (100, 0.4)])
    50
    """
    return max(scores, key=lambda s: (s[1], -s[0]))[0]


def selection_openings(context: PhaseContext, n: int) -> list[Any]:
    """``n`` openings at plies 6-12 of the training games (seeded), or seeded random ones (4
    plies) when there is no games table."""
    from chessrl.arena.game import heldout_openings, random_openings
    from pipelines.ppo import training_games

    seed = context.config.run.seed + 17
    games = training_games(context, context.config.ppo, seed) or []
    openings = heldout_openings([{"moves": " ".join(m)} for m in games[:2000]], n, seed)
    return openings or random_openings(n, 4, seed)


def select_policy(context: PhaseContext, start_path: str) -> dict[str, Any]:
    """Play each saved candidate against the start (``select_games`` games each), copy the best
    into ``ppo/model``; the record the summary keeps (``candidates``: iteration, games, wins,
    draws, losses, score; ``kept``; ``beat_start``: the kept one scored above half)."""
    import json
    import time

    from actors.engine_pool import EnginePool
    from chessrl.arena.batched_arena import match_record
    from chessrl.arena.players import parse_player_spec
    from pipelines.evaluate_matches import POOL_CPUS_PER_ENGINE, Settings, schedule_pairs, sized_arena

    cfg, run = context.config.ppo, context.config.run
    phase = context.phase_storage("ppo")
    state = json.loads(phase.read_text("learner_state.json")) if phase.exists("learner_state.json") else {}
    last = int(state.get("iteration", cfg.iterations))
    iterations = [
        i
        for i in candidate_iterations(cfg.select_every, cfg.iterations, last)
        if phase.exists(f"{candidate_folder(i)}/{CANDIDATE_LAST_FILE}")  # saved whole
    ]
    openings = selection_openings(context, (cfg.select_games + 1) // 2)
    start = parse_player_spec(f"lm:{start_path},masked", key="ppo.policy")
    settings = Settings(  # the SPRT's players: greedy, masked; Stockfish only adjudicates
        sft_model=None,
        selfplay_best=None,
        lm_temperature=0.0,
        lm_retries=3,
        on_illegal="fallback",
        stockfish_nodes=1000,
        max_plies=cfg.select_max_plies,
        resign_cp=None,
        resign_plies=6,
        adjudicate_cp=ADJUDICATE_CP,
    )
    started = time.perf_counter()
    pool = EnginePool.spread(
        1, run=f"{run.name}-ppo-select", num_cpus_per_engine=POOL_CPUS_PER_ENGINE, key="ppo.select_every"
    )
    rows = []
    try:
        arena = sized_arena(settings, pool, None, context.log)
        for i in iterations:
            spec = parse_player_spec(f"lm:{_local(phase.child(candidate_folder(i)))},masked", key="ppo")
            tasks = schedule_pairs([(spec, start)], cfg.select_games, openings, run.seed + i)
            games = arena.play(tasks, phase.child(f"select/iteration-{i:04d}"), f"select iteration {i}")
            wins, draws, losses = match_record(list(games.values()), spec.label)
            score = (wins + draws / 2) / max(1, len(games))
            row = {"iteration": i, "games": len(games), "wins": wins, "draws": draws, "losses": losses}
            rows.append({**row, "score": score})
            context.log(f"select: iteration {i} against the start +{wins} ={draws} -{losses} ({score:.1%})")
    finally:
        pool.shutdown()
    if not rows:
        return {}
    kept = best_candidate([(r["iteration"], r["score"]) for r in rows])
    source = phase.child(candidate_folder(kept))
    for name in source.list_files():
        phase.child("model").write_bytes(name, source.read_bytes(name))
    score = next(r["score"] for r in rows if r["iteration"] == kept)
    seconds = time.perf_counter() - started
    context.log(
        f"select: the policy of iteration {kept} is the model ({score:.1%}); {seconds:.0f} s of games"
        + ("" if score > 0.5 else "; no candidate scored above half against the start")
    )
    return {
        "seconds": round(seconds, 1),
        "candidates": rows,
        "kept": kept,
        "beat_start": score > 0.5,
        "games_each": cfg.select_games,
        "max_plies": cfg.select_max_plies,
    }


def selection_line(selection: dict[str, Any]) -> str:
    """The summary's line: which iteration was kept and every candidate's score.

    >>> selection_line({"kept": 50, "beat_start": True, "candidates": [
    ...     {"iteration": 25, "score": 0.5, "games": 40}, {"iteration": 50, "score": 0.6, "games": 40}]})
    'kept iteration 50 (60.0% of 40 games against the start; iteration 25: 50.0%, 50: 60.0%)'
    """
    rows = selection["candidates"]
    kept = next(r for r in rows if r["iteration"] == selection["kept"])
    scores = ", ".join(f"{r['iteration']}: {r['score']:.1%}" for r in rows)
    note = "" if selection["beat_start"] else "; none scored above half"
    return f"kept iteration {kept['iteration']} ({kept['score']:.1%} of {kept['games']} games against the start; iteration {scores}){note}"


def _local(folder: Any) -> str:
    return folder.root if folder.is_local else folder.uri

"""What ``evaluate`` writes and prints: the markdown report, the plots and the summary lines, for
arenas (gauntlet, round robin, the low Elo ladder) and for SPRT matches. Ray-free.

No report, plot or line shows ``nan`` or ``inf``: an estimate with no finite value is written as
its one-sided bound, and an interval with one open end says so.

>>> fmt_estimate(-382.2, -math.inf, -11.6)
'-382 (at most -12)'
>>> fmt_estimate(-math.inf, -math.inf, 211.4, signed=False)
'below 211 (one-sided 95%)'
>>> fmt_estimate(12.0, -40.4, 61.0)
'+12 (-40 .. +61)'

No interval is printed with zero width either: the ends get as many decimals as keep them apart,
and a rating held fixed (an anchor, ``low == high``) says so.

>>> fmt_estimate(0.1, -0.2, 0.3)
'+0.1 (-0.2 .. +0.3)'
>>> fmt_estimate(1350.0, 1350.0, 1350.0, signed=False)
'1350 (fixed)'
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chessrl.arena.paired_report import paired_markdown as paired_markdown
from chessrl.arena.paired_report import paired_summary_lines as paired_summary_lines
from chessrl.arena.rating import match_elo, rate_players, score_interval

if TYPE_CHECKING:
    from chessrl.arena.game import ArenaGame


def _num(value: float, signed: bool, digits: int = 0) -> str:
    value = 0.0 if abs(value) < 0.5 * 10**-digits else value  # no "-0"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def _digits(low: float, high: float, signed: bool) -> int:
    """The fewest decimals that print ``low < high`` as two numbers at least two units of the
    last digit apart (0 for any interval 2 Elo wide or more)."""
    return next(
        (d for d in range(12) if 2 * 10**-d <= high - low and _num(low, signed, d) != _num(high, signed, d)),
        12,
    )


def fmt_estimate(elo: float, low: float, high: float, *, signed: bool = True) -> str:
    """An Elo (difference, when ``signed``) with its 95% interval, in words where an end is open;
    never a zero-width interval: a fixed rating (``low == high``) is written "(fixed)"."""
    if math.isfinite(elo) and low == high:
        return f"{_num(elo, signed)} (fixed)"
    if not math.isfinite(elo):
        if math.isfinite(high):
            return f"below {_num(high, signed)} (one-sided 95%)"
        if math.isfinite(low):
            return f"above {_num(low, signed)} (one-sided 95%)"
        return "not estimated (no game against a rated player decides it)"
    text = _num(elo, signed)
    if math.isfinite(low) and math.isfinite(high):
        d = _digits(low, high, signed)
        return f"{_num(elo, signed, d)} ({_num(low, signed, d)} .. {_num(high, signed, d)})"
    if math.isfinite(high):
        return f"{text} (at most {_num(high, signed)})"
    if math.isfinite(low):
        return f"{text} (at least {_num(low, signed)})"
    return text


def _rating(r: dict[str, Any]) -> str:
    if r.get("anchored"):
        return f"{_num(r['elo'], False)} (fixed)"
    return fmt_estimate(r["elo"], r["low"], r["high"], signed=False)


def _rung(label: str, elo: float, low: float, high: float) -> str:
    """A ladder rung's rating: the anchored rung is fixed; a rung that won or lost every
    calibration game is stored at its one-sided bound (``low == high``), which has no interval."""
    if low != high:
        return fmt_estimate(elo, low, high, signed=False)
    from chessrl.arena.players import parse_player_spec
    from cluster.errors import ConfigError

    try:
        anchored = parse_player_spec(label).anchor_elo is not None
    except ConfigError:  # a label that is not a spec is no anchor
        anchored = False
    return f"{_num(elo, False)} " + ("(fixed)" if anchored else "(a one-sided 95% bound; no interval)")


# ---------------------------------------------------------------------------------------------
# arenas (gauntlet, round robin, ladder)


def openings_text(openings: str | Mapping[str, Any]) -> str:
    """Where a match's openings came from, from evaluate's ``openings`` record (a text as it is).

    >>> openings_text({"source": "heldout", "seed": 7, "plies": [6, 12], "from": "runs/a/prepare/games", "count": 120})
    '120 positions at plies 6-12 of held-out games of runs/a/prepare/games, seed 7'
    >>> openings_text({"source": "random", "seed": 7, "plies": 4, "from": None, "count": 10})
    '10 positions of 4 seeded random plies, seed 7'
    """
    if isinstance(openings, str):
        return openings
    n, seed, plies = openings.get("count"), openings.get("seed"), openings.get("plies")
    if openings.get("source") == "heldout":
        lo, hi = plies or ("?", "?")
        return f"{n} positions at plies {lo}-{hi} of held-out games of {openings.get('from')}, seed {seed}"
    if openings.get("source") == "book":
        return f"{n} positions of the book {openings.get('from')}"
    why = f" (no held-out openings: {openings['fallback']})" if openings.get("fallback") else ""
    return f"{n} positions of {plies} seeded random plies, seed {seed}{why}"


def training_lines(results: Mapping[str, Any]) -> list[str]:
    """The report's lines on whom each model trained against in its own games, and the notes."""
    lines = [
        f"- `{label}` trained against {', '.join(f'`{o}`' for o in opponents)} in its own games "
        "(grpo.own_opponent)"
        for label, opponents in (results.get("training_opponents") or {}).items()
    ]
    lines += [f"- {note}" for note in results.get("notes") or []]
    return ["", *lines] if lines else []


def report_markdown(
    results: dict[str, Any], mode: str, max_plies: int, openings: str | Mapping[str, Any]
) -> str:
    """The arena report: scores per opponent, Elo, the ladder, the candidate's moves, suites."""
    c = results["candidate"]
    lines = [
        f"# Evaluation of `{c}`",
        "",
        f"{results['games']} games, {mode}; max {max_plies} plies.",
        "",
        f"Openings: {openings_text(openings)}.",
        *training_lines(results),
        "",
        "## Score against each opponent",
        "",
        "| opponent | games | W | D | L | score | Elo difference (95% interval) |",
        "|---|---|---|---|---|---|---|",
    ]
    for opp, p in results["pairings"].items():
        lines.append(
            f"| {opp} | {p['games']} | {p['wins']} | {p['draws']} | {p['losses']} | {p['score']:.1%} | "
            f"{fmt_estimate(p['elo_diff'], p['elo_low'], p['elo_high'])} |"
        )
    if results.get("other_pairings"):
        lines += [
            "",
            "## The other pairings (the first named player's side)",
            "",
            "| pairing | games | W | D | L | score | Elo difference (95% interval) |",
            "|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {pair} | {p['games']} | {p['wins']} | {p['draws']} | {p['losses']} | {p['score']:.1%} | "
            f"{fmt_estimate(p['elo_diff'], p['elo_low'], p['elo_high'])} |"
            for pair, p in results["other_pairings"].items()
        ]
    lines += _ratings_section(results)
    if results.get("ladder"):
        lines += _ladder_section(results["ladder"])
    lines += _moves_section(results)
    lines += ["", "![score](score.png)", "", "![elo](elo.png)", ""]
    return "\n".join(lines)


def _ratings_section(results: dict[str, Any]) -> list[str]:
    """:func:`report_markdown`'s Elo table, or why there is none."""
    ratings = results["ratings"]
    if ratings and "error" not in ratings:
        anchors = ", ".join(results["anchors"]) or "none"
        lines = [
            "",
            f"## Elo (maximum likelihood over all games; fixed: {anchors})",
            "",
            "| player | Elo (95% interval) | games | score | fixed |",
            "|---|---|---|---|---|",
        ]
        for name, r in ratings.items():
            lines.append(
                f"| {name} | {_rating(r)} | {r['games']} | {r['score']:.1%} | {'yes' if r['anchored'] else ''} |"
            )
        return lines
    if ratings:
        return ["", f"Elo: not estimated ({ratings['error']})."]
    return ["", "Elo: no anchored player was played (add stockfish:elo=1350, or keep --ladder on)."]


def _ladder_section(lad: dict[str, Any]) -> list[str]:
    """:func:`report_markdown`'s low Elo ladder: how its rungs were rated, and their ratings."""
    lines = [
        "",
        "## The low Elo ladder",
        "",
        f"Rungs rated once with {lad['stockfish']} from {lad['games']} games between neighbours "
        f"and reused (ratings fixed here); {lad['candidate_games']} of the candidate's games were "
        f"against rungs ({lad['placement_games']} placement, {lad['match_games']} more against "
        f"{', '.join(lad['informative']) or 'none'}).",
        "",
        "| rung | Elo (95% interval) |",
        "|---|---|",
    ]
    for label, (elo, low, high) in sorted(lad["ratings"].items(), key=lambda kv: kv[1][0]):
        lines.append(f"| {label} | {_rung(label, elo, low, high)} |")
    return lines


def _moves_section(results: dict[str, Any]) -> list[str]:
    """:func:`report_markdown`'s candidate's moves (legality, fallbacks, quality) and test suites."""
    m = results["candidate_moves"]
    lines = [
        "",
        "## The candidate's moves",
        "",
        f"- moves: {m['moves']}; legal at the first attempt: {m['legal_rate']:.1%} (unmasked)",
        f"- illegal or unparseable attempts: {m['illegal_attempts']}; random fallbacks: {m['fallbacks']}",
    ]
    if results["quality"]:
        q = results["quality"]
        lines.append(
            f"- average centipawn loss {q['acpl']:.0f}, accuracy {q['accuracy']:.1f}% over {q['moves']} moves ({q.get('nodes')} nodes)"
        )
    if results["suites"]:
        lines += [
            "",
            "## Test suites (bm/am, one move from the FEN)",
            "",
            "| suite | positions | solved | accuracy | legal |",
            "|---|---|---|---|---|",
        ]
        for s in results["suites"]:
            lines.append(
                f"| {s['name']} | {s['positions']} | {s['solved']} | {s['accuracy']:.1%} | {s['legal_first_attempt'] / max(1, s['positions']):.1%} |"
            )
    return lines


def plot(results: dict[str, Any], folder: Path) -> list[Path]:
    """``score.png`` (score per opponent) and ``elo.png`` (every rated player; an open interval
    end is drawn as an arrow, an estimate with no finite value at its bound)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    opponents = list(results["pairings"])
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for i, opp in enumerate(opponents):
        p = results["pairings"][opp]
        score, low, high = score_interval(p["wins"], p["draws"], p["losses"])  # the Elo column's interval
        ax.errorbar(i, score, yerr=[[score - low], [high - score]], fmt="o", capsize=4)
    ax.set_xticks(range(len(opponents)), opponents, rotation=20, ha="right", fontsize=8)
    ax.set_ylim(-0.05, 1.05)
    ax.axhline(0.5, color="grey", lw=0.5)
    ax.set_ylabel(f"score of {results['candidate']}")
    ax.set_title("Score against each opponent (95% interval)")
    fig.tight_layout()
    paths.append(folder / "score.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 3.8))
    ratings = {k: v for k, v in results["ratings"].items() if k != "error"}
    shown = []
    for name, r in ratings.items():
        finite = [x for x in (r["low"], r["elo"], r["high"]) if math.isfinite(x)]
        if not finite:
            continue
        i = len(shown)
        shown.append(name)
        mid = r["elo"] if math.isfinite(r["elo"]) else finite[0]
        lo = mid - r["low"] if math.isfinite(r["low"]) else 0.0
        hi = r["high"] - mid if math.isfinite(r["high"]) else 0.0
        if r["anchored"]:  # a fixed rating: a square, no interval
            ax.plot(i, mid, "s")
            continue
        ax.errorbar(i, mid, yerr=[[lo], [hi]], fmt="o", capsize=4)
        if not math.isfinite(r["low"]):
            ax.annotate("", (i, mid - 150), (i, mid), arrowprops={"arrowstyle": "->"})
        if not math.isfinite(r["high"]):
            ax.annotate("", (i, mid + 150), (i, mid), arrowprops={"arrowstyle": "->"})
    ax.set_xticks(range(len(shown)), shown, rotation=25, ha="right", fontsize=7)
    ax.set_ylabel("Elo")
    ax.set_title("Elo (squares: fixed; arrows: open-ended)" if shown else "Elo: no anchored player played")
    fig.tight_layout()
    paths.append(folder / "elo.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)
    return paths


def summary_lines(results: dict[str, Any], report_uri: str, pgn_uri: str) -> list[str]:
    """The arena's summary, as the driver prints it."""
    c = results["candidate"]
    lines = ["evaluate summary", f"  candidate     {c}, {results['games']} games"]
    for opp, p in results["pairings"].items():
        lines.append(
            f"  vs {opp:<24} +{p['wins']} ={p['draws']} -{p['losses']}  score {p['score']:.1%}  "
            f"Elo diff {fmt_estimate(p['elo_diff'], p['elo_low'], p['elo_high'])}"
        )
    for pair, p in results.get("other_pairings", {}).items():  # round_robin, --pairs without the candidate
        lines.append(
            f"  {pair:<27} +{p['wins']} ={p['draws']} -{p['losses']}  score {p['score']:.1%}  "
            f"Elo diff {fmt_estimate(p['elo_diff'], p['elo_low'], p['elo_high'])}"
        )
    if c in results["ratings"]:
        rungs = set(results["ladder"]["ratings"]) if results.get("ladder") else set()
        fixed = [a for a in results["anchors"] if a not in rungs]
        fixed += [f"{len(rungs & set(results['anchors']))} ladder rungs"] if rungs else []
        lines.append(f"  Elo           {_rating(results['ratings'][c])}, fixed: {', '.join(fixed)}")
    if results.get("ladder"):
        lad = results["ladder"]
        lines.append(
            f"  ladder        {len(lad['ratings'])} rungs ({lad['calibration_played']} calibration games played "
            f"now, {lad['games']} in all); {lad['candidate_games']} candidate games against rungs"
        )
    m = results["candidate_moves"]
    lines.append(
        f"  moves         {m['legal_rate']:.1%} legal at the first attempt, {m['illegal_attempts']} illegal attempts, {m['fallbacks']} fallbacks"
    )
    if results["quality"]:
        q = results["quality"]
        lines.append(f"  quality       ACPL {q['acpl']:.0f}, accuracy {q['accuracy']:.1f}%")
    for s in results["suites"]:
        lines.append(f"  suite         {s['name']}: {s['solved']}/{s['positions']} ({s['accuracy']:.1%})")
    lines.append(f"  report        {report_uri}  (PGN: {pgn_uri})")
    return lines


# ---------------------------------------------------------------------------------------------
# SPRT


def sprt_markdown(results: dict[str, Any]) -> str:
    """The SPRT report: the hypotheses, the decision, the pentanomial counts, the Elo difference."""
    s = results["sprt"]
    a, b = results["players"]
    verdict = {
        "H1": f"H1 accepted: `{a}` is stronger by about {s['elo1']:+g} Elo or more",
        "H0": f"H0 accepted: `{a}` is not stronger than `{b}` by {s['elo1']:+g} Elo",
        "continue": f"no decision after {s['games']} games (the --games limit)",
    }[s["decision"]]
    lines = [
        f"# SPRT: `{a}` against `{b}`",
        "",
        f"H0: Elo difference {s['elo0']:+g}; H1: {s['elo1']:+g}; alpha {s['alpha']:g}, beta {s['beta']:g}; "
        f"game pairs from one opening with colours swapped, at most {s['max_games']} games.",
        "",
        *([f"Openings: {openings_text(results['openings'])}.", ""] if results.get("openings") else []),
        *(training_lines(results)[1:] + [""] if training_lines(results) else []),
        f"**{verdict}.**",
        "",
        f"- LLR {s['llr']:.2f} (bounds {s['lower']:.2f} .. {s['upper']:.2f}) after {s['pairs']} pairs ({s['games']} games)",
        f"- pentanomial (pairs scoring 0, 0.5, 1, 1.5, 2 for `{a}`): {tuple(s['pentanomial'])}",
        f"- games from `{a}`'s side: +{s['wins']} ={s['draws']} -{s['losses']}, score {s['score']:.1%}",
        f"- Elo difference {fmt_estimate(s['elo'], s['elo_low'], s['elo_high'])} (95%, from the pairs' variance)",
        "",
        "![LLR](llr.png)",
        "",
    ]
    return "\n".join(lines)


def sprt_plot(results: dict[str, Any], folder: Path) -> list[Path]:
    """``llr.png``: the LLR after each game pair, with the two stopping bounds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = results["sprt"]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    xs = list(range(1, len(s["trajectory"]) + 1))
    ax.plot(xs, s["trajectory"], marker="." if len(xs) < 60 else None)
    for bound, label in ((s["upper"], "H1"), (s["lower"], "H0")):
        ax.axhline(bound, color="grey", ls="--", lw=0.8)
        ax.text(0.5, bound, f" {label}", va="bottom", fontsize=8)
    ax.set_xlabel("game pairs")
    ax.set_ylabel("LLR")
    ax.set_title(f"SPRT [{s['elo0']:+g}, {s['elo1']:+g}]: {s['decision']}")
    fig.tight_layout()
    path = folder / "llr.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return [path]


def sprt_summary_lines(results: dict[str, Any], report_uri: str) -> list[str]:
    s = results["sprt"]
    a, b = results["players"]
    return [
        "evaluate summary (sprt)",
        f"  players       {a} against {b}",
        f"  decision      {s['decision']} (LLR {s['llr']:.2f}, bounds {s['lower']:.2f} .. {s['upper']:.2f}; "
        f"H0 {s['elo0']:+g}, H1 {s['elo1']:+g})",
        f"  games         {s['games']} in {s['pairs']} pairs: +{s['wins']} ={s['draws']} -{s['losses']}, "
        f"score {s['score']:.1%}, pentanomial {tuple(s['pentanomial'])}",
        f"  Elo diff      {fmt_estimate(s['elo'], s['elo_low'], s['elo_high'])}",
        f"  report        {report_uri}",
    ]


# ---------------------------------------------------------------------------------------------
# the head-to-head comparison of a round robin (rlaif's last phase)


def pairing_counts(games: Sequence[ArenaGame]) -> dict[tuple[str, str], list[int]]:
    """``(player, opponent) -> [wins, draws, losses]`` from the player's side, both ways round."""
    cells: dict[tuple[str, str], list[int]] = {}
    for g in games:
        s = g.score_for(g.white)
        for p, q, mine in ((g.white, g.black, s), (g.black, g.white, 1 - s)):
            cells.setdefault((p, q), [0, 0, 0])[0 if mine == 1 else 1 if mine == 0.5 else 2] += 1
    return cells


def other_pairings(players: Sequence[str], games: Sequence[ArenaGame]) -> dict[str, dict[str, Any]]:
    """The pairings without the candidate (``players[0]``) that ``round_robin`` or ``--pairs 1-2``
    played: ``"A vs B"`` (A named first in ``players``) -> A's wins, draws, losses, score and Elo
    difference with its 95% interval.

    >>> from chessrl.arena.game import ArenaGame
    >>> g = ArenaGame(white="random", black="lm:b", result="0-1", termination="checkmate", moves=[])
    >>> other_pairings(["lm:a", "lm:b", "random"], [g, g])["lm:b vs random"]["wins"]
    2
    """
    cells = pairing_counts([g for g in games if players[0] not in (g.white, g.black)])
    out: dict[str, dict[str, Any]] = {}
    for i, first in enumerate(players):
        for second in players[i + 1 :]:
            if (first, second) in cells:
                wins, draws, losses = cells[(first, second)]
                est = match_elo(wins, draws, losses)
                out[f"{first} vs {second}"] = {
                    "wins": wins,
                    "draws": draws,
                    "losses": losses,
                    "games": est.games,
                    "score": est.score,
                    "elo_diff": est.elo,
                    "elo_low": est.low,
                    "elo_high": est.high,
                }
    return out


def comparison_lines(
    games: Sequence[ArenaGame], players: Sequence[str], labels: Mapping[str, str], anchor: str = "random"
) -> list[str]:
    """The table that says whether RL helped: per player its games, score, legal-move rate at the
    first attempt (language models only) and Elo with its 95% interval (``anchor`` at 0; a draw
    counts half), then each pairing's result from the row player's side.

    >>> from chessrl.arena.game import ArenaGame
    >>> def game(w, b, r):
    ...     return ArenaGame(white=w, black=b, result=r, termination="checkmate", moves=[],
    ...                      first_attempt_legal={"white": 8, "black": 0}, player_moves={"white": 10, "black": 10})
    >>> games = [game("lm:a", "random", "1-0"), game("random", "lm:a", "1/2-1/2")] * 3
    >>> for line in comparison_lines(games, ["lm:a", "random"], {"lm:a": "ppo"}):
    ...     print(line)
    player  games  score  legal 1st  Elo (random = 0)
    ppo         6  75.0%      40.0%  +191 (-130 .. +512)
    random      6  25.0%          -  +0 (anchor)
    <BLANKLINE>
    row vs column  ppo        random
    ppo            -          +3 =3 -0
    random         +0 =3 -3   -
    """

    def name(player: str) -> str:
        return labels.get(player, player)

    rated: dict[str, Any] = {}
    if anchor in players and games:
        try:
            rated = rate_players([(g.white, g.black, g.score_for(g.white)) for g in games], {anchor: 0.0})
        except ValueError:  # a player cut off from the anchor: no Elo for anyone
            rated = {}
    width = max(len(name(p)) for p in players)
    lines = [f"{'player':<{width}}  games  score  legal 1st  Elo ({name(anchor)} = 0)"]
    for player in players:
        mine = [g for g in games if player in (g.white, g.black)]
        score = sum(g.score_for(player) for g in mine) / len(mine) if mine else float("nan")
        sides = [("white" if g.white == player else "black", g) for g in mine]
        moves = sum(g.player_moves.get(side, 0) for side, g in sides)
        first = sum(g.first_attempt_legal.get(side, 0) for side, g in sides)
        legal = f"{first / moves:.1%}" if player.startswith(("lm:", "sft")) and moves else "-"
        r = rated.get(player)
        elo = "-" if r is None else ("+0 (anchor)" if r.anchored else fmt_estimate(r.elo, r.low, r.high))
        lines.append(f"{name(player):<{width}}  {len(mine):>5}  {score:>5.1%}  {legal:>9}  {elo}")
    cells = pairing_counts(games)
    col = max(width, 9)
    lines += [
        "",
        f"{'row vs column':<{max(width, 13)}}  " + "  ".join(f"{name(q):<{col}}" for q in players).rstrip(),
    ]
    for p in players:
        row = [("+{} ={} -{}".format(*cells[(p, q)]) if p != q and (p, q) in cells else "-") for q in players]
        lines.append(f"{name(p):<{max(width, 13)}}  " + "  ".join(f"{c:<{col}}" for c in row).rstrip())
    return lines


def rl_story_lines(
    games: Sequence[ArenaGame],
    labels: Mapping[str, str],
    starts: Mapping[str, str],
    quality: Mapping[str, Mapping[str, Any]],
    anchor: str = "random",
) -> list[str]:
    """What RL did, in a few lines a newcomer reads in ten seconds: per RL policy (the keys of
    ``starts``, player -> its start's player) its paired move-quality gain over its start on
    held-out positions (``quality``: the phase summary's ``quality``, by player), its score
    against its start and against ``anchor`` (a random mover), then each start against the
    anchor, and one line saying which of these figures are significant (95%) at this size.
    ``labels``: player -> the name printed.

    >>> from chessrl.arena.game import ArenaGame
    >>> def game(w, b, r):
    ...     return ArenaGame(white=w, black=b, result=r, termination="checkmate", moves=[])
    >>> games = [game("lm:g", "lm:s", "1-0"), game("lm:s", "lm:g", "1/2-1/2"), game("lm:g", "random", "1-0"),
    ...          game("random", "lm:g", "0-1"), game("lm:s", "random", "1-0"), game("random", "lm:s", "1-0")]
    >>> q = {"lm:g": {"gain": 0.0162, "low": 0.0070, "high": 0.0254, "positions": 1000}}
    >>> for line in rl_story_lines(games, {"lm:g": "grpo", "lm:s": "sft"}, {"lm:g": "lm:s"}, q):
    ...     print(line)
    What RL did: each RL policy against its own start (95% intervals)
      policy  start  move quality on held-out positions   vs its start       vs random
      grpo    sft    +0.0162 [+0.0070, +0.0254] better    75.0% (+1 =1 -0)   100.0% (+2 =0 -0)
      sft     -                                           -                  50.0% (+1 =0 -1)
      significant: grpo's move quality (better). Not significant: every game score (2 games a pairing).
    """

    def name(player: str) -> str:
        return labels.get(player, player)

    cells = pairing_counts(games)
    pairs = [*starts.items(), *((p, anchor) for p in [*starts, *dict.fromkeys(starts.values())])]
    matches = {pair: match_elo(*cells[pair]) for pair in pairs if pair in cells}  # the games each pair played

    def record(a: str, b: str) -> str:
        est = matches.get((a, b))
        return "-" if est is None else f"{est.score:.1%} (+{est.wins} ={est.draws} -{est.losses})"

    rows, significant, not_significant = [], [], []
    for player, start in starts.items():
        q = quality.get(player)
        moved = "not measured"
        if q:
            verdict = "better" if q["low"] > 0 else "worse" if q["high"] < 0 else "no change"
            moved = f"{q['gain']:+.4f} [{q['low']:+.4f}, {q['high']:+.4f}] {verdict}"
            if verdict == "no change":
                not_significant.append(f"{name(player)}'s move quality")
            else:
                significant.append(f"{name(player)}'s move quality ({verdict})")
        rows.append((name(player), name(start), moved, record(player, start), record(player, anchor)))
    for start in dict.fromkeys(starts.values()):
        rows.append((name(start), "-", "", "-", record(start, anchor)))
    decided = [
        f"{name(a)} {'above' if e.low > 0 else 'below'} {name(b)} in games"
        for (a, b), e in matches.items()
        if e.low > 0 or e.high < 0
    ]
    significant += decided
    if not decided:
        sizes = sorted({e.games for e in matches.values()})
        per_pairing = "-".join(str(n) for n in sizes[:1] + sizes[1:][-1:]) or "no"
        not_significant.append(f"every game score ({per_pairing} games a pairing)")
    w0 = max(6, *(len(r[0]) for r in rows))
    w1 = max(5, *(len(r[1]) for r in rows))
    w2 = max(len("move quality on held-out positions"), *(len(r[2]) for r in rows)) + 2
    w3 = max(len("vs its start"), *(len(r[3]) for r in rows)) + 2
    lines = [
        "What RL did: each RL policy against its own start (95% intervals)",
        f"  {'policy':<{w0}}  {'start':<{w1}}  {'move quality on held-out positions':<{w2}} {'vs its start':<{w3}} "
        f"vs {name(anchor)}",
        *(f"  {a:<{w0}}  {b:<{w1}}  {c:<{w2}} {d:<{w3}} {e}" for a, b, c, d, e in rows),
    ]
    said = f"significant: {', '.join(significant)}." if significant else "significant: nothing at this size."
    if not_significant:
        said += f" Not significant: {', '.join(not_significant)}."
    lines.append(f"  {said}")
    return lines

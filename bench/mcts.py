"""mcts bench: how close the self-play collector's search runs to its network's speed, what the
tree itself costs per simulation, and what batching the leaves of many games buys.

    python bench/mcts.py                               # batch 16 (and 64), 32 simulations, 3 runs
    python bench/mcts.py --games 32 --simulations 64 --blocks 4 --channels 64 --runs 5
    python bench/mcts.py --search gumbel               # Gumbel root search instead of PUCT
    python bench/mcts.py --device cuda                 # the network on a GPU (the tree stays on the CPU)
    python bench/mcts.py --boards python --tree numpy  # the reference search, for a before/after

All figures come from one process, one torch thread, the same network (the ``tiny`` preset's
2 blocks x 32 channels, history 2, seeded weights) and runs that alternate, so machine noise
hits every side; each is the median of ``--runs`` runs:

* ``mcts``: simulations/s of the collector's loop (:class:`chessrl.search.selfplay.SelfPlay` with
  ``--games`` games at once: one network call per round of leaves across the games, move choice,
  replay planes) / positions/s of the bare network (``PolicyValueNet.predict``) on batches of
  ``--games`` already-encoded positions from the same games. Target >= 0.7.
* ``tree work``: the collector's wall time minus the time spent inside ``PolicyValueNet.predict``,
  in microseconds per simulation (selection, expansion, backup, move generation, plane encoding,
  priors, move choice). Target <= 30.
* ``mcts_batching``: that collector's simulations/s / the same loop with one game at a time, so
  every network call evaluates one leaf; also at ``--games-large`` games. Target >= 5.

One more run of the collector, with timers, splits a simulation's time: ``board`` (listing
moves, making children, end-of-game tests), ``encoding`` (the input planes), ``network``
(``predict``) and ``tree`` (the rest: walks, backups, priors, kept logits, the collector's own
loop). ``--boards python --tree numpy`` runs the reference search (python-chess boards, NumPy
walks: the code before native boards), for a before/after on the same machine.

Each run plays moves for ``--seconds`` seconds from the start position (new games as games end).
The last lines are ``tree work: X.X us per simulation (target <= 30)``,
``mcts_batching ratio: X.XX (target >= 5)`` (and the same at ``--games-large`` games) and
``mcts ratio: X.XX (target >= 0.7)``; a JSON record goes to ``--json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import numpy as np
import torch
from machine_load import fmt_load, timed
from record import RESULTS, write_record

from chessrl.search import mcts_leaves
from chessrl.search.board_encoding import encode_boards
from chessrl.search.mcts import BatchedMCTS, MCTSConfig, NetworkEvaluator
from chessrl.search.network import NetConfig, PolicyValueNet
from chessrl.search.selfplay import SelfPlay, SelfPlaySettings

TARGET_MCTS = 0.7
TARGET_BATCHING = 5.0
TARGET_TREE_US = 30.0


class TimedNet:
    """The network with the wall time spent in ``predict`` added up (everything else the
    collector does is tree work)."""

    def __init__(self, net: PolicyValueNet) -> None:
        self.net = net
        self.config = net.config
        self.seconds = 0.0

    def predict(self, planes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        started = time.perf_counter()
        try:
            return self.net.predict(planes)
        finally:
            self.seconds += time.perf_counter() - started


def collector_run(
    net: PolicyValueNet,
    games: int,
    simulations: int,
    seconds: float,
    seed: int,
    search: str = "puct",
    on_start: Any = None,
) -> dict[str, Any]:
    """The collector's loop for ``seconds``: simulations/s, tree work per simulation, network
    calls and leaves per call."""
    evaluator = NetworkEvaluator(net)
    timed_net = TimedNet(net)
    evaluator.net = timed_net  # type: ignore[assignment]
    play = SelfPlay(
        evaluator,
        MCTSConfig(
            simulations=simulations,
            dirichlet_eps=0.25,
            temperature_moves=20,
            **({"search": search} if search != "puct" else {}),  # type: ignore[arg-type]
        ),
        SelfPlaySettings(concurrent_games=games, max_plies=200, history=net.config.history),
        seed=seed,
    )
    play.step()  # warm-up: the first move's root expansions, caches
    sims, calls, positions = play.search.simulations_run, evaluator.calls, evaluator.positions
    timed_net.seconds = 0.0
    if on_start is not None:
        on_start()
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        play.step()
    elapsed = time.perf_counter() - started
    sims = play.search.simulations_run - sims
    calls, positions = evaluator.calls - calls, evaluator.positions - positions
    return {
        "simulations_per_s": sims / elapsed,
        "tree_us_per_simulation": (elapsed - timed_net.seconds) / max(sims, 1) * 1e6,
        "network_seconds": timed_net.seconds,
        "simulations": sims,
        "network_calls": calls,
        "leaves_per_call": positions / max(calls, 1),
        "moves": play.moves_played,
        "seconds": elapsed,
    }


#: Where the split of a simulation's time looks: (module, function, bucket). The board work is
#: listing moves, making children and the end-of-game test (native or python-chess), the
#: encoding is the network's input planes; the network is ``predict``; the tree is the rest.
SPLIT_POINTS = [
    ("chessrl.search.mcts_native", "new_root", "board"),
    ("chessrl.search.mcts_native", "make_children", "board"),
    ("chessrl.search.mcts_native", "list_edges", "board"),
    ("chessrl.search.mcts_leaves", "legal_indices", "board"),
    ("chessrl.search.mcts_leaves", "child_board", "board"),
    ("chessrl.search.mcts_leaves", "leaf_terminal", "board"),
    ("chessrl.search.mcts_leaves", "terminal_value", "board"),
    ("chessrl.search.mcts_native", "planes", "encoding"),
    ("chessrl.search.mcts", "encode_boards", "encoding"),
]


def split_run(
    net: PolicyValueNet, games: int, simulations: int, seconds: float, seed: int, search: str = "puct"
) -> dict[str, float]:
    """:func:`collector_run` with the time spent at :data:`SPLIT_POINTS` added up: microseconds
    per simulation of board work, encoding, network and the tree's own work (the rest)."""
    import importlib  # noqa: PLC0415

    spent = {"board": 0.0, "encoding": 0.0}
    saved = []

    def timer(fn: Any, bucket: str) -> Any:
        def timed_fn(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[bucket] += time.perf_counter() - started

        return timed_fn

    for module_name, name, bucket in SPLIT_POINTS:
        module = importlib.import_module(module_name)
        saved.append((module, name, getattr(module, name)))
        setattr(module, name, timer(getattr(module, name), bucket))
    try:
        run = collector_run(
            net,
            games,
            simulations,
            seconds,
            seed,
            search,
            on_start=lambda: spent.update(board=0.0, encoding=0.0),
        )
    finally:
        for module, name, fn in saved:
            setattr(module, name, fn)
    sims = max(run["simulations"], 1)
    split = {k: v / sims * 1e6 for k, v in spent.items()}
    split["network"] = run["network_seconds"] / sims * 1e6
    split["tree"] = run["tree_us_per_simulation"] - split["board"] - split["encoding"]
    return split


def network_run(net: PolicyValueNet, planes: np.ndarray, batch: int, seconds: float) -> dict[str, Any]:
    """The bare network on batches of ``batch`` encoded positions for ``seconds``: positions/s."""
    chunks = [planes[i : i + batch] for i in range(0, len(planes) - batch + 1, batch)]
    net.predict(chunks[0])  # warm-up
    done = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        for chunk in chunks:
            net.predict(chunk)
            done += len(chunk)
    elapsed = time.perf_counter() - started
    return {"positions_per_s": done / elapsed, "positions": done, "seconds": elapsed}


def sample_planes(net: PolicyValueNet, games: int, count: int, seed: int) -> np.ndarray:
    """Encoded positions from the collector's own games (so the network sees what it sees there)."""
    play = SelfPlay(
        NetworkEvaluator(net),
        MCTSConfig(simulations=4, temperature_moves=200),
        SelfPlaySettings(concurrent_games=games, max_plies=200, history=net.config.history),
        seed=seed,
    )
    boards = []
    while len(boards) < count:
        boards += [slot.root.board.copy() for slot in play.slots]
        play.step()
    return encode_boards(boards[:count], net.config.history)


def ratio_definitions(games: int) -> dict[str, str]:
    """What the record's ratios are."""
    return {
        "mcts": f"collector simulations/s ({games} games, one network call per round of leaves) / "
        f"bare network positions/s at batch {games}",
        "mcts_batching": "collector simulations/s / the same loop with one game (one leaf per call)",
        "tree_us_per_simulation": "(collector wall time - time inside PolicyValueNet.predict) / simulations",
    }


def print_verdict(
    tree_med: float,
    batching_ratio: float,
    large: int,
    large_ratio: float | None,
    mcts_ratio: float,
    runs: int,
) -> None:
    """The last lines: each figure against its target."""
    print(f"tree work: {tree_med:.1f} us per simulation, median of {runs} (target <= {TARGET_TREE_US:g})")
    print(f"mcts_batching ratio: {batching_ratio:.2f} (target >= {TARGET_BATCHING:g})")
    if large_ratio is not None:
        print(f"mcts_batching ratio at {large} games: {large_ratio:.2f}")
    print(f"mcts ratio: {mcts_ratio:.2f}, median of {runs} (target >= {TARGET_MCTS:g})")


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, argparse.ArgumentParser]:
    """The bench's flags."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--games", type=int, default=16, help="games at once = the collector's batch size")
    parser.add_argument(
        "--games-large", type=int, default=64, help="a second, larger batch for the batching ratio (0: none)"
    )
    parser.add_argument("--simulations", type=int, default=32, help="MCTS simulations per move")
    parser.add_argument("--search", choices=["puct", "gumbel"], default="puct", help="the root search")
    parser.add_argument("--blocks", type=int, default=2)
    parser.add_argument("--channels", type=int, default=32)
    parser.add_argument("--history", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds per timed run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--device", default="cpu", help="where the network runs: cpu, cuda, cuda:1, ...")
    parser.add_argument(
        "--boards",
        choices=["native", "python"],
        default="native",
        help="the search's boards: native (compiled_board in the tree's arrays, the default) or python-chess (the reference)",
    )
    parser.add_argument(
        "--tree",
        choices=["compiled", "numpy"],
        default="compiled",
        help="the walk (PUCT or Gumbel) and backup: compiled (numba, the default) or NumPy array operations (the reference)",
    )
    parser.add_argument("--json", default=str(RESULTS / "mcts.json"))
    return parser.parse_args(argv), parser


def set_up(
    args: argparse.Namespace, parser: argparse.ArgumentParser
) -> tuple[PolicyValueNet, np.ndarray, int]:
    """``(network, sample planes, the larger batch or 0)``: the search switched to ``--boards``
    and ``--tree``, one seeded network on ``--device``, positions from its own games; prints
    the settings line.

        net, planes, large = set_up(*parse_args(["--seconds", "1", "--runs", "1"]))
    """
    mcts_leaves.NATIVE_BOARDS = args.boards == "native"
    BatchedMCTS.compiled = args.tree == "compiled"

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: this torch build sees no CUDA device")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = NetConfig(blocks=args.blocks, channels=args.channels, history=args.history, value_hidden=32)
    net = PolicyValueNet(config).to(args.device).eval()
    planes = sample_planes(net, args.games, args.games * 16, seed=1)
    large = args.games_large if args.games_large and args.games_large != args.games else 0
    print(
        f"network: {args.blocks} blocks x {args.channels} channels, history {args.history}; batch {args.games} "
        f"games{f' (and {large})' if large else ''}, {args.simulations} simulations per move, {args.search} "
        f"search, {args.boards} boards, {args.tree} tree; network on {args.device}, 1 torch thread; {args.seconds:g} s per run"
    )
    return net, planes, large


def run_sides(
    args: argparse.Namespace, net: PolicyValueNet, planes: np.ndarray, large: int
) -> dict[str, list[dict[str, Any]]]:
    """``--runs`` rounds of the bare network, the collector, one leaf per call (and the collector
    at ``large`` games), one after the other, each round printed as a line; keyed as the record's
    ``runs``: ``network``, ``collector``, ``one_leaf``, ``collector_large``."""
    sides: dict[str, list[dict[str, Any]]] = {
        "network": [],
        "collector": [],
        "one_leaf": [],
        "collector_large": [],
    }
    for i in range(args.runs):
        r = timed(network_run, net, planes, args.games, args.seconds)
        b = timed(collector_run, net, args.games, args.simulations, args.seconds, 10 + i, args.search)
        s = timed(collector_run, net, 1, args.simulations, args.seconds, 10 + i, args.search)
        runs = [r, b, s]
        sides["network"].append(r)
        sides["collector"].append(b)
        sides["one_leaf"].append(s)
        line = (
            f"  run {i + 1}  network {r['positions_per_s']:8,.0f} positions/s | collector {b['simulations_per_s']:7,.0f} "
            f"simulations/s ({b['leaves_per_call']:.1f} leaves per call, tree {b['tree_us_per_simulation']:.1f} us/sim) "
            f"| one leaf per call {s['simulations_per_s']:6,.0f} simulations/s"
        )
        if large:
            big = timed(collector_run, net, large, args.simulations, args.seconds, 10 + i, args.search)
            sides["collector_large"].append(big)
            runs.append(big)
            line += f" | {large} games {big['simulations_per_s']:7,.0f} simulations/s"
        print(f"{line} | other load {fmt_load(max(x['other_load_cores'] or 0 for x in runs))}")
    return sides


def side_medians(
    args: argparse.Namespace, sides: dict[str, list[dict[str, Any]]], large: int
) -> dict[str, Any]:
    """The record's ``medians`` (the larger batch's None without one), printed as one line."""
    medians = {
        "network_positions_per_s": statistics.median(x["positions_per_s"] for x in sides["network"]),
        "collector_simulations_per_s": statistics.median(x["simulations_per_s"] for x in sides["collector"]),
        "one_leaf_simulations_per_s": statistics.median(x["simulations_per_s"] for x in sides["one_leaf"]),
        "collector_large_simulations_per_s": (
            statistics.median(x["simulations_per_s"] for x in sides["collector_large"]) if large else None
        ),
        "tree_us_per_simulation": statistics.median(x["tree_us_per_simulation"] for x in sides["collector"]),
    }
    large_med = medians["collector_large_simulations_per_s"]
    print(
        f"medians: network {medians['network_positions_per_s']:,.0f} positions/s at batch {args.games}; "
        f"collector {medians['collector_simulations_per_s']:,.0f} simulations/s; one leaf per call "
        f"{medians['one_leaf_simulations_per_s']:,.0f} simulations/s"
        + (f"; {large} games {large_med:,.0f} simulations/s" if large_med is not None else "")
    )
    return medians


def main(argv: list[str] | None = None) -> int:
    """Set up, run the sides, split one more run, write the record and print the verdict lines."""
    args, parser = parse_args(argv)
    net, planes, large = set_up(args, parser)
    sides = run_sides(args, net, planes, large)
    medians = side_medians(args, sides, large)
    batched_med, single_med = medians["collector_simulations_per_s"], medians["one_leaf_simulations_per_s"]
    tree_med, large_med = medians["tree_us_per_simulation"], medians["collector_large_simulations_per_s"]
    mcts_ratio = batched_med / medians["network_positions_per_s"]
    batching_ratio = batched_med / single_med
    large_ratio = large_med / single_med if large_med is not None else None
    split = split_run(net, args.games, args.simulations, args.seconds, 99, args.search)
    print(
        "split of a simulation (us, one more run with timers): "
        + " | ".join(f"{k} {split[k]:.1f}" for k in ("board", "encoding", "tree", "network"))
    )
    ratios: dict[str, float] = {"mcts": mcts_ratio, "mcts_batching": batching_ratio}
    if large_ratio is not None:
        ratios[f"mcts_batching_{large}"] = large_ratio
    record = {
        "bench": "mcts",
        "ratio_definitions": ratio_definitions(args.games),
        "network": {"blocks": args.blocks, "channels": args.channels, "history": args.history},
        "device": args.device,
        "search": args.search,
        "boards": args.boards,
        "tree": args.tree,
        "split_us_per_simulation": split,
        "games": args.games,
        "games_large": large,
        "simulations": args.simulations,
        "runs": sides,
        "medians": medians,
        "ratios": ratios,
        "targets": {
            "mcts": TARGET_MCTS,
            "mcts_batching": TARGET_BATCHING,
            "tree_us_per_simulation": TARGET_TREE_US,
        },
        "passed": mcts_ratio >= TARGET_MCTS
        and batching_ratio >= TARGET_BATCHING
        and tree_med <= TARGET_TREE_US,
        "torch": torch.__version__,
    }
    write_record(args.json, record)
    print_verdict(tree_med, batching_ratio, large, large_ratio, mcts_ratio, args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``rlaif``: the whole RLAIF pipeline as one resumable Ray job graph.

    python -m pipelines.rlaif --config tiny
    chess-rl rlaif --config tiny --only ppo evaluate
    chess-rl rlaif --config tiny --from ppo --force ppo
    ray job submit --working-dir . -- python -m pipelines.rlaif --config cluster --storage s3://b/runs

The graph (:data:`NODES`)::

    prepare -> sft -> preferences -> reward -> ppo -> evaluate
                  |             \\-> dpo ----------------/
                  \\-> grpo ------------------------------/

(the reward node only where a phase reads the judge: ppo with ``ppo.reward: model``, grpo with
``grpo.start: judge``; the tiny preset grades ppo with Stockfish, so its graph trains no reward
model. The demo's graph is the judge's path: prepare -> annotate -> reward (``reward.source:
annotate``, a fresh backbone) -> grpo training the judge as a policy, and ppo graded by it.)

Every phase runs the code of ``chess-rl <phase>`` (its ``Phase.run``) on one Ray session and
reads the section of the same config, with its outputs under ``<storage>/<run>/<phase>/``. A
phase's key is a hash of its section and its inputs' keys (:mod:`cluster.graph`); when it
finishes, ``<run>/rlaif/manifests/<phase>.json`` records the key (atomically). The same command
again skips every phase whose manifest holds its current key and resumes the others from their
own checkpoints, so a kill anywhere loses nothing finished; a changed section re-runs that phase
and everything downstream of it. ``grpo`` asks the sft model in its own format
(``grpo.text_format: moves``); with ``rookworld`` (and no ``grpo.policy``) the graph adds an
``sft-rookworld`` node, the sft phase on the rookworld format, for grpo to start from.

The last phase, ``evaluate``, is a round robin of the ppo, grpo and dpo policies, the sft start
and a random mover (``rlaif.compare_games`` games a pairing, game pairs with colours swapped): the
head-to-head scores say whether RL made the policy stronger than its start. For a decision with
significance, run ``chess-rl evaluate --mode sprt`` on one pair.

While it runs the driver prints the graph's state (done / skipped / running / failed, time, key)
after every phase, writes it to ``<run>/rlaif/graph.md`` (a mermaid picture with each node's
state) and ``graph.json``, and logs one MLflow parent run with a child run per phase.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cluster.capacity import read_capacity
from cluster.config import flatten
from cluster.errors import ConfigError, UserError
from cluster.graph import Graph, Manifest, Manifests, state_table
from cluster.progress import clock
from cluster.runtime import quiet_driver, ray_session
from cluster.storage import Storage
from cluster.tracking import Tracker, write_json_artifact
from pipelines.cli import one_line
from pipelines.common.phase import (
    EXIT_EMPTY,
    EXIT_OK,
    Inputs,
    Phase,
    PhaseContext,
    PhaseResult,
    build_parser,
    check_paths_on_nodes,
    execute,
    exit_code,
    phase_logger,
    resolve_config,
)
from pipelines.config import ChessRLConfig, RlaifConfig
from pipelines.rlaif_graph import BOARD_SFT as BOARD_SFT
from pipelines.rlaif_graph import FORMAT_SFT as FORMAT_SFT
from pipelines.rlaif_graph import NODES as NODES
from pipelines.rlaif_graph import ROOKWORLD_SFT as ROOKWORLD_SFT
from pipelines.rlaif_graph import (
    comparison_players,
    graph_nodes,
    node_config,
    node_keys,
    output_folder,
    phase_module,
)
from pipelines.rlaif_graph import ppo_board_start as ppo_board_start

DESCRIPTION = """Runs prepare -> sft -> preferences -> reward -> ppo, preferences -> dpo and sft -> grpo, then an
evaluate of the ppo, grpo and dpo policies against the sft start, on one Ray session. A phase whose manifest
(<run>/rlaif/manifests/<phase>.json) holds the key of its config and inputs is skipped; the others
resume from their own checkpoints. A changed section re-runs that phase and everything below it.
--set rlaif.online_dpo=true adds online DPO (grpo --loss-type dpo) beside grpo, and to the comparison;
--set rlaif.dpo=false leaves out offline dpo (and preferences when nothing else reads its pairs).
The reward model is trained only where a phase reads it (ppo.reward model, grpo.start judge; the tiny preset
grades ppo with Stockfish); the demo trains it on annotate's pairs (reward.source annotate) for both.
Examples:
  chess-rl rlaif --config tiny
  chess-rl rlaif --only ppo evaluate --set ppo.kl_coef=0.1
  chess-rl rlaif --from ppo --force ppo"""


@dataclass
class NodeState:
    node: str
    state: str = "pending"
    seconds: float | None = None
    key: str = ""
    note: str = ""


class GraphRun:
    """One pass over the graph: decides, runs, records and reports each node."""

    def __init__(
        self,
        config: ChessRLConfig,
        run_storage: Storage,
        log: Callable[[str], None],
        run_node: Callable[[str, ChessRLConfig], PhaseResult],
    ) -> None:
        self.config = config
        self.cfg: RlaifConfig = config.rlaif
        self.graph = Graph(graph_nodes(config))
        self.run_storage = run_storage
        self.folder = run_storage.child("rlaif")
        self.manifests = Manifests(self.folder.child("manifests"))
        self.log = log
        self.run_node = run_node
        named = [*(self.cfg.only or []), *([self.cfg.start] if self.cfg.start else []), *self.cfg.force]
        if "reward" in named and "reward" not in self.graph.nodes:
            raise ConfigError(
                "rlaif: this graph trains no reward model, as no phase reads it (ppo.reward is stockfish, "
                "grpo.start is sft): set ppo.reward=model for the judge -> ppo path, grpo.start=judge for "
                "grpo on the judge, or run `chess-rl reward` on its own"
            )
        for name in {"dpo", "preferences"}.intersection(named) - set(self.graph.nodes):
            raise ConfigError(
                f"rlaif: this graph has no {name} node: rlaif.dpo is false"
                + ("" if name == "dpo" else " and no other phase reads preference pairs")
                + "; set rlaif.dpo=true, or run `chess-rl preferences` then `chess-rl dpo` on their own"
            )
        self.selected = self.graph.select(self.cfg.only or None, self.cfg.start)
        self.keys = node_keys(self.graph, config, run_storage)
        self.states = {n: NodeState(n, key=self.keys[n][:8]) for n in self.graph.order()}
        for name in self.cfg.force:
            if name not in self.graph.nodes:
                raise ConfigError(
                    f"rlaif: --force {name}: not a phase of this graph; phases: {', '.join(self.graph.order())}"
                )
        if config.grpo.loss_type == "dpo":
            raise ConfigError(
                "rlaif: grpo.loss_type is dpo, but the graph's grpo node is GRPO (its comparison reads <run>/grpo): "
                "set rlaif.online_dpo: true for an online-dpo node beside it"
            )
        if config.sft.text_format != "moves":
            raise ConfigError(
                "rlaif: sft.text_format must be moves here (the graph's sft feeds preferences, reward and ppo); "
                "a rookworld or board grpo gets its own sft-rookworld or sft-board node"
            )
        # a forced phase's new outputs are new inputs for everything below it
        self.forced = set(self.cfg.force).union(*(self.graph.downstream(n) for n in self.cfg.force))

    def plan(self) -> None:
        """Mark what is done, what was not asked for, and what cannot run (an input neither done
        nor selected) before anything runs."""
        for name in self.graph.order():
            st = self.states[name]
            done = self.manifests.is_done(name, self.keys[name])
            if name not in self.selected:
                st.state, st.note = ("done", "not selected") if done else ("not selected", "")
            elif done and name not in self.forced:
                st.state, st.note = "skipped", "manifest matches"
                found = self.manifests.read(name)
                st.seconds = found.seconds if found else None
        for name in self.selected:
            missing = [
                n
                for n in self.graph.nodes[name].needs
                if n not in self.selected and not self.manifests.is_done(n, self.keys[n])
            ]
            st = self.states[name]
            if missing and st.state == "pending":
                st.state = "blocked"
                st.note = (
                    f"needs {', '.join(missing)}, not done with this config: run without --only, or add it"
                )

    def run(self) -> bool:
        """Run the pending nodes in order; a failed node blocks its dependents and the others go on."""
        self.plan()
        self.report(quiet=True)
        self.to_run = [n for n in self.selected if self.states[n].state == "pending"]
        self.started = time.perf_counter()
        for line in self.plan_lines():
            self.log(line)
        for name in self.selected:
            st = self.states[name]
            if st.state != "pending":
                continue
            failed = [
                n for n in self.graph.nodes[name].needs if self.states[n].state in ("failed", "blocked")
            ]
            if failed:
                st.state, st.note = "blocked", f"{', '.join(failed)} did not finish"
                continue
            st.state = "running"
            self.report(quiet=True)
            self.log(f"phase {name} (key {self.keys[name][:8]}) starts: {self.position(name)}")
            self.start(name)
            started = time.perf_counter()
            try:
                result = self.run_node(name, node_config(self.config, name, self.run_storage))
            except UserError as exc:
                st.state, st.note = "failed", str(exc)
            except Exception as exc:  # noqa: BLE001 - a phase's crash stops its dependents, not the graph
                traceback.print_exc()  # a crash (not a user's mistake) keeps its traceback
                st.state, st.note = (
                    "failed",
                    f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}",
                )
            else:
                st.seconds = time.perf_counter() - started
                if result.ok:
                    st.state = "done"
                    self.manifests.clear_started(name)
                    self.manifests.write(
                        Manifest(
                            name, self.keys[name], round(st.seconds, 1), summary=_jsonable(result.summary)
                        )
                    )
                else:
                    st.state, st.note = "failed", "the phase produced nothing usable"
            if st.seconds is None:
                st.seconds = time.perf_counter() - started
            if st.state == "failed":
                self.log(f"phase {name} failed: {st.note}")
            else:
                self.log(f"phase {name} {st.state} in {clock(st.seconds)}")
            self.report(quiet=True)  # a line per phase, and the table once at the end
        self.report()
        return all(self.states[n].state in ("done", "skipped") for n in self.selected)

    def plan_lines(self) -> list[str]:
        """What this pass will do, before it starts: the phases to run, then those it will not."""
        lines = [f"plan: {len(self.to_run)} phase(s) to run: {', '.join(self.to_run) or 'none'}"]
        by_state: dict[str, list[str]] = {}
        for st in self.states.values():
            if st.state == "blocked":
                lines.append(f"plan: {st.node} is blocked: {st.note}")
            elif st.state != "pending":
                by_state.setdefault(st.state, []).append(st.node)
        for state, names in by_state.items():
            why = {"skipped": " (done with this config)", "done": " (done; not selected)"}.get(state, "")
            lines.append(f"plan: {state}{why}: {', '.join(names)}")
        return lines

    def position(self, name: str) -> str:
        """``phase 3 of 5 to run, 4:10 so far``: where the graph is when ``name`` starts."""
        return (
            f"phase {self.to_run.index(name) + 1} of {len(self.to_run)} to run, "
            f"{clock(time.perf_counter() - self.started)} so far"
        )

    def start(self, name: str) -> None:
        """Before a node runs: its outputs (and so everything built from them) stop being done.
        A node that last started with its current key resumes from its own checkpoints; one
        forced or whose config changed since it last ran starts from an empty folder, so that
        its own resume cannot bring back what the old config trained."""
        key = self.keys[name]
        previous = self.manifests.read(name)
        started = self.manifests.started_key(name)
        stale = (
            name in self.forced
            or (previous is not None and previous.key != key)
            or started not in (None, key)
        )
        self.manifests.delete(name)
        for node in sorted(self.graph.downstream(name)):  # built from outputs about to change:
            self.manifests.delete(node)  # not done any more, and when they run, from scratch
            self.manifests.mark_started(node, "")
        folder = output_folder(self.config, name)
        if stale and self.run_storage.exists(folder):
            self.log(
                f"phase {name}: {'forced' if name in self.forced else 'its config or an input changed'}: "
                f"clearing {self.run_storage.uri_of(folder)}"
            )
            self.run_storage.delete(folder)
        self.manifests.mark_started(name, key)

    def rows(self) -> list[dict[str, Any]]:
        return [vars(s) for s in self.states.values()]

    def report(self, quiet: bool = False) -> None:
        """Print the state table (unless ``quiet``) and write graph.json and graph.md."""
        if not quiet:
            for line in state_table(self.rows()):
                print(f"[rlaif] {line}", flush=True)
        states = {s.node: s.state for s in self.states.values()}
        self.folder.write_text("graph.json", json.dumps({"nodes": self.rows(), "keys": self.keys}, indent=1))
        self.folder.write_text(
            "graph.md",
            "# rlaif graph\n\n```mermaid\n"
            + self.graph.mermaid(states)
            + "```\n\n"
            + "\n".join(f"    {line}" for line in state_table(self.rows()))
            + "\n",
        )


def check_inputs(graph_run: GraphRun) -> None:
    """Before Ray starts: the ``Phase.check`` of every phase this pass will run (selected, not
    done with its key or forced, not blocked), with its node's config. Inputs that an earlier
    phase of this pass writes (its folder under the run) are taken as given. A mistake is one
    UserError naming the phase."""
    produced: set[str] = set()
    blocked: set[str] = set()
    manifests, keys, selected = graph_run.manifests, graph_run.keys, graph_run.selected
    for name in graph_run.graph.order():
        if name not in selected:
            continue
        if manifests.is_done(name, keys[name]) and name not in graph_run.forced:
            continue  # skipped: its outputs are there
        needs = graph_run.graph.nodes[name].needs
        if any(n in blocked or (n not in selected and not manifests.is_done(n, keys[n])) for n in needs):
            blocked.add(name)  # it will not run (the plan says why)
            continue
        node = phase_module(name)
        if node.check is not None:
            try:
                node.check(
                    node_config(graph_run.config, name, graph_run.run_storage),
                    Inputs(graph_run.run_storage, frozenset(produced)),
                )
            except UserError as exc:
                raise type(exc)(f"rlaif: phase {name}: {exc}") from None
        produced.add(name)


def comparison(config: ChessRLConfig, run_storage: Storage) -> list[str]:
    """The demo's last screen, from the last evaluate's games and the RL phases' summaries: what RL
    did (:func:`~chessrl.arena.eval_report.rl_story_lines`), then each player's games."""
    from chessrl.arena.eval_report import comparison_lines, rl_story_lines
    from chessrl.arena.game import ArenaGame

    players, labels, starts = comparison_players(config, run_storage)
    games_dir = run_storage.child(output_folder(config, "evaluate")).child("games")
    games = [ArenaGame.from_dict(json.loads(games_dir.read_text(p))) for p in games_dir.glob("*.json")]
    quality = {}
    for player in starts:  # each RL policy against its own start on held-out positions
        folder = run_storage.child(output_folder(config, labels[player]))
        if folder.exists("summary.json"):
            quality[player] = json.loads(folder.read_text("summary.json")).get("quality") or {}
    decide = next((p for p in starts if quality.get(p, {}).get("low", 0) > 0), next(iter(starts)))
    return [
        *rl_story_lines(games, labels, starts, quality),
        f"  for a decision with significance: chess-rl evaluate --mode sprt --players {decide} {starts[decide]} "
        f"--adjudicate-cp {config.rlaif.compare_adjudicate_cp or 300} --seed {config.run.seed}",
        *judge_lines(config, run_storage),
        "",
        f"The comparison's {len(games)} games (masked players, adjudicated at the ply cap; legal 1st: the share of "
        "the model's moves whose unmasked argmax was legal)",
        *(f"  {line}" for line in comparison_lines(games, players, labels)),
    ]


def judge_lines(config: ChessRLConfig, run_storage: Storage) -> list[str]:
    """The reward model's bar on its held-out positions (:func:`chessrl.rl.reward.judge_line`),
    and who reads it, when the graph trained one; one line saying why not when nothing reads it."""
    from chessrl.rl.reward import judge_line

    readers = [
        *(["ppo grades with it"] if config.ppo.reward == "model" else []),
        *(["grpo trains it as a policy"] if config.grpo.start == "judge" else []),
    ]
    if not readers:
        return [
            "",
            "The judge (a reward model): not trained, no phase reads it (ppo grades with Stockfish); "
            "its bar and figures: docs/results.md, `chess-rl reward` trains one",
        ]
    folder = run_storage.child(output_folder(config, "reward"))
    if not folder.exists("summary.json"):
        return []
    summary = json.loads(folder.read_text("summary.json"))
    return ["", f"The judge (the reward model; {' and '.join(readers)}):", judge_line(summary)]


def _jsonable(summary: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(summary, default=str))


def _log_graph(parent: Any, graph_run: GraphRun) -> None:
    """Log the graph's nodes and keys (``rlaif_graph.json``) and, in an active MLflow run, its
    picture (``rlaif_graph.md``) to the invocation's parent run."""
    write_json_artifact(parent, {"nodes": graph_run.rows(), "keys": graph_run.keys}, "rlaif_graph.json")
    if parent.active:
        with tempfile.TemporaryDirectory() as tmp:
            picture = os.path.join(tmp, "rlaif_graph.md")
            with open(picture, "w") as handle:
                handle.write(graph_run.folder.read_text("graph.md"))
            parent.log_artifact(picture)


def _print_outcome(config: ChessRLConfig, run_storage: Storage, graph_run: GraphRun, tracker: Any) -> None:
    """After the graph ran: the comparison of its models (once evaluate is done or skipped, also
    written to ``comparison.md``), one error line per selected phase that failed or was blocked,
    where the graph's state is, and the MLflow run."""
    if graph_run.states["evaluate"].state in ("done", "skipped"):
        table = comparison(config, run_storage)
        for line in table:
            print(line, flush=True)
        graph_run.folder.write_text("comparison.md", "\n".join(["```", *table, "```"]) + "\n")
    failed = [
        s
        for s in graph_run.states.values()
        if s.state in ("failed", "blocked") and s.node in graph_run.selected
    ]
    for s in failed:
        print(f"error: rlaif: phase {s.node} {s.state}: {s.note}", file=sys.stderr, flush=True)
    print(f"rlaif: graph state in {graph_run.folder.uri_of('graph.md')}", flush=True)
    if tracker.enabled and tracker.uri:
        print(
            f"mlflow: run {tracker.parent_run_id} in experiment {config.tracking.experiment!r}",
            flush=True,
        )


def main(argv: Sequence[str] | None = None, *, prog: str | None = None) -> int:
    """Parse the flags, start Ray and MLflow once, and run the graph."""
    phase = Phase(
        name="rlaif",
        summary=one_line("rlaif"),
        description=DESCRIPTION,
        section="rlaif",
        section_model=RlaifConfig,
        run=lambda context: PhaseResult({}),
    )
    parser, mapping = build_parser(phase, prog)
    parser.add_argument("--from", dest="rlaif__from", metavar="PHASE", help="the same as --start")
    mapping["rlaif__from"] = ("rlaif.start", "--from")
    args = parser.parse_args(list(argv) if argv is not None else None)
    log = phase_logger("rlaif")

    def body() -> int:
        quiet_driver()
        config = resolve_config(phase, args, mapping)
        run_storage = Storage.from_uri(config.run.storage).child(config.run.name)
        log(f"run {config.run.name!r} -> {run_storage.uri}")
        tracker = Tracker(config.tracking, storage_uri=config.run.storage, run_name=config.run.name)
        graph_run = GraphRun(config, run_storage, log, lambda name, cfg: PhaseResult({}, ok=False))
        # (the graph, the selection and the keys are checked here, before Ray starts)
        check_inputs(graph_run)  # and every input of the phases to run
        params = flatten(config)
        with ray_session(config.ray, args.address, log=log) as ray_info:
            log(
                f"ray: {ray_info.mode} cluster at {ray_info.address}, {int(ray_info.resources.get('CPU', 0))} CPUs"
            )
            capacity = read_capacity()
            if capacity.autoscales:  # each phase sizes itself from these and asks for its nodes
                log(f"ray: {capacity.describe()}; each phase asks it for the nodes it needs")
            check_paths_on_nodes(config, list(type(config).model_fields), ray_info.mode, log)
            with tracker.invocation(params) as parent:

                def run_node(name: str, node_cfg: ChessRLConfig) -> PhaseResult:
                    node = phase_module(name)
                    with tracker.phase(name, flatten(node_cfg)) as tracking:
                        context = PhaseContext(
                            config=node_cfg,
                            run_storage=run_storage,
                            tracking=tracking,
                            ray=ray_info,
                            log=phase_logger(name),
                        )
                        result = execute(node, context)
                    for line in result.lines:
                        print(line, flush=True)
                    return result

                graph_run.run_node = run_node
                ok = graph_run.run()
                _log_graph(parent, graph_run)
        _print_outcome(config, run_storage, graph_run, tracker)
        return EXIT_OK if ok else EXIT_EMPTY

    return exit_code(body)


if __name__ == "__main__":
    sys.exit(main())

"""The resumable job graph (cluster/graph.py) and the rlaif driver's decisions (pipelines/rlaif.py):
keys, selection, manifests, skip / re-run / force / blocked / failed. The phases here are
stand-ins that record their calls and write a file: what is under test is which phases the graph
runs, skips and blocks, not the phases (tests/integration runs the real ones)."""

from __future__ import annotations

import json

import pytest

from cluster.config import load_config
from cluster.errors import ConfigError, StorageError
from cluster.graph import Graph, Manifest, Manifests, Node, state_table
from cluster.storage import Storage
from pipelines.common.phase import PhaseResult
from pipelines.config import ChessRLConfig

#: The graph these tests build: ppo reads the judge (a reward node) in the policy's own format,
#: from the sft node. The defaults (the tiny preset's) grade ppo with Stockfish on the board sft.
JUDGED_PPO = {"ppo.reward": ("model", "--reward"), "ppo.text_format": (None, "--set ppo.text_format")}


def test_graph_order_cycle_unknown_input_and_duplicates():
    g = Graph([Node("c", ("a", "b")), Node("a"), Node("b", ("a",))])
    assert g.order() == ["a", "b", "c"]
    assert g.upstream("c") == {"a", "b"} and g.downstream("a") == {"b", "c"}
    with pytest.raises(ConfigError, match=r"a cycle: b -> c -> b"):
        Graph([Node("a"), Node("b", ("a", "c")), Node("c", ("b",))])
    with pytest.raises(ConfigError, match="needs 'zz', which is not a node"):
        Graph([Node("a", ("zz",))])
    with pytest.raises(ConfigError, match="'a' is declared twice"):
        Graph([Node("a"), Node("a")])


def test_select_only_from_and_unknown_names():
    g = Graph([Node("p"), Node("s", ("p",)), Node("r", ("s",)), Node("g", ("s",)), Node("e", ("r", "g"))])
    assert g.select() == ["p", "s", "r", "g", "e"]
    assert g.select(start="r") == ["r", "e"]
    assert g.select(only=["e", "p"]) == ["p", "e"]
    with pytest.raises(ConfigError, match="unknown phase 'x'; phases: p, s, r, g, e"):
        g.select(only=["x"])


def test_keys_change_downstream_only():
    g = Graph([Node("p"), Node("s", ("p",)), Node("r", ("s",)), Node("g", ("s",))])
    base = {"p": {"n": 1}, "s": {"lr": 1}, "r": {"k": 1}, "g": {"b": 1}}
    k1 = g.keys(base)
    assert g.keys(dict(base)) == k1  # deterministic
    k2 = g.keys({**base, "r": {"k": 2}})
    assert [k1[n] == k2[n] for n in "psrg"] == [True, True, False, True]
    k3 = g.keys({**base, "p": {"n": 2}})
    assert all(k1[n] != k3[n] for n in "psrg")


def test_manifests_are_read_back_and_a_torn_one_counts_as_missing(tmp_path):
    m = Manifests(Storage.from_uri(str(tmp_path)))
    assert m.read("sft") is None and not m.is_done("sft", "k")
    m.write(Manifest("sft", "k", 1.5, summary={"loss": 2.0}))
    assert m.is_done("sft", "k") and not m.is_done("sft", "other")
    assert m.read("sft").summary == {"loss": 2.0}
    (tmp_path / "sft.json").write_text("{not json")
    assert m.read("sft") is None
    m.delete("sft")
    assert not (tmp_path / "sft.json").exists()


def test_state_table_and_mermaid():
    lines = state_table(
        [
            {"node": "prepare", "state": "skipped", "seconds": 3.0, "key": "ab", "note": "x"},
            {"node": "sft", "state": "running", "seconds": None, "key": "cd", "note": ""},
        ]
    )
    assert lines[0].split() == ["phase", "state", "time", "key", "note"]
    assert lines[1].split() == ["prepare", "skipped", "3", "s", "ab", "x"] and lines[2].split()[:3] == [
        "sft",
        "running",
        "-",
    ]
    text = Graph([Node("a"), Node("b", ("a",))]).mermaid({"a": "done", "b": "failed"})
    assert "a --> b" in text and 'b["b<br/>failed"]' in text and "style b fill:#f4a6a6" in text


# -- the rlaif driver's decisions ----------------------------------------------------------------


class Phases:
    """Stand-in phases: each call is recorded, writes <run>/<phase>/out.txt, and fails or raises
    when told to."""

    def __init__(self, root: Storage) -> None:
        self.root = root
        self.calls: list[str] = []
        self.fail: dict[str, Exception] = {}
        self.found: dict[str, bool] = {}

    def __call__(self, name: str, config: ChessRLConfig) -> PhaseResult:
        from pipelines.rlaif import output_folder

        self.calls.append(name)
        folder = self.root.child(output_folder(config, name))
        self.found[name] = folder.exists("out.txt")  # what a phase's own resume would pick up
        if name in self.fail:
            raise self.fail[name]
        folder.write_text("out.txt", f"{name} {len(self.calls)}")
        return PhaseResult({"phase": name})


def graph_run(tmp_path, phases: Phases, **rlaif):
    from pipelines.rlaif import GraphRun

    overrides = {f"rlaif.{k}": (v, f"--{k}") for k, v in rlaif.items()}
    overrides.update(
        {
            "run.storage": (str(tmp_path), "--storage"),
            "run.name": ("r", "--run-name"),
            "grpo.text_format": ("moves", "--text-format"),
            "grpo.policy_share": (1.0, "--policy-share"),
            **JUDGED_PPO,
        }
    )
    config = load_config(ChessRLConfig, path=None, overrides=overrides)
    return GraphRun(config, phases.root, lambda _: None, phases)


def test_rlaif_runs_everything_once_then_skips_then_reruns_what_a_change_reaches(tmp_path):
    root = Storage.from_uri(str(tmp_path)).child("r")
    phases = Phases(root)
    run = graph_run(tmp_path, phases)
    assert run.run()
    order = ["prepare", "sft", "preferences", "reward", "ppo", "grpo", "dpo", "evaluate"]
    assert phases.calls == order
    assert all(s.state == "done" for s in run.states.values())
    manifests = {n: (tmp_path / "r" / "rlaif" / "manifests" / f"{n}.json").read_text() for n in order}
    graph = json.loads((tmp_path / "r" / "rlaif" / "graph.json").read_text())
    assert [n["state"] for n in graph["nodes"]] == ["done"] * 8
    assert "```mermaid" in (tmp_path / "r" / "rlaif" / "graph.md").read_text()

    phases.calls.clear()  # the same command again: nothing runs, manifests untouched
    run = graph_run(tmp_path, phases)
    assert run.run() and phases.calls == []
    assert {s.state for s in run.states.values()} == {"skipped"}
    assert all(
        (tmp_path / "r" / "rlaif" / "manifests" / f"{n}.json").read_text() == manifests[n] for n in order
    )

    # a changed ppo section: ppo and evaluate run again, nothing else
    from pipelines.rlaif import GraphRun

    config = load_config(
        ChessRLConfig,
        path=None,
        overrides={
            "run.storage": (str(tmp_path), "--storage"),
            "run.name": ("r", "--run-name"),
            "grpo.text_format": ("moves", "--text-format"),
            "grpo.policy_share": (1.0, "--policy-share"),
            "ppo.kl_coef": (0.5, "--kl-coef"),
            **JUDGED_PPO,
        },
    )
    phases.found.clear()
    run = GraphRun(config, root, lambda _: None, phases)
    assert run.run() and phases.calls == ["ppo", "evaluate"]
    # ...from empty folders: a phase's own resume must not bring back what the old config trained
    assert phases.found == {"ppo": False, "evaluate": False}

    phases.calls.clear()  # --force sft: sft runs again, and so does everything below it (new outputs)
    run = graph_run(tmp_path, phases, force=["sft"])
    assert run.run() and phases.calls == order[1:]
    phases.calls.clear()  # --from grpo with everything done: grpo's manifest matches, nothing runs
    run = graph_run(tmp_path, phases, start="grpo")
    assert run.run() and phases.calls == [] and run.states["ppo"].note == "not selected"


def test_a_failure_blocks_its_dependents_and_the_other_branch_goes_on(tmp_path):
    root = Storage.from_uri(str(tmp_path)).child("r")
    phases = Phases(root)
    phases.fail["reward"] = StorageError(
        "reward: no preference pairs under /x: run `chess-rl preferences` first"
    )
    run = graph_run(tmp_path, phases)
    assert not run.run()
    assert phases.calls == ["prepare", "sft", "preferences", "reward", "grpo", "dpo"]
    st = run.states
    assert st["reward"].state == "failed" and "no preference pairs" in st["reward"].note
    assert st["ppo"].state == "blocked" and "reward" in st["ppo"].note
    assert st["evaluate"].state == "blocked" and st["grpo"].state == "done" and st["dpo"].state == "done"
    assert not (tmp_path / "r" / "rlaif" / "manifests" / "reward.json").exists()

    phases.calls.clear()  # a crash (not a user's mistake) is failed too, with its exception's first line
    phases.fail["grpo"] = RuntimeError("boom\nsecond line")
    run = graph_run(tmp_path, phases, force=["grpo"])  # its old manifest is gone once it starts again
    assert not run.run() and run.states["grpo"].note == "RuntimeError: boom"
    assert run.states["evaluate"].state == "blocked"

    phases.calls.clear()  # fixed: the same command runs the failed phase and what it blocked
    phases.fail.clear()
    assert graph_run(tmp_path, phases).run()
    assert phases.calls == ["reward", "ppo", "grpo", "evaluate"]


def test_only_a_phase_whose_inputs_are_not_done_is_blocked_with_the_reason(tmp_path):
    phases = Phases(Storage.from_uri(str(tmp_path)).child("r"))
    run = graph_run(tmp_path, phases, only=["ppo"])
    assert not run.run() and phases.calls == []
    assert run.states["ppo"].state == "blocked" and "prepare, sft, reward" in run.states["ppo"].note
    assert run.states["grpo"].state == "not selected"


def test_unknown_phase_names_are_one_config_error():
    for key, value in (("only", ["ppo", "xpo"]), ("force", ["x"]), ("start", "y")):
        with pytest.raises(ConfigError, match=f"rlaif.{key}.*unknown phase"):
            load_config(ChessRLConfig, path=None, overrides={f"rlaif.{key}": (value, f"--{key}")})


def test_a_rookworld_grpo_gets_its_own_rookworld_sft_node(tmp_path):
    from pipelines.rlaif import GraphRun, node_config

    phases = Phases(Storage.from_uri(str(tmp_path)).child("r"))
    config = load_config(
        ChessRLConfig,
        path=None,
        overrides={
            "run.storage": (str(tmp_path), "--storage"),
            "grpo.text_format": ("rookworld", "--text-format"),
            "grpo.policy_share": (0.8, "--policy-share"),
            "grpo.own_positions": (0.0, "--own-positions"),
            **JUDGED_PPO,
        },
    )
    run = GraphRun(config, phases.root, lambda _: None, phases)
    assert run.graph.nodes["grpo"].needs == ("prepare", "sft-rookworld")
    assert run.run() and phases.calls == [
        "prepare",
        "sft",
        "preferences",
        "reward",
        "ppo",
        "sft-rookworld",
        "grpo",
        "dpo",
        "evaluate",
    ]
    assert node_config(config, "sft-rookworld", phases.root).sft.text_format == "rookworld"
    assert node_config(config, "sft", phases.root).sft.text_format == "moves"
    assert run.keys["sft-rookworld"] != run.keys["sft"]
    given = config.model_copy(update={"grpo": config.grpo.model_copy(update={"policy": "/models/rw"})})
    assert GraphRun(given, phases.root, lambda _: None, phases).graph.nodes["grpo"].needs == ("prepare",)
    assert "sft-rookworld" not in GraphRun(given, phases.root, lambda _: None, phases).graph.nodes


def test_an_interrupted_phase_resumes_its_own_work_and_an_upstream_rerun_invalidates_downstream(tmp_path):
    root = Storage.from_uri(str(tmp_path)).child("r")
    phases = Phases(root)
    phases.fail["reward"] = KeyboardInterrupt()  # the driver stops during reward
    with pytest.raises(KeyboardInterrupt):
        graph_run(tmp_path, phases).run()
    phases.fail.clear()
    phases.calls.clear()
    phases.found.clear()
    root.child("reward").write_text("out.txt", "half")  # what reward had written before the kill
    assert graph_run(tmp_path, phases).run()
    assert (
        phases.calls == ["reward", "ppo", "grpo", "dpo", "evaluate"] and phases.found["reward"] is True
    )  # resumed

    phases.calls.clear()  # only sft, forced: everything built from the old sft is no longer done
    assert graph_run(tmp_path, phases, only=["sft"], force=["sft"]).run() and phases.calls == ["sft"]
    assert graph_run(tmp_path, phases).run()
    assert phases.calls == ["sft", "preferences", "reward", "ppo", "grpo", "dpo", "evaluate"]


def test_force_of_a_phase_not_in_the_graph_and_a_rookworld_sft_are_config_errors(tmp_path):
    phases = Phases(Storage.from_uri(str(tmp_path)).child("r"))
    with pytest.raises(ConfigError, match="--force sft-rookworld: not a phase of this graph"):
        graph_run(tmp_path, phases, force=["sft-rookworld"])
    from pipelines.rlaif import GraphRun

    config = load_config(
        ChessRLConfig, path=None, overrides={"sft.text_format": ("rookworld", "--text-format")}
    )
    with pytest.raises(ConfigError, match="sft.text_format must be moves"):
        GraphRun(config, phases.root, lambda _: None, phases)


def test_a_board_grpo_gets_its_own_board_sft_node_and_plays_in_the_comparison(tmp_path):
    from pipelines.rlaif import GraphRun, node_config

    phases = Phases(Storage.from_uri(str(tmp_path)).child("r"))
    config = load_config(
        ChessRLConfig,
        path=None,
        overrides={
            "run.storage": (str(tmp_path), "--storage"),
            "grpo.text_format": ("board", "--text-format"),
            **JUDGED_PPO,
        },
    )
    run = GraphRun(config, phases.root, lambda _: None, phases)
    assert run.graph.nodes["grpo"].needs == ("prepare", "sft-board")
    assert "sft-board" in run.graph.nodes["evaluate"].needs  # grpo's start plays in the comparison
    assert node_config(config, "sft-board", phases.root).sft.text_format == "board"
    players = node_config(config, "evaluate", phases.root).evaluate
    assert players.players[1].endswith("grpo/model,masked") and players.players[4].endswith(
        "sft-board/model,masked"
    )
    assert players.adjudicate_cp == config.rlaif.compare_adjudicate_cp and all(
        p.endswith(",masked") for p in players.players if p != "random"
    )
    # grpo plays its own start, ppo and dpo theirs (the sft), and every policy the random mover (5)
    assert players.pairs == ["0-3", "1-4", "2-3", "0-5", "1-5", "2-5", "3-5", "4-5"]


@pytest.mark.parametrize("grpo_format", ["moves", "board"])
def test_a_board_ppo_graded_by_stockfish_starts_from_the_board_sft(tmp_path, grpo_format):
    from pipelines.rlaif import GraphRun, node_config

    phases = Phases(Storage.from_uri(str(tmp_path)).child("r"))
    config = load_config(
        ChessRLConfig,
        path=None,
        overrides={
            "run.storage": (str(tmp_path), "--storage"),
            "ppo.text_format": ("board", "--text-format"),
            "ppo.reward": ("stockfish", "--reward"),
            "grpo.text_format": (grpo_format, "--text-format"),
        },
    )
    run = GraphRun(config, phases.root, lambda _: None, phases)
    assert run.graph.nodes["ppo"].needs == ("prepare", "sft-board")  # no reward model, the board start
    assert "reward" not in run.graph.nodes  # nothing reads a judge, so none is trained
    assert "sft-board" in run.graph.nodes["evaluate"].needs
    assert run.run() and phases.calls.count("sft-board") == 1
    assert phases.calls.index("sft-board") < phases.calls.index("ppo")
    players = node_config(config, "evaluate", phases.root).evaluate
    ppo, board = (
        players.players.index(players.players[0]),
        players.players.index(next(p for p in players.players if p.endswith("sft-board/model,masked"))),
    )
    assert players.players[ppo].endswith("ppo/model,masked") and f"{ppo}-{board}" in players.pairs
    grpo, sft = players.players.index(players.players[1]), 3  # a moves grpo still plays the sft
    assert players.players[sft].endswith("/sft/model,masked")
    assert f"{grpo}-{board if grpo_format == 'board' else sft}" in players.pairs


def test_a_graph_whose_ppo_grades_with_stockfish_trains_no_judge_and_says_so(tmp_path):
    """The tiny and demo presets' ppo grades with Stockfish: their graphs have no reward node,
    naming it is one line, and the story's judge line says why none was trained."""
    from cluster.errors import ConfigError
    from pipelines.rlaif import GraphRun, judge_lines

    phases = Phases(Storage.from_uri(str(tmp_path)).child("r"))
    overrides = {"run.storage": (str(tmp_path), "--storage"), "ppo.reward": ("stockfish", "--reward")}
    config = load_config(ChessRLConfig, path=None, overrides=overrides)
    assert "reward" not in run_graph_names(config) and "preferences" in run_graph_names(config)
    assert "not trained, no phase reads it" in " ".join(judge_lines(config, phases.root))
    for flag, value in (("rlaif.only", ["reward"]), ("rlaif.start", "reward"), ("rlaif.force", ["reward"])):
        bad = load_config(ChessRLConfig, path=None, overrides={**overrides, flag: (value, "--x")})
        with pytest.raises(ConfigError, match="trains no reward model.*ppo.reward=model"):
            GraphRun(bad, phases.root, lambda _: None, phases)
    judged = load_config(ChessRLConfig, path=None, overrides={"ppo.reward": ("model", "--reward")})
    assert "reward" in run_graph_names(judged)  # ppo reads the judge: the seed's path


def test_a_graph_without_offline_dpo_drops_the_pairs_nothing_reads(tmp_path):
    """``rlaif.dpo: false``: no dpo node, in the graph or the comparison; preferences goes too
    when the judge learns from annotate's pairs, stays when it learns from its own; naming a node
    the graph lacks is one line."""
    from pipelines.rlaif import GraphRun, node_config

    phases = Phases(Storage.from_uri(str(tmp_path)).child("r"))
    overrides = {"run.storage": (str(tmp_path), "--storage"), "rlaif.dpo": (False, "--set rlaif.dpo")}
    judged = {**overrides, **JUDGED_PPO}
    config = load_config(ChessRLConfig, path=None, overrides=judged)
    assert "dpo" not in run_graph_names(config) and "preferences" in run_graph_names(config)
    graded = load_config(ChessRLConfig, path=None, overrides=overrides)  # ppo graded by Stockfish
    assert {"dpo", "reward", "preferences"}.isdisjoint(run_graph_names(graded))  # no judge, no pairs
    annotated = {**judged, "reward.source": ("annotate", "--source"), "reward.model": ("tiny", "--model")}
    config = load_config(ChessRLConfig, path=None, overrides=annotated)
    assert {"dpo", "preferences"}.isdisjoint(run_graph_names(config)) and "annotate" in run_graph_names(
        config
    )
    evaluate = node_config(config, "evaluate", phases.root).evaluate
    assert (
        not [p for p in evaluate.players if "/dpo/" in p]
        and len(evaluate.pairs) == 2 + len(evaluate.players) - 1
    )
    for flag, value in (("rlaif.only", ["dpo"]), ("rlaif.force", ["preferences"])):
        bad = load_config(ChessRLConfig, path=None, overrides={**annotated, flag: (value, "--x")})
        with pytest.raises(
            ConfigError, match="no (dpo|preferences) node: rlaif.dpo is false.*rlaif.dpo=true"
        ):
            GraphRun(bad, phases.root, lambda _: None, phases)


def run_graph_names(config: ChessRLConfig) -> list[str]:
    from pipelines.rlaif import graph_nodes

    return [n.name for n in graph_nodes(config)]


def test_a_graph_whose_grpo_starts_from_the_judge_trains_it_on_annotate_and_plays_it(tmp_path):
    """``grpo.start: judge`` (the demo's path): annotate -> reward (a fresh backbone, no sft) ->
    grpo on the judge; the judge plays in the comparison as grpo's start, both as ``judge:``
    players, and the story's judge line says who reads it."""
    from pipelines.rlaif import GraphRun, judge_lines, node_config

    phases = Phases(Storage.from_uri(str(tmp_path)).child("r"))
    overrides = {
        "run.storage": (str(tmp_path), "--storage"),
        "ppo.reward": ("stockfish", "--reward"),
        "ppo.text_format": (None, "--set ppo.text_format"),
        "grpo.start": ("judge", "--start"),
        "reward.source": ("annotate", "--source"),
        "reward.model": ("tiny", "--model"),
    }
    config = load_config(ChessRLConfig, path=None, overrides=overrides)
    run = GraphRun(config, phases.root, lambda _: None, phases)
    nodes = run.graph.nodes
    assert nodes["annotate"].needs == ("prepare",) and nodes["reward"].needs == ("annotate",)
    assert nodes["grpo"].needs == ("prepare", "reward") and "reward" in nodes["evaluate"].needs
    assert "sft-board" not in nodes  # the board format's own sft is not grpo's start any more
    assert run.run() and phases.calls.index("annotate") < phases.calls.index("reward") < phases.calls.index(
        "grpo"
    )
    evaluate = node_config(config, "evaluate", phases.root).evaluate
    grpo = next(i for i, p in enumerate(evaluate.players) if p.endswith("grpo/model"))
    judge = next(i for i, p in enumerate(evaluate.players) if p.endswith("reward/model"))
    assert evaluate.players[grpo].startswith("judge:") and evaluate.players[judge].startswith("judge:")
    assert f"{grpo}-{judge}" in evaluate.pairs and f"{judge}-{len(evaluate.players) - 1}" in evaluate.pairs
    phases.root.child("reward").write_text("summary.json", json.dumps({"heldout_spearman": 0.6}))
    assert "grpo trains it as a policy" in " ".join(judge_lines(config, phases.root))
    # with the sft backbone (no reward.model) the judge reads sft too; and the preferences' pairs
    sft_backed = load_config(
        ChessRLConfig,
        path=None,
        overrides={
            **overrides,
            "reward.model": (None, "--model"),
            "reward.source": ("preferences", "--source"),
        },
    )
    assert GraphRun(sft_backed, phases.root, lambda _: None, phases).graph.nodes["reward"].needs == (
        "preferences",
        "sft",
    )
    assert "annotate" not in run_graph_names(sft_backed)
    for bad, match in (
        ({"grpo.policy": (str(tmp_path), "--policy")}, "grpo.start.*judge.*grpo.policy"),
        ({"reward.base_model": (str(tmp_path), "--base-model")}, "model .*tiny.*base_model"),
    ):
        with pytest.raises(ConfigError, match=match):
            load_config(ChessRLConfig, path=None, overrides={**overrides, **bad})


def test_the_demo_runs_the_judge_s_path():
    """``make demo``'s graph: annotate -> the judge on a fresh backbone -> grpo on the judge and
    ppo graded by it; no sft-board (nothing starts from it)."""
    from cluster.config import resolve_preset
    from pipelines.rlaif import graph_nodes

    demo = load_config(ChessRLConfig, path=resolve_preset("demo"))
    nodes = {n.name: n.needs for n in graph_nodes(demo)}
    assert nodes["reward"] == ("annotate",) and nodes["grpo"] == ("prepare", "reward")
    assert "reward" in nodes["ppo"] and "sft" in nodes["ppo"] and "sft-board" not in nodes


def test_the_judge_preset_runs_the_seed_s_path():
    """``--config judge``: annotate -> the judge on a fresh backbone -> ppo of the board sft
    graded by it, with the anchored settings."""
    from cluster.config import resolve_preset
    from pipelines.rlaif import graph_nodes, node_config

    judge = load_config(ChessRLConfig, path=resolve_preset("judge"))
    nodes = {n.name: n.needs for n in graph_nodes(judge)}
    assert nodes["annotate"] == ("prepare",) and nodes["reward"] == ("annotate",)
    assert {"reward", "sft-board"} <= set(nodes["ppo"]) and "ppo" in nodes["evaluate"]
    assert {"dpo", "preferences"}.isdisjoint(nodes)  # the chain: no offline dpo
    ppo = node_config(judge, "ppo", Storage.from_uri("/r").child("j")).ppo
    assert ppo.reward == "model" and ppo.reward_model is None  # the phase reads <run>/reward/model
    assert (ppo.samples_per_state, ppo.anchor_coef, ppo.text_format) == (16, 0.2, "board")
    evaluate = node_config(judge, "evaluate", Storage.from_uri("/r").child("j")).evaluate
    assert (evaluate.ladder, evaluate.suites, evaluate.quality_nodes) == (False, [], 0)


def test_the_judge_path_s_missing_inputs_are_one_line_each(tmp_path):
    """``reward --source annotate`` before annotate ran, and ``grpo --start judge`` before reward
    ran: each one error naming the folder and the command that writes it; inside a graph that
    writes them first, both are taken as given."""
    from pipelines.common.phase import Inputs
    from pipelines.grpo import check_grpo
    from pipelines.reward_inputs import check_reward

    overrides = {
        "run.storage": (str(tmp_path), "--storage"),
        "run.name": ("r", "--run-name"),
        "reward.source": ("annotate", "--source"),
        "reward.model": ("tiny", "--model"),
        "grpo.start": ("judge", "--start"),
    }
    config = load_config(ChessRLConfig, path=None, overrides=overrides)
    with pytest.raises(
        StorageError,
        match=r"reward.source is annotate, but .*r/annotate/pairs holds no pairs.*chess-rl annotate",
    ):
        check_reward(config, Inputs.of(config))
    with pytest.raises(StorageError, match=r"no model at .*r/reward/model: run `chess-rl reward` first"):
        check_grpo(config, Inputs.of(config))
    found = check_reward(config, Inputs.of(config, frozenset({"annotate"})))
    assert (found.base, found.base_config, found.preferences) == (
        "",
        None,
        None,
    )  # a fresh backbone, pairs to come
    assert check_grpo(config, Inputs.of(config, frozenset({"reward", "prepare"}))).policy.endswith(
        "r/reward/model"
    )

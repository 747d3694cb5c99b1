"""The rlaif graph itself, apart from its run: the phases and the inputs each reads
(:data:`NODES`, rewritten for a config by :func:`graph_nodes`), the ``Phase`` each node runs
(:func:`phase_module`), the config it runs with (:func:`node_config`, the evaluate node's players
from :func:`comparison_players`), each node's key (:func:`node_keys`) and its output folder.
:mod:`pipelines.rlaif` runs it (``GraphRun``) and re-exports every name here.

    nodes = graph_nodes(config)                    # NODES, for this config
    graph = Graph(nodes)
    keys = node_keys(graph, config, run_storage)   # {"prepare": "3f0c...", "sft": ...}
    phase_module("sft-board").name                 # 'sft': the extra sft nodes run the sft phase
"""

from __future__ import annotations

from cluster.graph import Graph, Node
from cluster.storage import Storage
from pipelines.common.artifacts import ONLINE_DPO
from pipelines.common.phase import Phase
from pipelines.config import ChessRLConfig

#: The graph: each phase and the phases whose outputs it reads.
NODES: tuple[Node, ...] = (
    Node("prepare"),
    Node("sft", ("prepare",)),
    Node("preferences", ("prepare", "sft")),
    Node("reward", ("preferences", "sft")),
    Node("ppo", ("prepare", "sft", "reward")),
    Node("grpo", ("prepare", "sft")),
    Node("dpo", ("prepare", "sft", "preferences")),
    Node("evaluate", ("sft", "ppo", "grpo", "dpo")),
)
#: The extra node of a rookworld grpo with no policy of its own: ``sft --text-format rookworld``.
ROOKWORLD_SFT = "sft-rookworld"
#: ... and of a board grpo: ``sft --text-format board``.
BOARD_SFT = "sft-board"
#: The extra sft node each grpo text format starts from (the moves format uses the graph's sft).
FORMAT_SFT = {"rookworld": ROOKWORLD_SFT, "board": BOARD_SFT}


def graph_nodes(config: ChessRLConfig) -> tuple[Node, ...]:
    """:data:`NODES`, with grpo starting from an sft of its own text format (an extra node, the
    ``sft`` phase with ``text_format: rookworld`` or ``board``) when ``grpo.text_format`` is not
    moves and no ``grpo.policy`` is given, or from a given policy (then it reads only the
    games), or from the judge (``grpo.start: judge``: it reads the reward node's model, and the
    judge plays in the comparison). With ``rlaif.online_dpo``, an ``online-dpo`` node (grpo with
    ``loss_type: dpo``) needs what grpo needs, and evaluate reads it; with ``rlaif.dpo: false`` the
    offline dpo node is left out (and evaluate does not read it); a ppo graded by Stockfish
    (``ppo.reward: stockfish``) does not need the reward model, and a board ppo
    (``ppo.text_format: board``, no ``ppo.policy``) starts from the sft-board node instead of
    sft. The reward node reads ``reward.source``'s pairs (an ``annotate`` node, after prepare,
    with ``annotate``) and sft's model unless it trains a fresh backbone (``reward.model``). A
    judge nothing reads is not trained: with ``ppo.reward: stockfish`` and ``grpo.start: sft``
    the graph has no reward node (``chess-rl reward`` trains one alone); nor are preference pairs
    nothing reads (no dpo, a judge on annotate's pairs)."""
    out: list[Node] = []
    judge_start = config.grpo.start == "judge"
    extra = None if config.grpo.policy or judge_start else FORMAT_SFT.get(config.grpo.text_format)
    board_ppo = ppo_board_start(config)
    for n in NODES:
        if n.name == "dpo" and not config.rlaif.dpo:
            continue
        if n.name == "ppo" and board_ppo:  # the board sft node, before ppo (and grpo) read it
            out.append(Node(BOARD_SFT, ("prepare",)))
        if n.name == "reward":
            if config.reward.source == "annotate":
                out.append(Node("annotate", ("prepare",)))
            out.append(Node("reward", (config.reward.source,) + (() if config.reward.model else ("sft",))))
        elif n.name == "grpo":
            start = (
                ("reward",) if judge_start else (extra,) if extra else () if config.grpo.policy else ("sft",)
            )
            grpo = Node("grpo", ("prepare", *start))
            out += [Node(extra, ("prepare",))] if extra and not (board_ppo and extra == BOARD_SFT) else []
            out.append(grpo)
            if config.rlaif.online_dpo:
                out.append(Node(ONLINE_DPO, grpo.needs))
        elif n.name == "ppo":
            needs = tuple(x for x in n.needs if x != "reward" or config.ppo.reward != "stockfish")
            out.append(Node("ppo", tuple(BOARD_SFT if x == "sft" and board_ppo else x for x in needs)))
        elif n.name == "evaluate":
            needs = tuple(x for x in n.needs if x != "dpo" or config.rlaif.dpo)
            needs += (BOARD_SFT,) if extra == BOARD_SFT or board_ppo else ()
            needs += ("reward",) if judge_start else ()
            out.append(Node("evaluate", needs + ((ONLINE_DPO,) if config.rlaif.online_dpo else ())))
        else:
            out.append(n)
    while True:  # until nothing more drops out: a judge left out reads no pairs either
        read = {need for node in out for need in node.needs}
        kept = [n for n in out if n.name not in ("reward", "annotate", "preferences") or n.name in read]
        if len(kept) == len(out):
            return tuple(out)
        out = kept


def phase_module(name: str) -> Phase:
    """The ``Phase`` of ``pipelines.<name>`` (``sft-rookworld``, ``sft-board``: the sft phase;
    ``online-dpo``: the grpo phase)."""
    import importlib

    name = "sft" if name in FORMAT_SFT.values() else "grpo" if name == ONLINE_DPO else name
    return importlib.import_module(f"pipelines.{name}").PHASE  # type: ignore[no-any-return]


def ppo_board_start(config: ChessRLConfig) -> bool:
    """Whether ppo starts from the graph's sft-board node: it reads the board format and is
    given no policy of its own."""
    return config.ppo.text_format == "board" and not config.ppo.policy


def node_config(config: ChessRLConfig, name: str, run_storage: Storage) -> ChessRLConfig:
    """The config a node runs with: the same config, except that ``sft-rookworld`` trains the
    rookworld format and ``evaluate`` compares this run's ppo, grpo and dpo (unless ``rlaif.dpo``
    is false) policies with their starts and a random mover."""
    for text_format, node in FORMAT_SFT.items():
        if name == node:
            return config.model_copy(
                update={"sft": config.sft.model_copy(update={"text_format": text_format})}
            )
    if name == ONLINE_DPO:
        return config.model_copy(update={"grpo": config.grpo.model_copy(update={"loss_type": "dpo"})})
    if name != "evaluate":
        return config
    players, _, starts = comparison_players(config, run_storage)
    index = {p: i for i, p in enumerate(players)}
    pairs = [f"{index[rl]}-{index[start]}" for rl, start in starts.items()]
    pairs += [f"{i}-{index['random']}" for i, p in enumerate(players) if p != "random"]
    evaluate = config.evaluate.model_copy(
        update={
            "players": players,
            "mode": "round_robin",
            "pairs": pairs,
            "games": config.rlaif.compare_games,
            "adjudicate_cp": config.rlaif.compare_adjudicate_cp,
        }
    )
    return config.model_copy(update={"evaluate": evaluate})


def comparison_players(
    config: ChessRLConfig, run_storage: Storage
) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """The comparison's players (the ppo, grpo, online-dpo (with ``rlaif.online_dpo``) and dpo
    (unless ``rlaif.dpo`` is false) policies, the sft start, a board grpo's or board ppo's sft-board start, the judge when grpo
    starts from it, a random mover; language models masked, scorers as ``judge:`` players), their
    printed names, and each RL policy's start. Each RL policy plays its start and the random mover, each start the random mover."""

    judge_start = config.grpo.start == "judge"

    def model(phase: str, scorer: bool = False) -> str:
        folder = run_storage.child(phase).child("model")
        where = folder.root if folder.is_local else folder.uri
        return f"judge:{where}" if scorer else f"lm:{where},masked"

    ppo, grpo, dpo, sft = model("ppo"), model("grpo", judge_start), model("dpo"), model("sft")
    labels = {ppo: "ppo", grpo: "grpo", dpo: "dpo", sft: "sft"}
    starts = {ppo: sft, grpo: sft, dpo: sft} if config.rlaif.dpo else {ppo: sft, grpo: sft}
    players = [ppo, grpo, dpo, sft] if config.rlaif.dpo else [ppo, grpo, sft]
    if judge_start:  # grpo trains the judge, read as a policy: the judge plays as its start
        judge = model("reward", scorer=True)
        players.append(judge)
        labels[judge], starts[grpo] = "judge", judge
    board_grpo = config.grpo.text_format == "board" and not config.grpo.policy and not judge_start
    if board_grpo or ppo_board_start(config):  # the board start plays too
        board = model(BOARD_SFT)
        players.append(board)
        labels[board] = BOARD_SFT
        if board_grpo:
            starts[grpo] = board
        if ppo_board_start(config):
            starts[ppo] = board
    if config.rlaif.online_dpo:  # beside grpo, from grpo's start
        online = model(ONLINE_DPO, judge_start)
        players.insert(players.index(grpo) + 1, online)
        labels[online], starts[online] = ONLINE_DPO, starts[grpo]
    return [*players, "random"], labels, starts


def node_keys(graph: Graph, config: ChessRLConfig, run_storage: Storage) -> dict[str, str]:
    """Each node's key from its config section, the run's seed, sft's held-out split (which
    preferences, ppo and grpo read too) and its inputs' keys."""
    configs = {}
    for name in graph.order():
        section = getattr(node_config(config, name, run_storage), phase_module(name).section)
        configs[name] = {
            "section": section.model_dump(mode="json"),
            "seed": config.run.seed,
            "heldout_fraction": config.sft.heldout_fraction,
        }
    return graph.keys(configs)


def output_folder(config: ChessRLConfig, name: str) -> str:
    """The folder under the run that holds a node's outputs and its own checkpoints."""
    if name == "evaluate":
        return f"evaluate/{config.evaluate.name}"
    return name

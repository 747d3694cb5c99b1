"""sft's training data: the games' texts in each text format, tokenised and packed into blocks in
Ray Data (with the legal-move targets and the board format's answer marks), and, for
distillation, annotate's positions as soft targets over the legal moves (one block per board
example, or whole annotated games in the moves format), mixed with the games' blocks.

    found = check_sft(config, Inputs.of(config))           # pipelines.sft
    dataset, blocks, tokens, cut, positions = training_data(config.sft, found, split, seed, print)

:mod:`pipelines.sft` is the phase: it checks the inputs, splits the games, calls
:func:`training_data` and hands the dataset to its Ray Train learner.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chessrl.lm.formats import BoardFormat
from chessrl.lm.lm_data import pack_games, rookworld_texts, training_text
from cluster.storage import Storage
from pipelines.config import SftConfig
from pipelines.learner import trl as trl_learner

if TYPE_CHECKING:  # torch loads in the Ray Data tasks that need it
    from chessrl.lm.legality import MoveTokens


def answer_token(tokenizer: Any) -> int:
    """The token after which the board format's answer starts: the last token of `` M:`` (one
    token with the chess tokenizer, ``:`` with a BPE one; the board prompt has no other)."""
    return int(tokenizer(" M:", add_special_tokens=False)["input_ids"][-1])


def tokenize_and_pack(
    batch: dict[str, Any],
    tokenizer: Any,
    block: int,
    legal: MoveTokens | None = None,
    answer_after: int | None = None,
) -> dict[str, Any]:
    """Ray Data stage: game texts -> ``<bos> game <eos>`` token ids -> blocks of whole games.

    Each row is one block right-padded to ``block`` (``input_ids``) with its real length
    (``length``) and the number of games in the batch cut to ``block`` tokens (``truncated``, on
    the batch's first row). With ``legal``, also the legal moves at every position for the
    legal-move loss: ``legal_counts`` (``block`` counts) and ``legal_moves`` (their token ids,
    flat, one variable-length array per row). With ``answer_after`` (a token id: the board
    format's ``M:``), ``targets`` (``block`` flags) marks the tokens the loss is on: those after
    the last ``answer_after`` of each text, its ``<eos>`` included — the answer, not the prompt.
    """
    import numpy as np

    start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids = tokenizer([str(t) for t in batch["text"]], add_special_tokens=False)["input_ids"]
    packed, truncated = pack_games([[start, *seq, tokenizer.eos_token_id] for seq in ids], block)
    rows = np.full((len(packed), block), pad, dtype=np.int32)
    for i, tokens in enumerate(packed):
        rows[i, : len(tokens)] = tokens
    counts = np.zeros(len(packed), dtype=np.int32)
    if len(packed):
        counts[0] = truncated
    out = {
        "input_ids": rows,
        "length": np.asarray([len(tokens) for tokens in packed], dtype=np.int32),
        "truncated": counts,
    }
    if answer_after is not None:
        marks = np.zeros((len(packed), block), dtype=np.uint8)
        for i, tokens in enumerate(packed):
            after = False
            for j, token in enumerate(tokens):
                if token == start:
                    after = False
                elif token == answer_after:
                    after = True
                elif after:
                    marks[i, j] = 1
        out["targets"] = marks
    if legal is not None:
        from chessrl.lm.legality import legal_move_targets

        targets = [legal_move_targets(row, legal, start) for row in rows.tolist()]
        out["legal_counts"] = np.asarray([c for _, c in targets], dtype=np.uint8).reshape(len(rows), block)
        flat = np.empty(len(rows), dtype=object)
        flat[:] = [np.asarray(f, dtype=np.int16) for f, _ in targets]
        out["legal_moves"] = flat
    return out


def training_texts(cfg: SftConfig, rows: Sequence[dict[str, Any]], seed: int) -> list[dict[str, str]]:
    """The training texts of ``rows`` (games) in the configured text format, seeded."""
    if cfg.text_format in ("rookworld", "board"):
        rng = random.Random(seed)
        rookworld = cfg.text_format == "rookworld"
        return [
            {"text": text}
            for r in rows
            for text in rookworld_texts(
                str(r["moves"]).split(),
                cfg.rookworld_positions_per_game,
                env_share=cfg.rookworld_env_share if rookworld else 0.0,
                rng=rng,
                fmt=None if rookworld else BoardFormat(),
            )
        ]
    return [
        {"text": training_text(r["moves"], r["result"], condition_on_result=cfg.condition_on_result)}
        for r in rows
    ]


def board_example_tokens(tokenizer: Any) -> int:
    """The tokens of the longest board example (all four castling rights and an en passant
    square), ``<bos>`` and ``<eos>`` included: a block shorter than this cuts every example."""
    import chess

    board = chess.Board("rnbqkbnr/ppp1pppp/8/8/3pP3/8/PPPP1PPP/RNBQKBNR b KQkq e3 0 3")
    return len(tokenizer(BoardFormat().policy_text(board, "d4e3"), add_special_tokens=False)["input_ids"]) + 2


SoftExample = tuple[list[int], list[int], list[tuple[int, list[int], Any]]]
"""One example of distillation: its token ids, the positions of its targets, and its soft
targets (the position whose logits predict the move, the legal moves' ids, their probabilities)."""


@dataclass(frozen=True)
class SftInputs:
    """What ``sft`` reads, checked: the tokenizer (of the base model or the preset), the model's
    context, the legal-move loss's move tokens and weight, and the games table."""

    tokenizer: Any
    n_positions: int
    legal_moves: MoveTokens | None
    legal_weight: float
    games: Storage
    annotations: Storage | None = None  # annotate's train/ shards, for distillation
    move_tokens: MoveTokens | None = None  # the soft targets' move ids (with annotations)


@dataclass(frozen=True)
class SftSplit:
    """The games table split by ``game_id``: training games, held-out games, duplicates skipped,
    and the held-out positions the learner measures."""

    train_rows: list[dict[str, Any]]
    held_rows: list[dict[str, Any]]
    duplicates: int
    heldout: list[Any]


def packed_blocks(texts: list[dict[str, str]], cfg: SftConfig, found: SftInputs) -> tuple[Any, int, int, int]:
    """The training texts tokenised and packed into blocks of ``max_length`` tokens in Ray Data,
    before training starts (the trainer's workers may take every CPU): the dataset, its blocks,
    its game tokens and the games cut to a block's length."""
    import ray.data

    trl_learner.configure_ray_data()
    dataset = (
        ray.data.from_items(texts)
        .map_batches(
            tokenize_and_pack,
            fn_kwargs={
                "tokenizer": found.tokenizer,
                "block": cfg.max_length,
                "legal": found.legal_moves,
                "answer_after": answer_token(found.tokenizer) if cfg.text_format == "board" else None,
            },
            batch_size=512,
            batch_format="numpy",
        )
        .materialize()
    )
    tokens, truncated = column_sums(dataset, ("length", "truncated"))
    return dataset, dataset.count(), tokens, truncated


def column_sums(dataset: Any, columns: Sequence[str]) -> list[int]:
    """The sums of integer columns of a materialized dataset, read on the driver from its blocks in
    the object store: Ray Data's ``sum`` would run an aggregation (two new worker processes, ~3 s
    on 2 CPUs) for a few numbers. (On a cluster the blocks travel to the driver's node once: fine
    for sft's tables of thousands of blocks.)"""
    import pyarrow.compute as pc

    totals = [0] * len(columns)
    for batch in dataset.iter_batches(batch_size=None, batch_format="pyarrow"):
        for i, column in enumerate(columns):
            totals[i] += int(pc.sum(batch.column(column)).as_py() or 0)
    return totals


def annotated_blocks(
    batch: dict[str, Any], tokenizer: Any, block: int, moves: MoveTokens, temperature: float, flip: bool
) -> dict[str, Any]:
    """Ray Data stage: annotated positions -> blocks of board examples with soft move targets.

    Each position (and, with ``flip``, its colour-flipped twin) becomes ``<bos> <board> M:
    <best move> <eos>``, its answer the target (``targets``); at the token before the move, the
    soft target over its legal moves (:func:`chessrl.lm.legality.soft_targets` of their expected
    scores): ``legal_counts`` (``block`` counts), ``legal_moves`` (their token ids, flat) and
    ``legal_weights`` (their probabilities, flat). Examples are packed whole, in order, as many
    to a block as fit; ``length`` and ``truncated`` as :func:`tokenize_and_pack`'s.
    """
    import chess

    from chessrl.engine.annotation import Annotation
    from chessrl.lm.legality import soft_targets

    fmt = BoardFormat()
    start, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    examples: list[SoftExample] = []
    for fen, move_list, expected in zip(batch["fen"], batch["moves"], batch["expected"], strict=True):
        if len(move_list) == 0:  # a finished game: nothing to answer
            continue
        record = Annotation(
            str(fen), tuple(str(m) for m in move_list), (), tuple(float(e) for e in expected), 0, 0.0
        )
        for a in (record, record.mirrored()) if flip else (record,):
            board = chess.Board(a.fen)
            ids = [
                start,
                *tokenizer(fmt.policy_text(board, a.moves[0]), add_special_tokens=False)["input_ids"],
                eos,
            ]
            legal = [moves.token(chess.Move.from_uci(m)) for m in a.moves]
            if ids[-2] != legal[0]:  # the loss reads the move's logits at the token before it
                raise ValueError(f"the board text of {a.fen!r} does not end in its move's one token")
            n = len(ids)  # the move and <eos> are the targets; the soft one where the move is predicted
            examples.append((ids, [n - 2, n - 1], [(n - 3, legal, soft_targets(a.expected, temperature))]))
    return soft_target_blocks(examples, block, pad)


def soft_target_blocks(examples: Sequence[SoftExample], block: int, pad: int, truncated: int = 0) -> dict[str, Any]:
    """Examples packed whole, in order, as many to a block as fit: ``input_ids``, ``length``,
    ``truncated`` (``truncated`` on the first block), ``targets`` (1 where a token is a target),
    ``legal_counts`` (the legal moves' count where the logits have a soft target), and
    ``legal_moves`` / ``legal_weights`` (their ids and probabilities, flat, in position order)."""
    import numpy as np

    rows: list[list[SoftExample]] = [[]]
    for example in examples:
        if sum(len(e[0]) for e in rows[-1]) + len(example[0]) > block:
            rows.append([])
        rows[-1].append(example)
    rows = [r for r in rows if r]
    out_ids = np.full((len(rows), block), pad, dtype=np.int32)
    targets = np.zeros((len(rows), block), dtype=np.uint8)
    counts = np.zeros((len(rows), block), dtype=np.uint8)
    flat_moves, flat_weights, lengths = [], [], []
    for i, row in enumerate(rows):
        at, legal_ids, weights = 0, [], []
        for ids, target_at, slots in row:
            out_ids[i, at : at + len(ids)] = ids
            targets[i, [min(at + t, block - 1) for t in target_at]] = 1
            for t, legal, soft in slots:
                counts[i, at + t] = len(legal)
                legal_ids.extend(legal)
                weights.extend(soft.tolist())
            at += len(ids)
        lengths.append(at)
        flat_moves.append(np.asarray(legal_ids, dtype=np.int16))
        flat_weights.append(np.asarray(weights, dtype=np.float32))
    moves_column, weights_column = np.empty(len(rows), dtype=object), np.empty(len(rows), dtype=object)
    moves_column[:], weights_column[:] = flat_moves, flat_weights
    cut = np.zeros(len(rows), np.int32)
    if len(rows):
        cut[0] = truncated
    return {
        "input_ids": out_ids, "length": np.asarray(lengths, dtype=np.int32), "truncated": cut,
        "targets": targets, "legal_counts": counts, "legal_moves": moves_column, "legal_weights": weights_column,
    }  # fmt: skip


def annotated_games(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Annotated positions (``game_id``, ``ply``, ``history``, ``moves``, ``expected``) chained
    into games: a game's positions in ply order, each one whose history continues the game so
    far joining it (a position that does not starts a new game). Each game: ``moves`` (its UCI
    moves up to its last annotated position), and for each annotated ply, in order, ``plies``
    (the ply), ``legal`` (its legal moves) and ``expected`` (their expected scores). Finished
    positions (no legal move) are left out; a ply seen twice counts once.

    >>> rows = [{"game_id": "g", "ply": p, "history": h, "moves": ["a2a3"], "expected": [0.5]}
    ...         for p, h in [(1, "e2e4"), (0, ""), (2, "e2e4 e7e5"), (1, "d2d4")]]
    >>> [(g["moves"], g["plies"]) for g in annotated_games(rows)]
    [(['e2e4', 'e7e5'], [0, 1, 2]), (['d2d4'], [1])]
    """
    by_game: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row.get("history") is not None and len(row["moves"]):
            by_game.setdefault(str(row["game_id"]), []).append(row)
    games: list[dict[str, Any]] = []
    for group in by_game.values():
        open_games: list[dict[str, Any]] = []
        for row in sorted(group, key=lambda r: int(r["ply"])):
            history = str(row["history"]).split()
            for game in open_games:
                if len(history) > game["plies"][-1] and history[: len(game["moves"])] == game["moves"]:
                    break
            else:
                game = {"moves": [], "plies": [], "legal": [], "expected": []}
                open_games.append(game)
            game["moves"] = history
            game["plies"].append(len(history))
            game["legal"].append([str(m) for m in row["moves"]])
            game["expected"].append([float(e) for e in row["expected"]])
        games.extend(open_games)
    return games


def annotated_game_blocks(
    batch: dict[str, Any], tokenizer: Any, block: int, moves: MoveTokens, temperature: float
) -> dict[str, Any]:
    """Ray Data stage: annotated games (:func:`annotated_games`) -> blocks of ``<bos> <moves>``
    with a soft target over the legal moves at every annotated ply (the token before that ply's
    move; the spaced form after the first move) and no hard target; the columns of
    :func:`annotated_blocks`. A game longer than a block is cut to it (``truncated``)."""
    import chess

    from chessrl.lm.legality import soft_targets

    start = tokenizer.bos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    examples: list[SoftExample] = []
    cut = 0
    for game_moves, plies, legal_lists, expected_lists in zip(
        batch["moves"], batch["plies"], batch["legal"], batch["expected"], strict=True
    ):
        ids = [start] + [moves.token(chess.Move.from_uci(str(m)), spaced=i > 0) for i, m in enumerate(game_moves)]
        slots = []
        for ply, legal, expected in zip(plies, legal_lists, expected_lists, strict=True):
            ply = int(ply)
            if ply >= block - 1:
                continue
            legal_ids = [moves.token(chess.Move.from_uci(str(m)), spaced=ply > 0) for m in legal]
            slots.append((ply, legal_ids, soft_targets([float(e) for e in expected], temperature)))
        cut += len(ids) > block
        if slots:  # the move after each slot is its target (counted once: the soft loss replaces it)
            examples.append((ids[: max(p for p, _, _ in slots) + 1], [p + 1 for p, _, _ in slots], slots))
    return soft_target_blocks(examples, block, pad, cut)


def packed_annotations(cfg: SftConfig, found: SftInputs) -> tuple[Any, int, int, int, int]:
    """The annotated positions read and packed in Ray Data (:func:`annotated_blocks`; in the
    moves format chained into games first, :func:`annotated_games`, then
    :func:`annotated_game_blocks`): the dataset, its blocks, its tokens, the games cut to a
    block, and the positions read."""
    import ray.data

    trl_learner.configure_ray_data()
    assert found.annotations is not None and found.move_tokens is not None
    if cfg.text_format == "moves":
        return packed_annotated_games(cfg, found)
    table = ray.data.read_parquet(
        [folder.path() for folder in found.annotations],
        filesystem=found.annotations[0].fs,
        columns=["fen", "moves", "expected"],
    )
    positions = table.count()
    dataset = table.map_batches(
        annotated_blocks,
        fn_kwargs={
            "tokenizer": found.tokenizer,
            "block": cfg.max_length,
            "moves": found.move_tokens,
            "temperature": cfg.target_temperature,
            "flip": cfg.flip,
        },  # fmt: skip
        batch_size=512,
        batch_format="numpy",
    ).materialize()
    (tokens,) = column_sums(dataset, ("length",))
    return dataset, dataset.count(), tokens, 0, positions


def packed_annotated_games(cfg: SftConfig, found: SftInputs) -> tuple[Any, int, int, int, int]:
    """The moves format's :func:`packed_annotations`: the tables read on the driver (a game's
    positions may lie in several shards), chained, then packed in Ray Data."""
    import pyarrow.dataset as pads
    import ray.data

    assert found.annotations is not None and found.move_tokens is not None
    import pyarrow as pa

    table = pa.concat_tables(
        pads.dataset(folder.path(), filesystem=folder.fs, format="parquet").to_table(
            columns=["game_id", "ply", "history", "moves", "expected"]
        )
        for folder in found.annotations
    )
    games = annotated_games(table.to_pylist())
    dataset = (
        ray.data.from_items(games)
        .map_batches(
            annotated_game_blocks,
            fn_kwargs={
                "tokenizer": found.tokenizer, "block": cfg.max_length, "moves": found.move_tokens,
                "temperature": cfg.target_temperature,
            },  # fmt: skip
            batch_size=256,
            batch_format="numpy",
        )
        .materialize()
    )
    tokens, truncated = column_sums(dataset, ("length", "truncated"))
    return dataset, dataset.count(), tokens, truncated, table.num_rows


def with_game_blocks(
    annotated: Any, counts: tuple[int, int, int], games: tuple[Any, int, int, int], seed: int
) -> tuple[Any, int, int, int]:
    """The annotated games' blocks and the games table's (:func:`packed_blocks`, given the
    columns of :func:`soft_target_blocks`: every real token a target, no soft target) as one
    dataset, its Ray Data blocks in a seeded order (the learner's local shuffle mixes the rows):
    the dataset, its blocks, its tokens, the games cut."""
    import numpy as np

    games_data, blocks, tokens, cut = games

    def as_soft_blocks(batch: dict[str, Any]) -> dict[str, Any]:
        rows = len(batch["input_ids"])
        zeros = np.empty(rows, dtype=object)
        zeros[:] = [np.zeros(len(m), dtype=np.float32) for m in batch["legal_moves"]]
        moves = np.empty(rows, dtype=object)
        moves[:] = [np.asarray(m, dtype=np.int16) for m in batch["legal_moves"]]
        return {
            **batch, "targets": np.ones(batch["input_ids"].shape, dtype=np.uint8), "legal_moves": moves,
            "legal_weights": zeros, "legal_counts": batch["legal_counts"].astype(np.uint8),
        }  # fmt: skip

    mixed = annotated.union(games_data.map_batches(as_soft_blocks, batch_format="numpy"))
    mixed = mixed.randomize_block_order(seed=seed).materialize()  # rows mix in the learner's local shuffle
    return mixed, counts[0] + blocks, counts[1] + tokens, counts[2] + cut


def training_data(
    cfg: SftConfig, found: SftInputs, split: SftSplit, seed: int, log: Any
) -> tuple[Any, int, int, int, int]:
    """The learner's blocks in Ray Data, said in the log: the games' texts packed, or the
    annotated positions (:func:`packed_annotations`; in the moves format with ``with_games``,
    the games' blocks shuffled in). Returns the dataset, its blocks, its tokens, the games cut
    to a block, and the annotated positions read (0 without annotations)."""
    positions = 0
    if found.annotations is not None:
        dataset, blocks, game_tokens, truncated, positions = packed_annotations(cfg, found)
        if cfg.text_format == "moves" and cfg.with_games:
            texts = training_texts(cfg, split.train_rows, seed)
            dataset, blocks, game_tokens, truncated = with_game_blocks(
                dataset, (blocks, game_tokens, truncated), packed_blocks(texts, cfg, found), seed
            )
            log(f"beside them {len(split.train_rows):,} training games (the played moves, hard targets)")
        log(
            f"distilling {positions:,} annotated positions"
            + (" and their colour flips" if cfg.flip and cfg.text_format == "board" else "")
            + (" (whole games: a soft target at every annotated ply)" if cfg.text_format == "moves" else "")
            + " "
            f"from {', '.join(f.uri for f in found.annotations)} (soft targets at temperature {cfg.target_temperature:g}); "
            f"{len(split.held_rows):,} held-out games ({len(split.heldout)} positions) from {found.games.uri}"
        )
    else:
        texts = training_texts(cfg, split.train_rows, seed)
        log(
            f"{len(split.train_rows):,} training games, {len(split.held_rows):,} held out ({len(split.heldout)} positions) "
            f"from {found.games.uri}"
            + (f" ({split.duplicates:,} duplicate games skipped)" if split.duplicates else "")
        )
        dataset, blocks, game_tokens, truncated = packed_blocks(texts, cfg, found)
    return dataset, blocks, game_tokens, truncated, positions

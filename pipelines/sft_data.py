"""sft's training data: the games' texts in each text format, tokenised and packed into blocks in
Ray Data (with the legal-move targets and the board and facts formats' answer marks), and, for
distillation, annotate's positions as soft targets over the legal moves (board or facts examples
packed whole, or whole annotated games in the moves format), mixed with the games' blocks.

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

from chessrl.lm.formats import get_format
from chessrl.lm.lm_data import pack_games, rookworld_texts, training_text
from cluster.errors import ConfigError
from cluster.storage import Storage
from pipelines.config import SftConfig
from pipelines.learner import trl as trl_learner

if TYPE_CHECKING:  # torch loads in the Ray Data tasks that need it
    from chessrl.engine.move_value import ValueScale
    from chessrl.lm.legality import MoveTokens

#: The text formats that ask a position and learn the answer alone (``M:`` then the move).
POSITION_FORMATS: tuple[str, ...] = ("board", "facts")


def answer_token(tokenizer: Any) -> int:
    """The token after which the board (or facts) format's answer starts: the last token of
    `` M:`` (one token with the chess tokenizer, ``:`` with a BPE one; the prompts have no other)."""
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
    (``length``), the number of games in the batch cut to ``block`` tokens (``truncated``) and
    the longest text's tokens before any cut (``longest``), both on the batch's first row. With
    ``legal``, also the legal moves at every position for the legal-move loss: ``legal_counts``
    (``block`` counts) and ``legal_moves`` (their token ids, flat, one variable-length array per
    row). With ``answer_after`` (a token id: the board and facts formats' ``M:``), ``targets``
    (``block`` flags) marks the tokens the loss is on: those after the last ``answer_after`` of
    each text, its ``<eos>`` included — the answer, not the prompt.
    """
    import numpy as np

    start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids = tokenizer([str(t) for t in batch["text"]], add_special_tokens=False)["input_ids"]
    packed, truncated = pack_games([[start, *seq, tokenizer.eos_token_id] for seq in ids], block)
    rows = np.full((len(packed), block), pad, dtype=np.int32)
    for i, tokens in enumerate(packed):
        rows[i, : len(tokens)] = tokens
    counts, longest = np.zeros(len(packed), dtype=np.int32), np.zeros(len(packed), dtype=np.int32)
    if len(packed):
        counts[0], longest[0] = truncated, max(len(seq) + 2 for seq in ids)
    out = {
        "input_ids": rows,
        "length": np.asarray([len(tokens) for tokens in packed], dtype=np.int32),
        "truncated": counts,
        "longest": longest,
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
    """The training texts of ``rows`` (games) in the configured text format, seeded: whole games
    (moves), or positions cut from them (rookworld, board, facts; a facts prompt is computed from
    the position's board)."""
    if cfg.text_format in ("rookworld", *POSITION_FORMATS):
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
                fmt=None if rookworld else get_format(cfg.text_format),  # type: ignore[arg-type]
            )
        ]
    return [
        {"text": training_text(r["moves"], r["result"], condition_on_result=cfg.condition_on_result)}
        for r in rows
    ]


def board_example_tokens(tokenizer: Any, text_format: str = "board") -> int:
    """The tokens of the longest board example (all four castling rights and an en passant
    square), ``<bos>`` and ``<eos>`` included: a block shorter than this cuts every example. For
    ``facts`` the same position's example, a lower bound only (its length grows with the moves
    that have facts: the data's longest is checked after packing, :func:`check_fits`).

    >>> from chessrl.lm.tokenizer import build_chess_tokenizer
    >>> board_example_tokens(build_chess_tokenizer()), board_example_tokens(build_chess_tokenizer(), "facts")
    (79, 219)
    """
    import chess

    board = chess.Board("rnbqkbnr/ppp1pppp/8/8/3pP3/8/PPPP1PPP/RNBQKBNR b KQkq e3 0 3")
    text = get_format(text_format).policy_text(board, "d4e3")  # type: ignore[union-attr]
    return len(tokenizer(text, add_special_tokens=False)["input_ids"]) + 2


def check_fits(cfg: SftConfig, n_positions: int, truncated: int, longest: int) -> None:
    """In a position format (board, facts): a ConfigError where ``truncated`` examples of the
    training data (the longest ``longest`` tokens) are longer than ``sft.max_length``, so none is
    cut silently (a cut prompt loses its answer); the moves format cuts long games, said in the log.

    >>> from pipelines.config import SftConfig
    >>> check_fits(SftConfig(text_format="facts", max_length=256), 512, 2, 301)
    Traceback (most recent call last):
    ...
    cluster.errors.ConfigError: sft.max_length (--max-length) is 256, but 2 facts examples of the training data are longer (the longest: 301 tokens, <bos> and <eos> included): use 301 or more
    """
    if cfg.text_format not in POSITION_FORMATS or not truncated:
        return
    raise ConfigError(
        f"sft.max_length (--max-length) is {cfg.max_length}, but {truncated:,} {cfg.text_format} examples "
        f"of the training data are longer (the longest: {longest} tokens, <bos> and <eos> included): "
        + (f"use {longest} or more" if longest <= n_positions else f"the model reads at most {n_positions}")
    )


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
                "answer_after": answer_token(found.tokenizer)
                if cfg.text_format in POSITION_FORMATS
                else None,
            },
            batch_size=512,
            batch_format="numpy",
        )
        .materialize()
    )
    tokens, truncated, longest = column_sums(dataset, ("length", "truncated"), largest=("longest",))
    check_fits(cfg, found.n_positions, truncated, longest)
    return dataset, dataset.count(), tokens, truncated


def column_sums(dataset: Any, columns: Sequence[str], largest: Sequence[str] = ()) -> list[int]:
    """The sums of integer columns of a materialized dataset (then the maxima of ``largest``),
    read on the driver from its blocks in the object store: Ray Data's ``sum`` would run an
    aggregation (two new worker processes, ~3 s on 2 CPUs) for a few numbers. (On a cluster the
    blocks travel to the driver's node once: fine for sft's tables of thousands of blocks.)"""
    import pyarrow.compute as pc

    totals = [0] * (len(columns) + len(largest))
    for batch in dataset.iter_batches(batch_size=None, batch_format="pyarrow"):
        for i, column in enumerate(columns):
            totals[i] += int(pc.sum(batch.column(column)).as_py() or 0)
        for i, column in enumerate(largest, start=len(columns)):
            totals[i] = max(totals[i], int(pc.max(batch.column(column)).as_py() or 0))
    return totals


def annotated_blocks(
    batch: dict[str, Any],
    tokenizer: Any,
    block: int,
    moves: MoveTokens,
    temperature: float,
    flip: bool,
    *,
    text_format: str = "board",
    scale: ValueScale = "margin",
) -> dict[str, Any]:
    """Ray Data stage: annotated positions -> blocks of board (or facts) examples with soft move targets.

    Each position (and, with ``flip``, its colour-flipped twin, its prompt computed from the
    flipped board) becomes ``<bos> <prompt> M: <best move> <eos>`` in ``text_format``, its answer
    the target (``targets``); at the token before the move, the soft target over its legal moves
    (:func:`chessrl.lm.legality.soft_targets` of their values on ``scale``,
    :func:`chessrl.engine.move_value.annotated_values`; ``margin`` reads the batch's ``cp``):
    ``legal_counts`` (``block`` counts), ``legal_moves`` (their token ids, flat) and
    ``legal_weights`` (their probabilities, flat). Examples are packed whole, in order, as many
    to a block as fit; an example longer than a block is left out and counted in ``truncated``
    (``longest`` its tokens: :func:`check_fits` refuses the run); ``length`` as
    :func:`tokenize_and_pack`'s.
    """
    import chess

    from chessrl.engine.annotation import Annotation
    from chessrl.engine.move_value import annotated_values
    from chessrl.lm.legality import soft_targets

    fmt = get_format(text_format)
    start, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    examples: list[SoftExample] = []
    cps = batch["cp"] if scale == "margin" else [()] * len(batch["fen"])
    too_long, longest = 0, 0
    rows = zip(batch["fen"], batch["moves"], cps, batch["expected"], strict=True)
    for fen, move_list, cp, expected in rows:
        if len(move_list) == 0:  # a finished game: nothing to answer
            continue
        record = Annotation(
            str(fen),
            tuple(str(m) for m in move_list),
            tuple(int(c) for c in cp),
            tuple(float(e) for e in expected),
            0,
            0.0,
        )
        values = annotated_values(record.cp if scale == "margin" else None, record.expected, scale)
        weights = soft_targets(values, temperature)
        for a in (record, record.mirrored()) if flip else (record,):
            text = fmt.policy_text(chess.Board(a.fen), a.moves[0])  # type: ignore[union-attr]
            ids = [start, *tokenizer(text, add_special_tokens=False)["input_ids"], eos]
            legal = [moves.token(chess.Move.from_uci(m)) for m in a.moves]
            if ids[-2] != legal[0]:  # the loss reads the move's logits at the token before it
                raise ValueError(f"the {text_format} text of {a.fen!r} does not end in its move's one token")
            n, longest = len(ids), max(longest, len(ids))
            if n > block:
                too_long += 1
                continue
            # the move and <eos> are the targets; the soft one where the move is predicted
            examples.append((ids, [n - 2, n - 1], [(n - 3, legal, weights)]))
    return soft_target_blocks(examples, block, pad, too_long, longest)


def soft_target_blocks(
    examples: Sequence[SoftExample], block: int, pad: int, truncated: int = 0, longest: int = 0
) -> dict[str, Any]:
    """Examples packed whole, in order, as many to a block as fit: ``input_ids``, ``length``,
    ``truncated`` and ``longest`` (``truncated``, and ``longest`` or the longest example, on the
    first block; an empty block where every example was left out), ``targets`` (1 where a token
    is a target), ``legal_counts`` (the legal moves' count where the logits have a soft target),
    and ``legal_moves`` / ``legal_weights`` (their ids and probabilities, flat, in position order)."""
    import numpy as np

    rows: list[list[SoftExample]] = [[]]
    for example in examples:
        if sum(len(e[0]) for e in rows[-1]) + len(example[0]) > block:
            rows.append([])
        rows[-1].append(example)
    rows = [r for r in rows if r] or ([[]] if truncated else [])  # an empty block still says what was cut
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
    cut, most = np.zeros(len(rows), np.int32), np.zeros(len(rows), np.int32)
    if len(rows):
        cut[0], most[0] = truncated, max([longest, *(len(e[0]) for e in examples)])
    return {
        "input_ids": out_ids,
        "length": np.asarray(lengths, dtype=np.int32),
        "truncated": cut,
        "longest": most,
        "targets": targets,
        "legal_counts": counts,
        "legal_moves": moves_column,
        "legal_weights": weights_column,
    }


def annotated_games(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Annotated positions (``game_id``, ``ply``, ``history``, ``moves``, ``expected``) chained
    into games: a game's positions in ply order, each one whose history continues the game so
    far joining it (a position that does not starts a new game). Each game: ``moves`` (its UCI
    moves up to its last annotated position), and for each annotated ply, in order, ``plies``
    (the ply), ``legal`` (its legal moves), ``expected`` (their expected scores) and ``cp``
    (their centipawns; empty where the rows have no ``cp``). Finished positions (no legal move)
    are left out; a ply seen twice counts once.

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
                game = {"moves": [], "plies": [], "legal": [], "expected": [], "cp": []}
                open_games.append(game)
            game["moves"] = history
            game["plies"].append(len(history))
            game["legal"].append([str(m) for m in row["moves"]])
            game["expected"].append([float(e) for e in row["expected"]])
            game["cp"].append([int(c) for c in row.get("cp") or ()])
        games.extend(open_games)
    return games


def annotated_game_blocks(
    batch: dict[str, Any],
    tokenizer: Any,
    block: int,
    moves: MoveTokens,
    temperature: float,
    scale: ValueScale = "margin",
) -> dict[str, Any]:
    """Ray Data stage: annotated games (:func:`annotated_games`) -> blocks of ``<bos> <moves>``
    with a soft target over the legal moves at every annotated ply (the token before that ply's
    move; the spaced form after the first move; the softmax of their values on ``scale``) and no
    hard target; the columns of :func:`annotated_blocks`. A game longer than a block is cut to
    it (``truncated``)."""
    import chess

    from chessrl.engine.move_value import annotated_values
    from chessrl.lm.legality import soft_targets

    start = tokenizer.bos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    examples: list[SoftExample] = []
    cut, longest = 0, 0
    cps = batch["cp"] if scale == "margin" else [[None] * len(p) for p in batch["plies"]]
    for game_moves, plies, legal_lists, expected_lists, cp_lists in zip(
        batch["moves"], batch["plies"], batch["legal"], batch["expected"], cps, strict=True
    ):
        ids = [start] + [
            moves.token(chess.Move.from_uci(str(m)), spaced=i > 0) for i, m in enumerate(game_moves)
        ]
        slots = []
        for ply, legal, expected, cp in zip(plies, legal_lists, expected_lists, cp_lists, strict=True):
            ply = int(ply)
            if ply >= block - 1:
                continue
            legal_ids = [moves.token(chess.Move.from_uci(str(m)), spaced=ply > 0) for m in legal]
            known = None if cp is None else [int(c) for c in cp]
            values = annotated_values(known, [float(e) for e in expected], scale)
            slots.append((ply, legal_ids, soft_targets(values, temperature)))
        cut += len(ids) > block
        longest = max(longest, len(ids))
        if slots:  # the move after each slot is its target (counted once: the soft loss replaces it)
            examples.append((ids[: max(p for p, _, _ in slots) + 1], [p + 1 for p, _, _ in slots], slots))
    return soft_target_blocks(examples, block, pad, cut, longest)


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
        columns=["fen", "moves", "expected", *(["cp"] if cfg.soft_target_scale == "margin" else [])],
    )
    positions = table.count()
    dataset = table.map_batches(
        annotated_blocks,
        fn_kwargs={
            "tokenizer": found.tokenizer,
            "block": cfg.max_length,
            "moves": found.move_tokens,
            "temperature": target_temperature(cfg),
            "flip": cfg.flip,
            "text_format": cfg.text_format,
            "scale": cfg.soft_target_scale,
        },
        batch_size=512,
        batch_format="numpy",
    ).materialize()
    tokens, truncated, longest = column_sums(dataset, ("length", "truncated"), largest=("longest",))
    check_fits(cfg, found.n_positions, truncated, longest)
    return dataset, dataset.count(), tokens, 0, positions


def target_temperature(cfg: SftConfig) -> float:
    """The soft target's temperature: ``sft.target_temperature``, or where it is null the default
    of ``sft.soft_target_scale`` (:data:`chessrl.lm.legality.TARGET_TEMPERATURE`: about the same
    sharpness on either scale).

    >>> from pipelines.config import SftConfig
    >>> target_temperature(SftConfig()), target_temperature(SftConfig(soft_target_scale="expected"))
    (0.03, 0.05)
    >>> target_temperature(SftConfig(target_temperature=0.1))
    0.1
    """
    from chessrl.lm.legality import TARGET_TEMPERATURE

    if cfg.target_temperature is not None:
        return cfg.target_temperature
    return TARGET_TEMPERATURE[cfg.soft_target_scale]


def packed_annotated_games(cfg: SftConfig, found: SftInputs) -> tuple[Any, int, int, int, int]:
    """The moves format's :func:`packed_annotations`: the tables read on the driver (a game's
    positions may lie in several shards), chained, then packed in Ray Data."""
    import pyarrow.dataset as pads
    import ray.data

    assert found.annotations is not None and found.move_tokens is not None
    import pyarrow as pa

    margin = cfg.soft_target_scale == "margin"
    table = pa.concat_tables(
        pads.dataset(folder.path(), filesystem=folder.fs, format="parquet").to_table(
            columns=["game_id", "ply", "history", "moves", "expected", *(["cp"] if margin else [])]
        )
        for folder in found.annotations
    )
    games = annotated_games(table.to_pylist())
    if not margin:  # no centipawns read: the expected scores alone
        games = [{k: v for k, v in game.items() if k != "cp"} for game in games]
    dataset = (
        ray.data.from_items(games)
        .map_batches(
            annotated_game_blocks,
            fn_kwargs={
                "tokenizer": found.tokenizer,
                "block": cfg.max_length,
                "moves": found.move_tokens,
                "temperature": target_temperature(cfg),
                "scale": cfg.soft_target_scale,
            },
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
            **batch,
            "targets": np.ones(batch["input_ids"].shape, dtype=np.uint8),
            "legal_moves": moves,
            "legal_weights": zeros,
            "legal_counts": batch["legal_counts"].astype(np.uint8),
        }

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
            + (" and their colour flips" if cfg.flip and cfg.text_format in POSITION_FORMATS else "")
            + (" (whole games: a soft target at every annotated ply)" if cfg.text_format == "moves" else "")
            + f" in the {cfg.text_format} format from {', '.join(f.uri for f in found.annotations)} (soft targets "
            f"on the {cfg.soft_target_scale} scale at temperature {target_temperature(cfg):g}); "
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

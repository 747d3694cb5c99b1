"""What several phases read and write, in one place, so that no phase module imports another:
the games table (``prepare`` writes it; preferences, sft, ppo, grpo and dpo read it), the
preference table (``preferences`` writes it; reward and dpo read it), and an sft model's folder
and text format (``sft`` writes them; ppo, grpo and dpo start from them).

    dataset = games_table(Storage.from_uri("runs/demo/prepare"))   # checked, or one clear error
    folder = sft_folder("rookworld")                               # 'sft-rookworld'
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

from chessrl.rl.preferences import REQUIRED_COLUMNS
from chessrl.rl.reward import TEXT_FORMAT_KEY
from cluster.errors import ConfigError, InputDataError, StorageError
from cluster.storage import Storage


def preference_table(source: Storage) -> tuple[Storage, list[str], list[str], set[str]]:
    """The training and held-out Parquet files (relative names) of the preference table at
    ``source`` and the columns every file has; a missing, empty or wrong-schema table is one
    clear error (``reward`` and ``dpo`` read the pairs this way)."""
    import pyarrow.parquet as pq

    files = sorted(f for f in source.list_files() if f.endswith(".parquet")) if source.exists() else []
    if not files:
        raise StorageError(
            f"no preference pairs at {source.uri}: run `chess-rl preferences` first, or pass --preferences"
        )
    common: set[str] | None = None
    for name in files:
        try:
            with source.fs.open_input_file(source.path(name)) as handle:
                names = pq.read_schema(handle).names
        except Exception as exc:  # pyarrow raises several types for unreadable files
            raise InputDataError(f"{source.uri}/{name} is not a readable Parquet file: {exc}") from None
        missing = [c for c in REQUIRED_COLUMNS if c not in names]
        if missing:
            raise InputDataError(
                f"{source.uri}/{name} is not a preference table: no column {', '.join(missing)} "
                f"(it has {', '.join(names)}); the columns {', '.join(REQUIRED_COLUMNS)} are needed, "
                "as `chess-rl preferences` writes them"
            )
        common = set(names) if common is None else common & set(names)
    train = [f for f in files if f.startswith("train/")]
    held = [f for f in files if f.startswith("heldout/")]
    if held and not train:
        raise InputDataError(f"{source.uri} has held-out pairs but no train/ shards to train on")
    if not train and not held:  # a table without the split: every file is read and split by board
        return source, files, [], common or set()
    return source, train, held, common or set()


def pairs_chooser(source: Storage) -> str:
    """Who chose the preferred move of the pairs at ``source``, for the lines that report them:
    ``"Stockfish"``, or ``"the judge"`` when ``preferences --judge model`` made them (its
    ``summary.json`` says so; a table with no summary, or an older one, is Stockfish's)."""
    try:
        summary = json.loads(source.read_text("summary.json")) if source.exists("summary.json") else {}
    except (StorageError, ValueError):
        summary = {}
    return "the judge" if isinstance(summary, dict) and summary.get("judge") == "model" else "Stockfish"


def read_heldout(source: Storage, files: list[str], limit: int, seed: int) -> list[dict[str, Any]]:
    """Up to ``limit`` held-out pairs (a seeded sample), as rows of the table."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = []
    for name in files:
        with source.fs.open_input_file(source.path(name)) as handle:
            tables.append(pq.read_table(handle))
    if not tables:
        return []
    rows = pa.concat_tables(tables, promote_options="default").to_pylist()
    random.Random(seed).shuffle(rows)
    return rows[:limit]


def sft_folder(text_format: str) -> str:
    """The run's folder an sft of this text format writes (checkpoints, model, summary): ``sft``
    for the moves format (ppo's start), ``sft-rookworld`` for rookworld (grpo's start), so one run
    can hold both; ``sft-board`` and ``sft-facts`` alike.

    >>> sft_folder("moves"), sft_folder("rookworld"), sft_folder("facts")
    ('sft', 'sft-rookworld', 'sft-facts')
    """
    return "sft" if text_format == "moves" else f"sft-{text_format}"


#: The run's folder (and ``rlaif`` node) of ``grpo --loss-type dpo``, beside grpo's own.
ONLINE_DPO = "online-dpo"


def grpo_folder(loss_type: str) -> str:
    """The run's folder a grpo run of this loss type writes: ``grpo``, or :data:`ONLINE_DPO` for
    ``dpo``, so online DPO and GRPO from the same start sit side by side (and one never resumes
    the other's checkpoint).

    >>> grpo_folder("dapo"), grpo_folder("dpo")
    ('grpo', 'online-dpo')
    """
    return ONLINE_DPO if loss_type == "dpo" else "grpo"


def mark_text_format(folder: Any, text_format: str) -> None:
    """Record the text format in the model's ``config.json`` (``grpo`` reads it to warn about a
    policy that never saw the rookworld tasks); transformers keeps unknown keys as attributes."""
    from pathlib import Path

    path = Path(folder) / "config.json"
    config = json.loads(path.read_text())
    config[TEXT_FORMAT_KEY] = text_format
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def recorded_text_format(policy: str) -> str | None:
    """The text format a saved policy was trained on, ``chessrl_text_format`` in its config as sft
    writes it; None where it says none (a model from elsewhere)."""
    from chessrl.lm.checkpoints import checkpoint_config

    config = checkpoint_config(policy)
    return str(config["chessrl_text_format"]) if config.get("chessrl_text_format") else None


def check_asked_format(key: str, asked: str, policy: str, trained: str | None) -> None:
    """One ConfigError when a policy trained on one of sft's own formats (moves, board, facts) is
    asked in another (ppo's and grpo's check: a preset's board meeting a distilled moves
    ``--policy``); other pairs (an unrecorded or a rookworld policy) are the phase's to judge.

    >>> check_asked_format("ppo.text_format (--text-format)", "moves", "m", None)
    >>> check_asked_format("ppo.text_format (--text-format)", "board", "m", "moves")
    Traceback (most recent call last):
    ...
    cluster.errors.ConfigError: ppo.text_format (--text-format) is board, but the policy m was trained on the moves format (chessrl_text_format in its config.json): pass --text-format moves
    >>> check_asked_format("grpo.text_format (--text-format)", "facts", "m", "board")
    Traceback (most recent call last):
    ...
    cluster.errors.ConfigError: grpo.text_format (--text-format) is facts, but the policy m was trained on the board format (chessrl_text_format in its config.json): pass --text-format board
    """
    if asked != trained and {asked, trained} <= {"moves", "board", "facts"}:
        raise ConfigError(
            f"{key} is {asked}, but the policy {policy} was trained on the {trained} format "
            f"(chessrl_text_format in its config.json): pass --text-format {trained}"
        )


def policy_text_format(policy: str) -> str:
    """The text format a saved policy was trained on (:func:`recorded_text_format`; moves where it
    says none): what preferences asks its proposals in and ppo plays it in."""
    return recorded_text_format(policy) or "moves"


def games_table(source: Storage, columns: Sequence[str] = ("game_id", "moves")) -> Any:
    """The games table at ``source`` as a pyarrow dataset, checked without reading its rows: it
    exists, is Parquet, has ``columns`` and at least one game; else one clear error (every phase
    that reads games checks them with this before Ray starts)."""
    import pyarrow.dataset as pads

    if not source.exists() or not [f for f in source.list_files() if f.endswith(".parquet")]:
        raise StorageError(f"no games at {source.uri}: run `chess-rl prepare` first, or pass --games")
    try:
        dataset = pads.dataset(source.path(), filesystem=source.fs, format="parquet")
        missing = [c for c in columns if c not in dataset.schema.names]
        rows = 0 if missing else dataset.count_rows()
    except Exception as exc:  # pyarrow raises several types for unreadable files
        raise InputDataError(f"{source.uri} is not a readable Parquet games table: {exc}") from None
    if missing:
        raise InputDataError(
            f"{source.uri} is not a games table: no column {', '.join(missing)} "
            f"(it has {', '.join(dataset.schema.names)}); write one with `chess-rl prepare`"
        )
    if not rows:
        raise InputDataError(
            f"{source.uri} holds no games: run `chess-rl prepare` with some PGN or --generate N"
        )
    return dataset


def read_games(source: Storage) -> list[dict[str, Any]]:
    """``game_id`` and ``moves`` of every game; an empty or wrong-schema table is one clear error."""
    rows: list[dict[str, Any]] = games_table(source).to_table(columns=["game_id", "moves"]).to_pylist()
    return rows


def fit_games(rows: list[dict[str, Any]], text_format: str, policy: str) -> list[dict[str, Any]]:
    """``rows`` with each game's moves cut to what ``policy``'s context holds as a moves-format
    prompt and its answer (a rare game longer than the context would overflow the position
    embeddings); unchanged in a position format, whose prompt does not grow with the game.

    >>> fit_games([{"game_id": "a", "moves": "e2e4 e7e5"}], "board", "unused")
    [{'game_id': 'a', 'moves': 'e2e4 e7e5'}]
    """
    if text_format != "moves":
        return rows
    config = json.loads(Storage.from_uri(policy).read_text("config.json"))  # local or s3://, config only
    keep = int(config.get("n_positions") or config.get("max_position_embeddings") or 1024) - 2
    return [{**r, "moves": " ".join(str(r["moves"]).split()[:keep])} for r in rows]

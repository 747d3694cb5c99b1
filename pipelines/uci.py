"""``uci``: a trained policy as a UCI engine on stdin/stdout, for chess GUIs and lichess-bot.

    chess-rl uci --model runs/demo/sft/model
    python -m pipelines.uci --model s3://chess-runs/demo/sft/model --temperature 0.3
    chess-rl uci --model runs/demo/sft/model --unmasked     # its own proposals, checked

The model (a folder saved with ``save_pretrained``, or an ``s3://`` prefix holding one) is loaded
before the engine reads its first command; then the protocol runs (:mod:`chessrl.engine.uci_server`):
``uci``, ``isready``, ``position``, ``go``, ``stop``, ``setoption name Temperature value 0.3``,
``quit``. A bad ``--model`` is one line ``error: ...`` on stderr and exit code 2. Stdout carries
protocol lines only: logging, warnings and stray prints go to stderr.

In a GUI (Cute Chess, Arena, BanksiaGUI, ...) the engine command is ``.venv/bin/chess-rl`` with the
arguments ``uci --model DIR``. lichess-bot runs one executable and appends its ``engine_options``
as ``--key=value``, so give it a small wrapper script as the engine::

    #!/bin/sh
    exec /path/to/chess-rl/.venv/bin/chess-rl uci --model /path/to/model "$@"

How it plays: the model is asked in the text format it was trained on (``chessrl_text_format``
in its config: the game's UCI moves, or the board) and plays its **legal-masked argmax**: the most
probable of the legal moves' tokens (:func:`chessrl.lm.masked.masked_move`), never a move that
hands the opponent a draw claim while another exists — the player every arena, SPRT and paired
figure of the project measures. ``--temperature`` samples among the legal moves instead. A model
whose tokenizer has no single token per move cannot be masked: one line says so and points at
``--unmasked``, the older mode: the unmasked proposal checked (:func:`chessrl.lm.models.lm_move`),
greedy first, then ``--retries`` samples, then a random legal move (reported with ``info string``).
It answers at once and ignores the clock, ``nodes`` and ``depth``; ``go infinite`` / ``go
ponder`` hold the ``bestmove`` back until ``stop``.

Limitation (the moves format): the model only knows games from the start position. After
``position startpos moves ...`` it sees the whole game. After ``position fen <FEN> moves ...`` it
sees only the moves after the FEN, as if they had been played from the start position, so it
plays such positions poorly (its moves are still legal); the first such position is flagged with
an ``info string`` warning. A game longer than the model's context keeps only its latest moves. A
board-format model reads the position itself and has neither limitation.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import chess

from chessrl.engine.uci_server import SearchRequest, UCIServer, serve

#: Room kept in the context for the completion (``propose_moves`` reads at most 8 new tokens).
MAX_NEW_TOKENS = 8


class LMPolicy:
    """A chess language model as a UCI policy: ``policy(board, request) -> uci``, asked in
    ``text_format``; ``masked`` (the default): its legal-masked argmax (or a legal move drawn at
    the request's temperature); else its unmasked proposal checked, with a random fallback.

    ``info`` writes an ``info string`` line (fallbacks, the FEN warning).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        text_format: str = "moves",
        masked: bool = True,
        retries: int = 3,
        seed: int = 0,
        info: Callable[[str], None] = lambda text: None,
    ) -> None:
        import torch

        from chessrl.lm.formats import get_format

        torch.manual_seed(seed)
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.fmt = get_format(text_format)
        self.text_format = text_format
        self.masked = masked
        self.retries = retries
        self.rng = random.Random(seed)
        self.info = info
        config = model.config
        self.context = int(getattr(config, "n_positions", None) or config.max_position_embeddings)
        self.warned_fen = False
        self.warned_context = False

    def __call__(self, board: chess.Board, request: SearchRequest) -> str:
        from chessrl.lm.models import lm_move

        reads_moves = self.text_format == "moves"
        if reads_moves and not self.warned_fen and board.root().fen() != chess.STARTING_FEN:
            self.warned_fen = True
            self.info(
                "warning: the model knows games from the start position only; from this FEN it "
                "sees just the moves after it, so expect weak moves (they are still legal)"
            )
        moves = [m.uci() for m in board.move_stack]
        moves = self.fit(moves) if reads_moves else moves
        if self.masked:
            from chessrl.lm.masked import masked_move

            choice = masked_move(
                self.model,
                self.tokenizer,
                board,
                moves,
                self.fmt,
                temperature=request.temperature,
                rng=self.rng,
                avoid_draw_claims=True,
            )
            return choice.moves[0]
        move, fell_back = lm_move(
            self.model,
            self.tokenizer,
            board,
            moves,
            fmt=self.fmt,
            temperature=request.temperature,
            retries=self.retries,
            rng=self.rng,
        )
        if fell_back:
            self.info(
                f"the model proposed no legal move in {1 + self.retries} tries; playing {move} at random"
            )
        return move

    def fit(self, moves: list[str]) -> list[str]:
        """The latest moves whose prompt leaves room for a move in the model's context."""
        from chessrl.lm.formats import MovesFormat
        from chessrl.lm.models import prompt_ids

        fmt = MovesFormat()
        while moves:
            over = len(prompt_ids(self.tokenizer, fmt.prompt(moves))) + MAX_NEW_TOKENS - self.context
            if over <= 0:
                break
            if not self.warned_context:
                self.warned_context = True
                self.info(
                    f"the game is longer than the model's context ({self.context}); it sees the latest moves"
                )
            moves = moves[max(1, over) :]
        return moves


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog or "python -m pipelines.uci",
        description="Run a trained policy as a UCI engine on stdin/stdout (chess GUIs, lichess-bot).",
        epilog="Example: chess-rl uci --model runs/demo/sft/model. Type 'uci', 'isready', "
        "'position startpos moves e2e4', 'go', 'quit' to talk to it by hand.",
    )
    parser.add_argument(
        "--model",
        required=True,
        metavar="DIR|s3://...",
        help="a checkpoint folder saved with save_pretrained (e.g. <run>/sft/model), or an s3:// prefix",
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        metavar="T",
        help="sampling temperature of the first proposal; 0 = greedy (default: 0; UCI option Temperature)",
    )
    parser.add_argument(
        "--unmasked",
        action="store_true",
        help="play the model's own proposal, checked, with --retries and a random legal move after "
        "(default: its legal-masked argmax, the player the project measures)",
    )
    parser.add_argument(
        "--retries",
        type=int,
        default=3,
        metavar="N",
        help="--unmasked: sampled proposals (temperature >= 1) after an illegal one, before a random "
        "legal move (default: 3)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, metavar="N", help="seed of the sampling and the fallback (default: 0)"
    )
    return parser


def quiet_libraries() -> None:
    """Library chatter goes to stderr, errors only: stdout belongs to the protocol."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()


def main(argv: Sequence[str] | None = None, *, prog: str | None = None) -> int:
    """Loads the model and serves UCI on stdin/stdout; 0 after ``quit`` or end of input, 2 on a bad model."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if args.temperature < 0 or args.retries < 0:
        parser.error("--temperature and --retries must be >= 0")

    protocol = sys.stdout
    sys.stdout = sys.stderr  # anything printed but the protocol lands on stderr

    def out(line: str) -> None:
        protocol.write(line + "\n")
        protocol.flush()

    try:
        quiet_libraries()
        from chessrl import __version__
        from chessrl.arena.saved_models import load_saved_model
        from chessrl.lm.masked import MaskedMoves, MaskingError
        from cluster.errors import UserError
        from pipelines.common.artifacts import policy_text_format

        try:
            model, tokenizer = load_saved_model(args.model, "policy")
            text_format = policy_text_format(args.model)
            if not args.unmasked:
                MaskedMoves(tokenizer)  # a tokenizer that cannot be masked: said before the handshake
        except MaskingError as exc:
            print(
                f"error: --model {args.model}: {exc}; pass --unmasked to play its own checked proposals",
                file=sys.stderr,
            )
            return 2
        except UserError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2

        def info(text: str) -> None:
            server.info(text)

        server = UCIServer(
            name=f"chess-rl {__version__} ({Path(args.model.rstrip('/')).name})",
            author="chess-rl",
            choose_move=LMPolicy(
                model,
                tokenizer,
                text_format=text_format,
                masked=not args.unmasked,
                retries=args.retries,
                seed=args.seed,
                info=info,
            ),
            out=out,
            temperature=args.temperature,
        )
        serve(sys.stdin, server)
        return 0
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the GUI went away: quiet the final flush of stdout too
        os.dup2(os.open(os.devnull, os.O_WRONLY), protocol.fileno())
        return 0
    finally:
        sys.stdout = protocol


if __name__ == "__main__":
    sys.exit(main())

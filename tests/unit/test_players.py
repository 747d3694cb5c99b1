"""Player specs, and every player: random, language model (fake and real tiny model), Stockfish
through a fake engine pool, and a real external UCI engine (Debian's Stockfish)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import chess
import pytest
import torch

from chessrl.arena.players import (
    LMPlayer,
    MoveChoice,
    PlayerSpec,
    RandomPlayer,
    StockfishPlayer,
    UCIPlayer,
    parse_player_spec,
)
from chessrl.engine.client import EngineError, SearchLimit, Strength
from chessrl.lm.models import build_model
from chessrl.lm.tokenizer import build_chess_tokenizer
from cluster.errors import ConfigError

STOCKFISH = "/usr/games/stockfish"
needs_stockfish = pytest.mark.skipif(not os.access(STOCKFISH, os.X_OK), reason=f"no {STOCKFISH}")

# a middlegame position (Italian game) with black to move
MIDDLEGAME = ["e2e4", "e7e5", "g1f3", "b8c6", "f1c4", "f8c5", "c2c3", "g8f6", "d2d4"]


def board_after(moves: list[str]) -> chess.Board:
    board = chess.Board()
    for uci in moves:
        board.push_uci(uci)
    return board


# ---------------------------------------------------------------------------------------------
# specs


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("random", PlayerSpec(kind="random")),
        ("sft", PlayerSpec(kind="sft")),
        ("lm:runs/a/sft/model", PlayerSpec(kind="lm", path="runs/a/sft/model")),
        ("lm:s3://bucket/run/model", PlayerSpec(kind="lm", path="s3://bucket/run/model")),
        ("stockfish", PlayerSpec(kind="stockfish")),
        ("stockfish:skill=3", PlayerSpec(kind="stockfish", skill_level=3)),
        ("stockfish:skill_level=0", PlayerSpec(kind="stockfish", skill_level=0)),
        ("stockfish:elo=1500,nodes=2000", PlayerSpec(kind="stockfish", elo=1500, nodes=2000)),
        ("stockfish:nodes=2000", PlayerSpec(kind="stockfish", nodes=2000)),
        (
            "  stockfish:skill=20 , movetime_ms=10 ",
            PlayerSpec(kind="stockfish", skill_level=20, movetime_ms=10),
        ),
        ("uci:/usr/games/stockfish", PlayerSpec(kind="uci", path="/usr/games/stockfish")),
        (
            "uci:/usr/games/stockfish,movetime_ms=50",
            PlayerSpec(kind="uci", path="/usr/games/stockfish", movetime_ms=50),
        ),
        ("uci:/opt/engine,nodes=500", PlayerSpec(kind="uci", path="/opt/engine", nodes=500)),
        ("judge:runs/a/reward/model", PlayerSpec(kind="judge", path="runs/a/reward/model")),
        ("mcts", PlayerSpec(kind="mcts")),
        ("mcts,sims=64", PlayerSpec(kind="mcts", simulations=64)),
        ("mcts:runs/a/selfplay/best.pt", PlayerSpec(kind="mcts", path="runs/a/selfplay/best.pt")),
        (
            "mcts:s3://b/r/selfplay/gen0.pt,sims=8",
            PlayerSpec(kind="mcts", path="s3://b/r/selfplay/gen0.pt", simulations=8),
        ),
        ("mcts,search=gumbel", PlayerSpec(kind="mcts", search="gumbel")),
        (
            "mcts:a.pt,sims=16,search=gumbel",
            PlayerSpec(kind="mcts", path="a.pt", simulations=16, search="gumbel"),
        ),
        ("mcts:a.pt,search=puct", PlayerSpec(kind="mcts", path="a.pt")),
    ],
)
def test_every_allowed_spec_parses_and_its_label_parses_back(text: str, expected: PlayerSpec) -> None:
    spec = parse_player_spec(text)
    assert spec == expected
    assert parse_player_spec(spec.label) == spec
    assert parse_player_spec(spec.label).label == spec.label


def test_labels_are_distinct_for_distinct_specs() -> None:
    texts = [
        "random",
        "sft",
        "lm:a",
        "lm:b",
        "judge:a",
        "stockfish",
        "stockfish:skill=3",
        "stockfish:skill=4",
        "stockfish:elo=1500",
        "stockfish:elo=1500,nodes=2000",
        "stockfish:nodes=2000",
        "uci:/usr/games/stockfish,movetime_ms=50",
        "uci:/usr/games/stockfish",
        "mcts",
        "mcts,sims=8",
        "mcts:a.pt",
        "mcts:a.pt,sims=8",
        "mcts:a.pt,sims=8,search=gumbel",
    ]
    labels = [parse_player_spec(t).label for t in texts]
    assert len(set(labels)) == len(texts)


BAD_SPECS = [
    "stockfsh",
    "",
    "random:x",
    "stockfish:skill=30",
    "stockfish:skill=-1",
    "stockfish:elo=100",
    "stockfish:elo=99999",
    "stockfish:skill=1,elo=1500",
    "stockfish:skill=three",
    "stockfish:skill",
    "uci:",
    "uci:/x,elo=1500",
    "uci:/x,skill=3",
    "stockfish:nodes=0",
    "stockfish:movetime_ms=-5",
    "stockfish:depth=3",
    "lm:",
    "judge:",
    "judge:a,masked",
    "mcts,sims=0",
    "mcts:a.pt,nodes=5",
    "mcts:sims=5",
    "mcts,sims",
    "mcts,search=alphabeta",
    "mcts,search",
]


@pytest.mark.parametrize("text", BAD_SPECS)
def test_a_bad_spec_is_a_config_error_naming_the_key_the_spec_and_the_allowed_forms(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_player_spec(text)
    message = str(info.value)
    assert message.startswith("evaluate.players: ")
    assert repr(text) in message
    for form in (
        "random",
        "sft",
        "lm:DIR",
        "judge:DIR",
        "mcts[:FILE.pt][,sims=N]",
        "stockfish[:skill=N|elo=N]",
        "uci:PATH",
        "nodes=N",
        "movetime_ms=N",
    ):
        assert form in message, (form, message)


def test_a_bad_spec_names_the_key_it_was_read_from() -> None:
    with pytest.raises(ConfigError, match=r"^arena\.white: "):
        parse_player_spec("stockfsh", key="arena.white")


def test_range_errors_say_which_range() -> None:
    with pytest.raises(ConfigError, match=r"skill level must be 0\.\.20, got 30"):
        parse_player_spec("stockfish:skill=30")
    with pytest.raises(ConfigError, match=r"UCI_Elo must be \d+\.\.\d+ for Stockfish, got 100"):
        parse_player_spec("stockfish:elo=100")
    with pytest.raises(ConfigError, match="not both"):
        parse_player_spec("stockfish:skill=1,elo=1500")


def test_only_stockfish_at_an_elo_has_an_anchor() -> None:
    assert parse_player_spec("stockfish:elo=1500,nodes=2000").anchor_elo == 1500.0
    assert parse_player_spec("stockfish:elo=2000").anchor_elo == 2000.0
    for text in ("stockfish", "stockfish:skill=3", "random", "sft", "lm:x", "uci:/usr/games/stockfish"):
        assert parse_player_spec(text).anchor_elo is None, text


def test_strength_and_search_limit_follow_the_spec() -> None:
    assert parse_player_spec("stockfish:elo=1500").strength() == Strength(elo=1500)
    assert parse_player_spec("stockfish:skill=3").strength() == Strength(skill_level=3)
    assert parse_player_spec("stockfish").strength() == Strength(skill_level=20)
    assert parse_player_spec("stockfish:nodes=2000").search_limit(500) == SearchLimit(nodes=2000)
    assert parse_player_spec("stockfish").search_limit(500) == SearchLimit(nodes=500)
    assert parse_player_spec("uci:/e,movetime_ms=50").search_limit(500) == SearchLimit(time=0.05)


# ---------------------------------------------------------------------------------------------
# random


def random_game(player: RandomPlayer, seed: int, max_plies: int = 400) -> list[str]:
    """A whole game of ``player`` against itself; every move is checked legal before it is played."""
    player.new_game(seed)
    board = chess.Board()
    while not board.is_game_over(claim_draw=True) and len(board.move_stack) < max_plies:
        choice = player.move(board)
        assert choice.move is not None
        assert chess.Move.from_uci(choice.move) in board.legal_moves, (board.fen(), choice.move)
        assert choice.illegal_attempts == 0 and choice.first_attempt_legal and not choice.fallback
        board.push_uci(choice.move)
    return [m.uci() for m in board.move_stack]


def test_random_player_is_legal_over_whole_games_and_reproducible_per_seed() -> None:
    games = {seed: random_game(RandomPlayer(), seed) for seed in range(4)}
    for seed, moves in games.items():
        assert random_game(RandomPlayer("other"), seed) == moves  # same seed, same game
    assert len({tuple(moves) for moves in games.values()}) == len(games)  # seeds differ


def test_random_player_reseeds_on_new_game() -> None:
    player = RandomPlayer()
    first = random_game(player, 5, max_plies=30)
    random_game(player, 6, max_plies=30)
    assert random_game(player, 5, max_plies=30) == first


def test_random_player_has_no_move_when_there_is_none() -> None:
    mated = board_after(["f2f3", "e7e5", "g2g4", "d8h4"])  # fool's mate
    assert mated.is_checkmate()
    assert RandomPlayer().move(mated).move is None


# ---------------------------------------------------------------------------------------------
# language model


class ScriptedModel:
    """A unit-test fake of the model: generate() appends the next scripted token to the prompt
    (the last one repeats), and records what it was asked."""

    def __init__(self, tokens: list[int], pad_token_id: int) -> None:
        self.tokens = tokens
        self.calls: list[dict] = []
        self.prompts: list[list[int]] = []
        self.device = torch.device("cpu")
        self.config = SimpleNamespace(pad_token_id=pad_token_id)

    def generate(self, ids: torch.Tensor, **kwargs) -> torch.Tensor:
        token = self.tokens[min(len(self.calls), len(self.tokens) - 1)]
        self.calls.append(kwargs)
        self.prompts.append(ids[0].tolist())
        return torch.cat([ids, torch.tensor([[token]])], dim=1)


@pytest.fixture(scope="module")
def tok():
    return build_chess_tokenizer(512)


def token(tok, text: str) -> int:
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == 1, (text, ids)
    return ids[0]


def test_lm_player_falls_back_to_a_legal_move_when_every_attempt_is_illegal(tok) -> None:
    # a1a8 is well formed but illegal at the start (the rook is blocked)
    model = ScriptedModel([token(tok, " a1a8")], tok.pad_token_id)
    player = LMPlayer(model, tok, retries=3, on_illegal="fallback")
    player.new_game(0)
    board = chess.Board()
    choice = player.move(board)
    attempts = 1 + 3
    assert len(model.calls) == attempts
    assert choice.move is not None and chess.Move.from_uci(choice.move) in board.legal_moves
    assert choice.fallback and not choice.first_attempt_legal
    assert choice.illegal_attempts == attempts
    assert "fallback" in choice.comment and str(attempts) in choice.comment
    assert player.counts.counts["illegal"] == attempts and player.counts.total == attempts
    # greedy first, then samples at a temperature of at least 1
    assert model.calls[0]["do_sample"] is False
    assert all(c["do_sample"] is True and c["temperature"] >= 1.0 for c in model.calls[1:])


def test_lm_player_forfeits_under_the_forfeit_policy(tok) -> None:
    model = ScriptedModel([token(tok, " a1a8")], tok.pad_token_id)
    player = LMPlayer(model, tok, retries=2, on_illegal="forfeit")
    player.new_game(0)
    choice = player.move(chess.Board())
    assert choice.move is None
    assert choice.illegal_attempts == 3 and not choice.first_attempt_legal and not choice.fallback
    assert "forfeit" in choice.comment
    assert player.counts.counts["illegal"] == 3


def test_lm_player_counts_illegal_and_unparseable_attempts_before_a_legal_one(tok) -> None:
    board = board_after(["e2e4"])
    # illegal (e7e4 jumps over nothing legal), unparseable (EOS decodes to ""), then legal
    model = ScriptedModel([token(tok, " e7e4"), tok.eos_token_id, token(tok, " e7e5")], tok.pad_token_id)
    player = LMPlayer(model, tok, retries=3)
    choice = player.move(board)
    assert choice == MoveChoice("e7e5", illegal_attempts=2, first_attempt_legal=False, fallback=False)
    assert dict(player.counts.counts) == {"illegal": 1, "unparseable": 1, "legal": 1}
    # the model is prompted with the game so far (after its start token)
    assert tok.decode(model.prompts[0][1:]) == "e2e4"


def test_lm_player_first_attempt_legal(tok) -> None:
    model = ScriptedModel([token(tok, " g1f3")], tok.pad_token_id)
    player = LMPlayer(model, tok)
    choice = player.move(chess.Board())
    assert choice == MoveChoice("g1f3")
    assert len(model.calls) == 1


def test_lm_fallback_is_reproducible_per_seed(tok) -> None:
    def fallback(seed: int) -> str | None:
        player = LMPlayer(ScriptedModel([token(tok, " a1a8")], tok.pad_token_id), tok, retries=0)
        player.new_game(seed)
        return player.move(board_after(MIDDLEGAME)).move

    moves = [fallback(seed) for seed in range(8)]
    assert moves == [fallback(seed) for seed in range(8)]
    assert len(set(moves)) > 1


def test_real_tiny_model_only_ever_plays_legal_moves(tok) -> None:
    torch.set_num_threads(1)
    model, tiny_tok = build_model("tiny")
    model.eval()
    player = LMPlayer(model, tiny_tok, retries=1, on_illegal="fallback")
    opponent = RandomPlayer()
    player.new_game(3)
    opponent.new_game(4)
    board = chess.Board()
    expected_attempts = 0
    lm_moves = 0
    for ply in range(8):
        choice = (player if ply % 2 == 0 else opponent).move(board)
        assert choice.move is not None and chess.Move.from_uci(choice.move) in board.legal_moves
        if ply % 2 == 0:
            lm_moves += 1
            # every attempt is counted: the illegal ones, plus the legal one unless it fell back
            expected_attempts += choice.illegal_attempts + (0 if choice.fallback else 1)
            assert choice.fallback == (choice.illegal_attempts == 2)
        board.push_uci(choice.move)
    assert player.counts.total == expected_attempts >= lm_moves


# ---------------------------------------------------------------------------------------------
# stockfish (through a fake pool) and a real UCI engine


class FakeEngine:
    """Records what a StockfishPlayer asks for and answers the first legal move in sorted order."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, Strength | None, SearchLimit, bool]] = []

    def play(
        self, position: str, limit: SearchLimit, *, strength: Strength | None = None, fresh: bool = False
    ) -> str:
        self.requests.append((position, strength, limit, fresh))
        return sorted(m.uci() for m in chess.Board(position).legal_moves)[0]


def test_stockfish_player_asks_its_engine_with_the_fen_strength_and_limit() -> None:
    engine = FakeEngine()
    spec = parse_player_spec("stockfish:elo=1500,nodes=2000")
    player = StockfishPlayer(engine, spec.strength(), spec.search_limit(100), name=spec.label)
    board = board_after(MIDDLEGAME)
    player.new_game(1)
    choice = player.move(board)
    assert engine.requests == [(board.fen(), Strength(elo=1500), SearchLimit(nodes=2000), False)]
    assert choice.move == sorted(m.uci() for m in board.legal_moves)[0]
    assert choice.first_attempt_legal and choice.illegal_attempts == 0
    assert player.name == "stockfish:elo=1500,nodes=2000"
    player.close()


def _process_gone(pid: int, wait_s: float = 5.0) -> bool:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        status = Path(f"/proc/{pid}/status")
        if not status.exists() or "\nState:\tZ" in status.read_text():
            return True
        time.sleep(0.05)
    return False


@needs_stockfish
def test_uci_player_plays_legal_moves_and_close_ends_the_engine() -> None:
    player = UCIPlayer(STOCKFISH, SearchLimit(nodes=200))
    assert player.name == f"uci:{STOCKFISH}"
    pid = player.engine.transport.get_pid()
    try:
        board = chess.Board()
        for _ in range(6):
            choice = player.move(board)
            assert choice.move is not None and chess.Move.from_uci(choice.move) in board.legal_moves
            board.push_uci(choice.move)
        # a mate in one is found even at 200 nodes
        mate_in_one = chess.Board("6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1")
        assert player.move(mate_in_one).move == "d1d8"
    finally:
        player.close()
    assert _process_gone(pid)


@needs_stockfish
def test_uci_player_honours_a_depth_only_limit() -> None:
    player = UCIPlayer(STOCKFISH, SearchLimit(depth=2), name="sf-depth")
    pid = player.engine.transport.get_pid()
    result: list[MoveChoice] = []
    thread = threading.Thread(target=lambda: result.append(player.move(chess.Board())), daemon=True)
    thread.start()
    thread.join(20)
    if thread.is_alive():  # an unbounded search: kill the engine so the test ends
        os.kill(pid, 9)
        pytest.fail("a depth-only search limit made the engine search forever")
    player.close()
    assert result and chess.Move.from_uci(result[0].move) in chess.Board().legal_moves


def test_uci_player_with_a_missing_engine_is_an_engine_error(tmp_path) -> None:
    with pytest.raises(EngineError, match="cannot start the UCI engine"):
        UCIPlayer(str(tmp_path / "no-such-engine"), SearchLimit(nodes=10))


def test_mcts_player_plays_legal_moves_and_mates_in_one() -> None:
    from chessrl.arena.players import MCTSPlayer
    from chessrl.search.network import NetConfig, PolicyValueNet

    player = MCTSPlayer(PolicyValueNet(NetConfig(blocks=0, channels=8, history=2)), simulations=4)
    board = chess.Board()
    for _ in range(6):
        move = player.move(board).move
        assert chess.Move.from_uci(move) in board.legal_moves
        board.push_uci(move)
    assert player.move(chess.Board("6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1")).move == "d1d8"
    assert player.move(chess.Board("3R2k1/5ppp/8/8/8/8/5PPP/6K1 b - - 1 1")).move is None


def test_gumbel_mcts_player_plays_the_move_its_search_chose() -> None:
    from chessrl.arena.players import MCTSPlayer
    from chessrl.search.mcts import BatchedMCTS, MCTSConfig, NetworkEvaluator, Node
    from chessrl.search.network import NetConfig, PolicyValueNet

    torch.manual_seed(0)
    net = PolicyValueNet(NetConfig(blocks=0, channels=8, history=2))
    player = MCTSPlayer(net, simulations=8, search="gumbel")
    assert player.search.config.search == "gumbel"
    board = chess.Board()
    for _ in range(4):
        move = player.move(board).move
        root = Node(board.copy())  # the same search on its own: the move sequential halving kept
        BatchedMCTS(NetworkEvaluator(net), MCTSConfig(simulations=8, search="gumbel")).search(
            [root], add_noise=False
        )
        assert root.best_move().uci() == move and root._tree.chosen[root._id] >= 0
        board.push_uci(move)
    assert player.move(chess.Board("6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1")).move == "d1d8"


def test_a_judge_plays_the_legal_move_it_scores_highest() -> None:
    """``judge:DIR``: the argmax of the reward model's scores over the legal moves, each read as
    plain ``transformers`` reads the judge's text (``<text><eos>``)."""
    from chessrl.lm.formats import BoardFormat
    from chessrl.rl.judge_player import JudgePlayer
    from chessrl.rl.reward import build_reward_model

    torch.manual_seed(0)
    model, tok = build_reward_model("tiny")
    model.config.chessrl_text_format = "board"
    board = chess.Board()
    board.push_uci("e2e4")

    def score(move: str) -> float:
        ids = tok(BoardFormat().judged_text(board, move) + tok.eos_token, return_tensors="pt")
        with torch.no_grad():
            return float(model(**ids).logits[0, 0])

    scores = {m.uci(): score(m.uci()) for m in board.legal_moves}
    assert JudgePlayer(model, tok).move(board).move == max(scores, key=scores.__getitem__)


def test_a_judge_never_hands_the_opponent_a_draw_claim_while_it_has_another_move(monkeypatch) -> None:
    from chessrl.rl import judge_player, scorer_policy

    monkeypatch.setattr(scorer_policy, "move_rows", lambda tok, config, board, moves: list(moves))
    monkeypatch.setattr(
        scorer_policy,
        "group_logits",
        lambda model, rows, pad: torch.tensor([float(r == "f6g8") for r in rows]),
    )
    player = judge_player.JudgePlayer(SimpleNamespace(config={}), SimpleNamespace(pad_token_id=0))
    board = chess.Board()
    for uci in ["g1f3", "g8f6", "f3g1"]:
        board.push_uci(uci)
    assert player.move(board).move == "f6g8"  # its favourite, when it repeats nothing yet
    for uci in ["f6g8", "g1f3", "g8f6", "f3g1"]:
        board.push_uci(uci)
    assert player.move(board).move != "f6g8"  # the third time: white could claim the draw

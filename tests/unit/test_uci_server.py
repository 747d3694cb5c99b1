"""chessrl.engine.uci_server: the UCI protocol layer, driven line by line with a scripted (fake) policy."""

from __future__ import annotations

import io
from collections.abc import Callable

import chess
import pytest

from chessrl.engine.uci_server import SearchRequest, UCIServer, serve

Seen = list[tuple[chess.Board, SearchRequest]]


class Engine:
    """A UCIServer whose output is collected and whose policy records what it was asked."""

    def __init__(self, policy: Callable[[chess.Board, SearchRequest], str | None] | None = None) -> None:
        self.lines: list[str] = []
        self.seen: Seen = []
        self.policy = policy or (lambda board, request: sorted(m.uci() for m in board.legal_moves)[-1])

        def choose(board: chess.Board, request: SearchRequest) -> str | None:
            self.seen.append((board, request))
            return self.policy(board, request)

        self.server = UCIServer(
            name="Test Engine", author="Tester", choose_move=choose, out=self.lines.append
        )

    def send(self, *commands: str) -> list[str]:
        """The lines answered to ``commands`` (each must leave the server running)."""
        start = len(self.lines)
        for command in commands:
            assert self.server.handle(command) is True
        return self.lines[start:]


def errors(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("info string error: ")]


def test_handshake_names_the_engine_its_option_and_answers_isready() -> None:
    engine = Engine()
    assert engine.send("uci") == [
        "id name Test Engine",
        "id author Tester",
        "option name Temperature type string default 0",
        "uciok",
    ]
    assert engine.send("isready") == ["readyok"]
    assert engine.send("debug on", "isready", "debug off") == ["readyok"]


def test_position_startpos_moves_then_go_plays_the_policys_move() -> None:
    engine = Engine(lambda board, request: "g1f3")
    assert engine.send("ucinewgame", "isready") == ["readyok"]
    assert engine.send("position startpos moves e2e4 e7e5", "go wtime 1000 btime 1000") == ["bestmove g1f3"]
    board, request = engine.seen[-1]
    assert [m.uci() for m in board.move_stack] == ["e2e4", "e7e5"]
    assert board.root() == chess.Board()
    assert request.wtime == 1000 and request.btime == 1000


def test_the_policy_gets_a_copy_of_the_position() -> None:
    def vandal(board: chess.Board, request: SearchRequest) -> str:
        board.push_uci("e2e4")
        board.push_uci("e7e5")
        return "d2d4"

    engine = Engine(vandal)
    assert engine.send("position startpos", "go") == ["bestmove d2d4"]
    assert engine.server.board == chess.Board()


def test_position_fen_with_moves() -> None:
    engine = Engine(lambda board, request: "e5f6")
    fen = "r3k2r/pppq1ppp/2n2n2/3pp3/3PP3/2N2N2/PPPQ1PPP/R3K2R w KQkq - 0 1"
    assert engine.send(f"position fen {fen} moves d4e5 d7g4", "go movetime 100") == ["bestmove e5f6"]
    board, _ = engine.seen[-1]
    assert board.root().fen() == fen
    assert [m.uci() for m in board.move_stack] == ["d4e5", "d7g4"]
    assert board.turn == chess.WHITE


def test_castling_and_promotion_moves_in_a_move_list() -> None:
    engine = Engine()
    fen = "r3k2r/P7/8/8/8/8/8/R3K2R w KQkq - 0 1"
    assert engine.send(f"position fen {fen} moves e1g1 e8c8 a7a8q c8d7") == []
    board = engine.server.board
    assert board.piece_at(chess.G1) == chess.Piece(chess.KING, chess.WHITE)
    assert board.piece_at(chess.F1) == chess.Piece(chess.ROOK, chess.WHITE)
    assert board.piece_at(chess.D8) == chess.Piece(chess.ROOK, chess.BLACK)
    assert board.piece_at(chess.A8) == chess.Piece(chess.QUEEN, chess.WHITE)
    assert board.king(chess.BLACK) == chess.D7
    # castling from the start position, and an under-promotion played by the policy
    assert engine.send("position startpos moves e2e4 e7e5 g1f3 b8c6 f1c4 g8f6 e1g1") == []
    assert engine.server.board.king(chess.WHITE) == chess.G1
    promote = Engine(lambda board, request: "a7a8n")
    assert promote.send("position fen 7k/P7/8/8/8/8/8/K7 w - - 0 1", "go") == ["bestmove a7a8n"]


def test_go_parameters_reach_the_policy() -> None:
    engine = Engine()
    engine.send("position startpos")
    engine.send(
        "go wtime 300000 btime 290000 winc 2000 binc 3000 movestogo 40 movetime 500 nodes 800 depth 7"
    )
    _, request = engine.seen[-1]
    assert request == SearchRequest(
        wtime=300000, btime=290000, winc=2000, binc=3000, movestogo=40, movetime=500, nodes=800, depth=7
    )
    assert not request.infinite and not request.deferred
    engine.send("setoption name Temperature value 0.75", "go mate 3 searchmoves e2e4 d2d4 depth 2")
    _, request = engine.seen[-1]
    assert (request.mate, request.depth, request.searchmoves, request.temperature) == (
        3,
        2,
        ("e2e4", "d2d4"),
        0.75,
    )


def test_searchmoves_restrict_the_move() -> None:
    engine = Engine(lambda board, request: "g1f3")
    assert engine.send("position startpos", "go searchmoves e2e4 d2d4") == [
        "info string the policy gave 'g1f3', not a legal move here; playing d2d4, the first legal move in UCI order",
        "bestmove d2d4",
    ]


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("position fen not-a-fen", "bad FEN 'not-a-fen'"),
        ("position fen 8/8/8/8/8/8/8/8 w - - 0 1", "impossible position"),
        ("position startpos moves e2e4 e7e5 e1e2 e8e7 e2e8", "illegal move 'e2e8' (move 5)"),
        ("position startpos moves e2e5", "illegal move 'e2e5' (move 1)"),
        ("position startpos moves e2e4 0000", "illegal move '0000' (move 2)"),
        ("position startpos moves e2e4 banana", "illegal move 'banana' (move 2)"),
        ("position", "expected 'startpos' or 'fen <FEN>', got nothing"),
        ("position fen", "'fen' needs a FEN"),
        ("position middlegame", "got 'middlegame'"),
        ("position startpos e2e4", "unexpected 'e2e4' after startpos"),
    ],
)
def test_a_bad_position_is_reported_and_the_previous_one_kept(command: str, message: str) -> None:
    engine = Engine()
    engine.send("position startpos moves d2d4 d7d5")
    before = engine.server.board.copy()
    lines = engine.send(command)
    assert len(lines) == 1 and errors(lines) == lines
    assert message in lines[0] and lines[0].endswith("keeping the previous position")
    assert engine.server.board == before and engine.server.board.move_stack == before.move_stack
    assert engine.send("go")[-1].startswith("bestmove ")
    assert [m.uci() for m in engine.seen[-1][0].move_stack] == ["d2d4", "d7d5"]


def test_unknown_commands_are_reported_and_a_known_one_after_them_still_runs() -> None:
    engine = Engine()
    assert engine.send("foo") == ["info string error: unknown command 'foo'"]
    assert engine.send("foo bar baz") == ["info string error: unknown command 'foo bar baz'"]
    assert engine.send("joho isready") == ["info string error: unknown command 'joho' ignored", "readyok"]
    assert engine.send("", "   ", "\n") == []
    assert errors(engine.send("debug maybe")) == [
        "info string error: debug: expected 'on' or 'off', got 'maybe'"
    ]
    assert engine.server.debug is False


def test_bad_go_parameters_are_reported_and_the_search_still_answers() -> None:
    engine = Engine(lambda board, request: "d7d5")
    engine.send("position startpos moves d2d4")
    lines = engine.send("go wtime abc btime 1000 turbo winc x movetime")
    assert lines == [
        "info string error: go: wtime needs an integer, got 'abc'; ignored",
        "info string error: go: unknown parameter 'turbo'; ignored",
        "info string error: go: winc needs an integer, got 'x'; ignored",
        "info string error: go: movetime needs an integer value; ignored",
        "bestmove d7d5",
    ]
    _, request = engine.seen[-1]
    assert request.wtime is None and request.btime == 1000
    assert request.winc is None and request.movetime is None
    assert [m.uci() for m in engine.server.board.move_stack] == ["d2d4"]


def test_go_before_any_position_searches_the_start_position() -> None:
    engine = Engine(lambda board, request: "e2e4")
    assert engine.send("go") == [
        "info string error: go without a position; searching the start position",
        "bestmove e2e4",
    ]
    assert engine.seen[-1][0] == chess.Board()
    engine.send("position startpos moves e2e4", "ucinewgame")
    assert engine.send("go")[-1] == "bestmove e2e4"
    assert engine.seen[-1][0] == chess.Board()


@pytest.mark.parametrize("proposal", [None, "e2e5", "e7e5", "0000", "xyz", "", 42])
def test_an_illegal_or_missing_policy_move_falls_back_to_the_first_legal_move(proposal: object) -> None:
    engine = Engine(lambda board, request: proposal)  # type: ignore[arg-type, return-value]
    lines = engine.send("position startpos", "go")
    assert lines[-1] == "bestmove a2a3"  # sorted(legal moves)[0] in the start position
    assert len(lines) == 2 and lines[0].startswith("info string the policy gave ")
    assert "playing a2a3, the first legal move in UCI order" in lines[0]


def test_a_policy_that_raises_costs_no_game() -> None:
    def broken(board: chess.Board, request: SearchRequest) -> str:
        raise RuntimeError("CUDA out of memory")

    lines = Engine(broken).send("position startpos moves e2e4", "go")
    assert lines == [
        "info string error: the policy failed: RuntimeError: CUDA out of memory",
        "info string the policy gave no move; playing a7a5, the first legal move in UCI order",
        "bestmove a7a5",
    ]


def test_castling_given_as_king_takes_rook_is_answered_in_standard_uci() -> None:
    engine = Engine(lambda board, request: "e1h1")
    fen = "4k3/8/8/8/8/8/8/4K2R w K - 0 1"
    assert engine.send(f"position fen {fen}", "go") == ["bestmove e1g1"]


@pytest.mark.parametrize(
    "fen",
    [
        "7k/5KQ1/8/8/8/8/8/8 b - - 0 1",  # checkmated
        "rnb1kbnr/pppp1ppp/8/4p3/6Pq/5P2/PPPPP2P/RNBQKBNR w KQkq - 1 3",  # fool's mate
        "7k/5Q2/6K1/8/8/8/8/8 b - - 0 1",  # stalemate
    ],
)
def test_no_legal_move_answers_bestmove_0000(fen: str) -> None:
    engine = Engine()
    assert engine.send(f"position fen {fen}", "go") == ["bestmove 0000"]
    assert engine.seen == []  # the policy is not asked


def test_go_infinite_answers_at_stop() -> None:
    engine = Engine(lambda board, request: "e2e4")
    engine.send("position startpos")
    assert engine.send("go infinite") == ["info pv e2e4"]
    assert engine.seen[-1][1].infinite and engine.server.pending is not None
    assert engine.send("isready", "debug off") == ["readyok"]  # still thinking
    assert engine.send("stop") == ["bestmove e2e4"]
    assert engine.send("stop") == []  # nothing pending: stop is ignored
    assert engine.send("go ponder") == ["info pv e2e4"]
    assert engine.send("ponderhit") == ["bestmove e2e4"]


def test_a_held_search_is_released_before_a_command_that_needs_the_engine_idle() -> None:
    engine = Engine(lambda board, request: "e2e4" if board.turn else "e7e5")
    engine.send("position startpos", "go infinite")
    assert engine.send("position startpos moves e2e4") == ["bestmove e2e4"]
    assert engine.send("go infinite", "go") == ["info pv e7e5", "bestmove e7e5", "bestmove e7e5"]
    engine.send("go infinite")
    assert engine.server.handle("quit") is False
    assert engine.lines[-1] == "info pv e7e5"  # quit drops it


def test_setoption_temperature_and_unknown_options() -> None:
    engine = Engine()
    assert engine.send("setoption name Temperature value 1.5") == []
    assert engine.server.temperature == 1.5
    assert engine.send("setoption name temperature value 0") == []  # names are case-insensitive
    assert engine.server.temperature == 0.0
    for value in ("-1", "hot", "nan", "inf", ""):
        lines = engine.send("setoption name Temperature value 2", f"setoption name Temperature value {value}")
        assert len(errors(lines)) == 1 and "Temperature must be a number >= 0" in lines[0]
        assert engine.server.temperature == 2.0
    assert engine.send("setoption name Hash value 128") == [
        "info string error: setoption: unknown option 'Hash'; options: Temperature"
    ]
    assert engine.send("setoption name Clear Hash") == [
        "info string error: setoption: unknown option 'Clear Hash'; options: Temperature"
    ]
    assert errors(engine.send("setoption")) and errors(engine.send("setoption Temperature 1"))
    assert engine.server.temperature == 2.0


def test_debug_on_reports_each_search() -> None:
    engine = Engine(lambda board, request: "e2e4")
    lines = engine.send("debug on", "position startpos", "go nodes 5")
    assert lines[0].startswith(
        "info string debug: fen rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"
    )
    assert "'nodes': 5" in lines[0] and "policy 'e2e4'" in lines[0]
    assert lines[1:] == ["bestmove e2e4"]


def test_output_stays_on_one_line_per_message() -> None:
    lines: list[str] = []
    server = UCIServer(
        name="two\nlines", author="a\r\nb", choose_move=lambda b, r: "e2e4\nquit", out=lines.append
    )
    server.handle("uci")
    server.handle("go")
    assert lines[:2] == ["id name two lines", "id author a b"]
    assert all("\n" not in line and "\r" not in line for line in lines)
    assert lines[-1] == "bestmove a2a3"  # a move with a line break is no move


def test_quit_returns_false() -> None:
    engine = Engine()
    assert engine.server.handle("quit") is False
    assert engine.server.handle("  quit  \n") is False
    assert engine.lines == []


def test_serve_reads_until_quit_or_end_of_input() -> None:
    engine = Engine(lambda board, request: "e2e4")
    serve(io.StringIO("uci\nposition startpos\ngo\nquit\nisready\n"), engine.server)
    assert engine.lines[-2:] == ["uciok", "bestmove e2e4"]
    engine.lines.clear()
    serve(io.StringIO("isready\nisready"), engine.server)  # no quit, no final newline
    assert engine.lines == ["readyok", "readyok"]


def test_the_default_output_is_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    server = UCIServer(name="n", author="a", choose_move=lambda board, request: None)
    assert server.handle("isready") is True
    assert capsys.readouterr().out == "readyok\n"


def test_the_language_model_policy_plays_legal_moves_and_says_when_it_guesses() -> None:
    from chessrl.lm.models import build_model
    from pipelines.uci import LMPolicy

    model, tokenizer = build_model("tiny")  # untrained: its proposals are mostly illegal
    said: list[str] = []
    policy = LMPolicy(model, tokenizer, retries=1, seed=3, info=said.append)
    board = chess.Board()
    for _ in range(4):
        move = policy(board.copy(), SearchRequest())
        assert chess.Move.from_uci(move) in board.legal_moves
        board.push_uci(move)
    assert not any("FEN" in text for text in said)
    assert all(text.startswith("the model proposed no legal move in 2 tries; playing ") for text in said)

    said.clear()
    fen_board = chess.Board("4k3/8/8/8/8/8/8/4K2R w K - 0 1")
    for _ in range(2):
        assert (
            chess.Move.from_uci(policy(fen_board.copy(), SearchRequest(temperature=0.5)))
            in fen_board.legal_moves
        )
    assert (
        sum(text.startswith("warning: the model knows games from the start position only") for text in said)
        == 1
    )


def test_the_language_model_policy_keeps_the_latest_moves_that_fit_its_context() -> None:
    from chessrl.lm.models import build_model
    from pipelines.uci import MAX_NEW_TOKENS, LMPolicy

    model, tokenizer = build_model("tiny")
    said: list[str] = []
    policy = LMPolicy(model, tokenizer, info=said.append)
    assert policy.context == 512
    moves = ["g1f3", "g8f6", "f3g1", "f6g8"] * 200
    assert policy.fit(moves[:100]) == moves[:100]
    policy.context = 20 + 1 + MAX_NEW_TOKENS  # BOS, 20 one-token moves, room for the answer
    kept = policy.fit(moves)
    assert kept == moves[-20:]
    assert said == ["the game is longer than the model's context (29); it sees the latest moves"]
    policy.fit(moves)
    assert len(said) == 1

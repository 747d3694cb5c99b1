"""The RewardServer on the local Ray: 1,000 concurrent requests from several tasks all answered
in order and equal to scoring each alone; a bad request fails for its caller only; many items in
one call keep their order, a bad one answered with its own error; a server killed with SIGKILL
mid-batch restarts and every caller (one move or a whole step) gets an answer or one clear
error."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import ray

from actors.reward_server import RewardClient
from chessrl.rl.reward import (
    InvalidQueryError,
    RewardQuery,
    build_reward_model,
    example_queries,
    load_reward_model,
    query_ids,
    score_ids,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def reward_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("rm")
    model, tok = build_reward_model("tiny")
    model.config.chessrl_reward_mean, model.config.chessrl_reward_std = 0.25, 2.0
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def two_replicas(reward_dir, local_ray):
    """Two replicas of the saved model, shared by the tests that only call them."""
    client = RewardClient.create(
        str(reward_dir), replicas=2, run="rs-test", max_batch=64, max_wait_ms=5, num_cpus=0.5
    )
    yield client
    client.shutdown()


@ray.remote(num_cpus=0)
def caller(actors: list, qs: list[RewardQuery]) -> list[float]:
    return RewardClient(actors).score(qs, normalized=False)


def test_a_thousand_concurrent_requests_are_answered_in_order(reward_dir, two_replicas):
    client = two_replicas
    before = sum(s["batches"] for s in ray.get([a.stats.remote() for a in client.actors]))
    qs = example_queries(1000)
    parts = [qs[i::4] for i in range(4)]  # four tasks at once, interleaved
    answers = ray.get([caller.remote(client.actors, part) for part in parts], timeout=300)
    model, tok = load_reward_model(str(reward_dir))
    alone = {q: score_ids(model, [query_ids(tok, q)], tok.pad_token_id)[0] for q in set(qs)}
    for part, got in zip(parts, answers, strict=True):
        assert len(got) == len(part)
        for q, score in zip(part, got, strict=True):
            assert score == pytest.approx(alone[q], abs=1e-4)
    batches = sum(s["batches"] for s in ray.get([a.stats.remote() for a in client.actors])) - before
    assert batches < 1000 / 4  # requests were gathered into batches
    # normalised by the mean and std saved with the model
    [q] = qs[:1]
    assert client.score([q])[0] == pytest.approx((alone[q] - 0.25) / 2.0, abs=1e-4)
    # a bad request fails for its caller only
    refs = client.submit(
        [qs[0], RewardQuery(("e2e4",), "e2e4"), {"moves": [], "move": "e2e4", "fen": "not a fen"}, qs[1]]
    )
    assert ray.get(refs[0]) == pytest.approx(client.score([qs[0]])[0]) and isinstance(ray.get(refs[3]), float)
    for ref, message in ((refs[1], "illegal move 'e2e4'"), (refs[2], "bad FEN")):
        with pytest.raises(ray.exceptions.RayTaskError) as info:
            ray.get(ref)
        assert isinstance(info.value.cause, InvalidQueryError) and message in str(info.value.cause)


def test_many_items_in_one_call_keep_their_order_and_their_own_errors(reward_dir, two_replicas):
    """``score_many``: a rollout step in one call per replica; a bad item is answered with its
    own error in its place, and the rest are scored as if asked alone, whether the server or the
    caller (``prepare_here``, as collectors do) checks and tokenises them."""
    qs = example_queries(40)
    bad = [RewardQuery(("e2e4",), "e2e4"), {"moves": [], "move": "e2e4", "fen": "not a fen"}, {"moves": []}]
    mixed = qs[:10] + bad[:1] + qs[10:25] + bad[1:] + qs[25:]
    model, tok = load_reward_model(str(reward_dir))
    alone = score_ids(model, [query_ids(tok, q) for q in qs], tok.pad_token_id)
    for client in (two_replicas, RewardClient(two_replicas.actors, prepare_here=True)):
        got = client.score_many(mixed, normalized=False)
        assert len(got) == len(mixed)
        errors = [g for g in got if isinstance(g, InvalidQueryError)]
        assert [str(e).split(" ")[0] for e in errors] == ["illegal", "bad", "not"]
        assert [g for g in got if not isinstance(g, InvalidQueryError)] == pytest.approx(alone, abs=1e-4)
        assert [got.index(e) for e in errors] == [10, 26, 27]  # each in its own place
        with pytest.raises(InvalidQueryError, match="illegal move 'e2e4'"):
            client.score_batch(mixed)  # the all-or-nothing form raises the first
        assert client.score_many([]) == []


def test_a_server_killed_mid_batch_restarts_and_no_caller_hangs(reward_dir, local_ray):
    client = RewardClient.create(
        str(reward_dir), replicas=1, run="rs-kill", max_batch=32, max_wait_ms=20, num_cpus=0.5
    )
    try:
        qs = example_queries(3000)
        pid = ray.get(client.actors[0].stats.remote())["pid"]
        refs = client.submit(qs, normalized=False)
        many = [client.actors[0].score_many.remote(qs[i : i + 200], False) for i in range(0, 1000, 200)]
        ray.get(refs[:64], timeout=120)  # it is serving
        os.kill(pid, signal.SIGKILL)
        done_before, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        assert len(done_before) < len(qs)  # killed mid-stream: calls were still waiting on it
        answered = failed = 0
        deadline = time.monotonic() + 300
        for ref in refs:
            try:
                value = ray.get(ref, timeout=max(1.0, deadline - time.monotonic()))
                assert isinstance(value, float)
                answered += 1
            except ray.exceptions.RayActorError:
                failed += 1  # one clear error: the actor died under this call
        assert answered + failed == len(qs) and answered >= 64  # every caller heard back: none hangs
        whole = errors = 0
        for ref in many:  # a step in flight: answered whole (retried on the restarted server) or one error
            try:
                got = ray.get(ref, timeout=max(1.0, deadline - time.monotonic()))
                assert len(got) == 200 and all(isinstance(v, float) for v in got)
                whole += 1
            except ray.exceptions.RayActorError:
                errors += 1
        assert whole + errors == len(many)  # and nothing else: no partial answer, no other error
        new_pid = ray.get(client.actors[0].stats.remote(), timeout=120)["pid"]
        assert new_pid != pid  # restarted, and serving again
        assert isinstance(client.score(qs[:3])[0], float)
    finally:
        client.shutdown()


def test_a_board_reading_model_is_asked_in_its_own_text(reward_dir, local_ray, tmp_path):
    """A reward model whose config says it reads the board (``chessrl_text_format: board``, as
    the reward phase writes it) is asked the position before the move, not the moves."""
    import json
    import shutil

    from chessrl.lm.formats import BoardFormat

    folder = tmp_path / "board-rm"
    shutil.copytree(reward_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "chessrl_text_format": "board"}))
    client = RewardClient.create(
        str(folder), replicas=1, run="rs-board", max_batch=16, max_wait_ms=5, num_cpus=0.5
    )
    try:
        qs = example_queries(12)
        got = client.score(qs, normalized=False)
        model, tok = load_reward_model(str(folder))
        board = score_ids(model, [query_ids(tok, q, BoardFormat()) for q in qs], tok.pad_token_id)
        moves = score_ids(model, [query_ids(tok, q) for q in qs], tok.pad_token_id)
        assert got == pytest.approx(board, abs=1e-4)
        assert got != pytest.approx(moves, abs=1e-4)  # another text: other scores
    finally:
        client.shutdown()

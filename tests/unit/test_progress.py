"""Driver progress lines: the format, and which reports the board prints."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import pytest

from cluster.progress import ProgressBoard, clock, progress_line, report_progress


class ListQueue:
    """The part of ray.util.queue.Queue the board and report_progress use."""

    def __init__(self) -> None:
        self.items: list[Any] = []

    def put_nowait(self, item: Any) -> None:
        self.items.append(item)

    def qsize(self) -> int:
        return len(self.items)

    def get_nowait_batch(self, n: int) -> list[Any]:
        taken, self.items = self.items[:n], self.items[n:]
        return taken


def test_line_names_position_total_elapsed_left_and_figures() -> None:
    line = progress_line("iteration", 2, 8, elapsed_s=30, start=0, figures="reward +0.100")
    assert line == "iteration 2/8 (25%), 0:30 elapsed, ~1:30 left: reward +0.100"


def test_time_left_is_this_invocations_rate_after_a_resume() -> None:
    # resumed at 6: 2 iterations in 20 s, 2 left -> 20 s
    assert "~0:20 left" in progress_line("iteration", 8, 10, elapsed_s=20, start=6, figures="")


@pytest.mark.parametrize(("done", "start"), [(0, 0), (5, 5), (10, 0)])
def test_no_time_left_before_the_first_unit_or_after_the_last(done: int, start: int) -> None:
    assert "left" not in progress_line("step", done, 10, elapsed_s=12, start=start, figures="")


def test_clock_rolls_into_hours() -> None:
    assert [clock(s) for s in (0, 59.6, 61, 3599, 3600, 7384)] == [
        "0:00",
        "1:00",
        "1:01",
        "59:59",
        "1:00:00",
        "2:03:04",
    ]


def test_report_without_a_board_or_with_a_broken_one_does_not_raise() -> None:
    report_progress(None, 3, "x")

    class Gone:
        def put_nowait(self, item: Any) -> None:
            raise RuntimeError("the actor died")

    report_progress(Gone(), 3, "x")


def until(condition: Callable[[], object], timeout_s: float = 10.0) -> bool:
    """Poll ``condition`` until it holds (True) or ``timeout_s`` passes (False): a board's thread
    gets there when the machine lets it, so no test waits a fixed time and hopes."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_board_prints_shown_reports_throttles_the_rest_and_prints_the_newest_at_the_end() -> None:
    lines: list[str] = []
    queue = ListQueue()
    board = ProgressBoard(lines.append, "step", 100, every_s=3600, queue=queue)
    with board:
        for step in range(1, 50):
            report_progress(queue, step, f"loss {1 / step:.3f}", show=step == 20)
        deadline = time.monotonic() + 5
        while queue.qsize() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert [line.split(",")[0] for line in lines] == ["step 20/100 (20%)", "step 49/100 (49%)"]
    assert lines[-1].endswith("loss 0.020")
    assert len(set(lines)) == len(lines)


def test_board_prints_a_held_back_report_once_every_s_has_passed() -> None:
    lines: list[str] = []
    queue = ListQueue()
    with ProgressBoard(lines.append, "step", 10, every_s=0.2, queue=queue, poll_s=0.05):
        report_progress(queue, 1, "loss 2.0")
        assert until(lambda: lines), "the held-back report never came"
        assert lines[0].startswith("step 1/10")
    # nothing new arrived: the end prints no report again, only "still working" lines came after
    assert all("working on the next step" in line for line in lines[1:])


def test_the_last_unit_is_always_printed() -> None:
    lines: list[str] = []
    queue = ListQueue()
    with ProgressBoard(lines.append, "iteration", 3, every_s=3600, queue=queue, poll_s=0.05):
        report_progress(queue, 1, "a")
        report_progress(queue, 3, "c")
        assert until(lambda: lines), "the last unit was not printed"
        assert [line.split(" (")[0] for line in lines] == ["iteration 3/3"]


def test_a_quiet_learner_gets_a_line_saying_so() -> None:
    lines: list[str] = []
    queue = ListQueue()
    with ProgressBoard(lines.append, "iteration", 5, every_s=0.5, queue=queue, poll_s=0.05):
        # nothing printed for over 1.5 x every_s: the learner is starting
        assert until(lambda: lines), "no line while the learner was quiet"
        assert re.fullmatch(r"the learner is starting, 0:0[0-3] elapsed \(5 iterations in all\)", lines[0]), (
            lines
        )
        report_progress(queue, 1, "reward +0.1", show=True)
        assert until(lambda: len(lines) >= 3), lines
    assert lines[1].startswith("iteration 1/5 (20%)")
    assert "working on the next iteration (none reported for" in lines[2]


def test_a_silent_driver_says_it_is_still_working() -> None:
    from pipelines.common.phase import keep_talking, phase_logger

    lines: list[str] = []  # the logger's own sink: nothing else the process prints reaches it
    log = phase_logger("grpo", write=lines.append)
    log("scoring the held-out prompts")
    with keep_talking(log, every_s=1.0):
        time.sleep(2.6)
    assert lines[0] == "[grpo] scoring the held-out prompts"
    reminders = lines[1:]
    assert 1 <= len(reminders) <= 3, lines
    assert all(
        re.fullmatch(r"\[grpo\] still working, 0:0\d since: scoring the held-out prompts", r)
        for r in reminders
    ), lines
    assert len(set(lines)) == len(lines), lines  # each reminder counts from the line it names


def test_a_line_printed_while_a_reminder_is_due_is_the_one_named_next() -> None:
    from pipelines.common.phase import keep_talking, phase_logger

    lines: list[str] = []
    log = phase_logger("ppo", write=lines.append)
    log("loading the policy")
    with keep_talking(log, every_s=0.5):
        time.sleep(1.3)
        log("collecting episodes")
        time.sleep(2.2)
    named = [line.split(" since: ")[1] for line in lines if "still working" in line]
    first_new = lines.index("[ppo] collecting episodes")
    assert set(named[: first_new - 1]) <= {"loading the policy"}, lines
    assert named[first_new - 1 :] and set(named[first_new - 1 :]) == {"collecting episodes"}, lines


def test_a_board_makes_its_queue_actor_only_when_the_handle_is_first_used(monkeypatch) -> None:
    """A trainer refused before it starts (a worker bigger than any node) must leave no queue
    actor behind: the board makes it when ``torch_trainer`` reads the handle, after its checks.
    The queue lives on the driver's node, pinned: on any other node an autoscaler may take it
    away with the lines reported after (a CI run lost ppo's last line that way)."""
    import types

    import ray
    import ray.util.queue

    made = []

    class CountingQueue:
        def __init__(self, actor_options: dict) -> None:
            made.append(actor_options)

    monkeypatch.setattr(ray.util.queue, "Queue", CountingQueue)
    driver = types.SimpleNamespace(get_node_id=lambda: "d" * 56)
    monkeypatch.setattr(ray, "get_runtime_context", lambda: driver)
    board = ProgressBoard(lambda line: None, "step", 10)
    assert made == []
    handle = board.handle
    assert isinstance(handle, CountingQueue) and board.handle is handle
    [options] = made
    assert options["num_cpus"] == 0
    where = options["scheduling_strategy"]
    assert (where.node_id, where.soft) == ("d" * 56, False)


def test_a_phase_logger_survives_the_trip_into_a_ray_task(capsys: pytest.CaptureFixture[str]) -> None:
    """Contexts carry their logger into Ray tasks (tune trials, graph nodes): it must pickle."""
    import pickle

    from ray import cloudpickle

    from pipelines.common.phase import phase_logger

    log = pickle.loads(cloudpickle.dumps(phase_logger("sft")))
    log("loading the model")
    assert capsys.readouterr().err == "[sft] loading the model\n"

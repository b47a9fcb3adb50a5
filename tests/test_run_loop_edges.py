"""The run loop at its edges: k selected clients equal to all of them, a dropped client is
never also late, the last round is always evaluated, and round t's record counts the local
steps of t rounds."""

from __future__ import annotations

import fedlabels as fl
from fedlabels.runs.loop import evaluation_due
from fedlabels.runs.participation import Participation, draw_round


def test_selecting_every_client_by_count_is_allowed():
    policy = Participation.parse(4)
    assert policy is not None
    policy.check_clients(4)
    assert draw_round(policy, 0, 0, [10, 20, 30, 40]).selected == (0, 1, 2, 3)


def test_a_dropped_client_is_not_also_late():
    policy = Participation.parse(1.0, dropout=0.5, deadline=0.5)
    assert policy is not None
    sizes = [5, 50, 500, 5000] * 5  # the large ones miss a 0.5 deadline
    both = 0
    for rnd in range(20):
        draw = draw_round(policy, 3, rnd, sizes)
        assert not set(draw.late) & set(draw.dropped)
        assert set(draw.late) == {c for c in draw.selected if c not in draw.dropped
                                  and draw.times[c] > 0.5}
        both += len(draw.dropped) > 0 and len(draw.late) > 0
    assert both > 0


def test_evaluation_is_due_every_k_rounds_and_at_the_last():
    due = [r for r in range(10) if evaluation_due(r, 10, 4)]
    assert due == [3, 7, 9]
    assert [r for r in range(5) if evaluation_due(r, 5, 1)] == [0, 1, 2, 3, 4]
    assert [r for r in range(5) if evaluation_due(r, 5, 10)] == [4]


def test_round_records_count_the_local_steps_so_far(breast_cancer_fed):
    res = fl.run("fedavg", breast_cancer_fed, model="mlp(hidden=4)", rounds=3, period=5,
                 seed=0, progress=False)
    assert [r.local_steps for r in res.rounds] == [5, 10, 15]


def test_a_late_client_gets_no_second_message_in_its_round():
    """A round of two exchanges (XCLP's, PATE's release): a client late in the first does
    the work, its reply is discarded, and the second exchange of that round skips it;
    evaluation still reaches it, and the next round it is drawn afresh."""
    from fedlabels.comm import Message
    from fedlabels.runs.participation import ParticipationGrid

    sizes = [5, 50, 500, 5000]
    policy = Participation.parse(1.0, deadline=0.5)
    assert policy is not None

    class Inner:
        def __init__(self) -> None:
            self.client_ids = [0, 1, 2, 3]
            self.delivered: list[set[int]] = []

        def exchange(self, messages, rnd):
            self.delivered.append(set(messages))
            return {c: Message("reply") for c in messages}

    inner = Inner()
    grid = ParticipationGrid(inner, policy, 0, sizes)
    late = set(grid.draw(0).late)
    assert late  # the 5000-row client misses a 0.5 deadline
    everyone = {c: Message("work") for c in range(4)}
    assert set(grid.exchange(everyone, 0)) == {0, 1, 2, 3} - late
    assert inner.delivered[-1] == {0, 1, 2, 3}
    grid.exchange(everyone, 0)
    assert inner.delivered[-1] == {0, 1, 2, 3} - late
    grid.exchange({c: Message("evaluate", category="evaluation") for c in range(4)}, 0)
    assert inner.delivered[-1] == {0, 1, 2, 3}
    grid.exchange(everyone, 1)
    assert inner.delivered[-1] == {0, 1, 2, 3}


def test_a_resumed_runs_wall_time_includes_the_time_before_the_interruption(
        breast_cancer_fed, tmp_path):
    """The interrupted part takes over 1.5 s (its hook sleeps after round 1, then stops
    the run after round 2), the checkpoint records it, and the resumed result's
    wall_seconds adds it to the resumed part's own time."""
    import time

    from fedlabels.runs.checkpoint import load_checkpoint
    from test_resume import sim

    path = tmp_path / "run.checkpoint.npz"

    def slow_interrupt(record):
        if record.round == 1:
            time.sleep(1.5)
        else:
            raise KeyboardInterrupt

    sim("fedct", breast_cancer_fed, rounds=4, checkpoint=path, on_round=slow_interrupt)
    before = float(load_checkpoint(path).meta["wall_seconds"])
    assert before >= 1.5
    started = time.perf_counter()
    resumed = sim("fedct", breast_cancer_fed, rounds=4, resume=path)
    assert before <= resumed.wall_seconds <= before + time.perf_counter() - started

"""Upper bounds on the counts that set how long a run is, shared by the run parameters
(:class:`~fedlabels.runs.config.RunConfig`) and the methods' options.

Each lies far beyond any real run (the FedCT paper's longest is T = 20,000 rounds; the
docs' and benchmarks' longest are 400 rounds and 5,000 steps) and is small enough that an
absurd value is refused before any work: ``--rounds 10**30`` ran until Ctrl-C, and a
result keeps one record per round, so a million rounds is already a file of hundreds of MB.
"""

from __future__ import annotations

#: the most communication rounds of a run, or of a phase of one (FREDY's teacher rounds)
MAX_ROUNDS = 10**6
#: the most local training steps per round (``period``) or per phase of a round
MAX_STEPS = 10**6
#: the most disjoint parts of a client's data (DP-FedCT's teachers): one per record at most;
#: beyond it a count overflowed (teachers = 10**30)
MAX_PARTS = 10**6
#: the most records whose neighbouring datasets an empirical s* retrains (each one a
#: retraining); beyond it a result's privacy statement named more records than any client has
MAX_NEIGHBOURS = 10**5


def number_text(value: float) -> str:
    """A bound as a user types it: an int in full (``1000000``), a float short (``1e+06``)."""
    return str(value) if isinstance(value, int) else f"{value:g}"


__all__ = ["MAX_NEIGHBOURS", "MAX_PARTS", "MAX_ROUNDS", "MAX_STEPS", "number_text"]

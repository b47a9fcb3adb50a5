"""Client groups (``group_size``): independent XCLP runs over a seeded partition of the clients.

One joint graph over all clients costs quadratically in points (and, in the protocol, one
solve per labelled point); the paper handles many clients by grouping them (its FEMNIST
setup). The server partitions the participating clients into ⌈m/G⌉ groups of as equal sizes
as possible (a seeded permutation cut by ``np.array_split``; a group of one client, which
would be per-client LP, joins the smallest other group) and runs XCLP in each group
separately: nothing crosses groups, and each group's result is that of a standalone XCLP
run over its clients.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedlabels.method.base import Grid
from fedlabels.methods.xclp.server import XCLPOutcome, XCLPServerCore


def client_groups(participants: list[int], group_size: int | None,
                  rng: np.random.Generator) -> list[list[int]]:
    """The groups (each sorted) of ``participants``; one group if ``group_size`` is None."""
    members = sorted(participants)
    if group_size is None or len(members) <= group_size:
        return [members]
    n_groups = -(-len(members) // group_size)
    order = rng.permutation(members)
    groups = [sorted(int(c) for c in g) for g in np.array_split(order, n_groups)]
    while len(groups) > 1 and min(len(g) for g in groups) == 1:
        single = next(g for g in groups if len(g) == 1)
        groups.remove(single)
        target = min(groups, key=len)
        target[:] = sorted(target + single)
    return groups


def run_groups(core: XCLPServerCore, grid: Grid, rnd: int, participants: list[int],
               session: int, rng: np.random.Generator,
               setup_arrays: dict[str, np.ndarray] | None = None) -> list[XCLPOutcome]:
    """XCLP in every group of ``participants`` (``core.opts.group_size``), one after another."""
    return [core.run(grid, rnd, group, session=session, setup_arrays=setup_arrays)
            for group in client_groups(participants, core.opts.group_size, rng)]


def outcome_record(outcome: XCLPOutcome) -> dict[str, Any]:
    """What the result records of one XCLP run (one group)."""
    return {"n_points": outcome.n_points, "graph_members": outcome.graph_members,
            "rowsum_members": outcome.rowsum_members,
            "dropped": {str(k): v for k, v in outcome.dropped.items()},
            "rowsum_attempts": outcome.rowsum_attempts, "seconds": outcome.seconds,
            "bytes_up": outcome.bytes_up, "bytes_down": outcome.bytes_down}


def outcomes_record(outcomes: list[XCLPOutcome]) -> dict[str, Any]:
    """Totals over the groups (the flat record of an ungrouped run) plus, with more than one
    group, each group's record under ``groups``."""
    if len(outcomes) == 1:
        return outcome_record(outcomes[0])
    phases = sorted({k for o in outcomes for k in o.seconds})
    record = {
        "n_points": sum(o.n_points for o in outcomes),
        "graph_members": sorted(c for o in outcomes for c in o.graph_members),
        "rowsum_members": sorted(c for o in outcomes for c in o.rowsum_members),
        "dropped": {str(k): v for o in outcomes for k, v in o.dropped.items()},
        "rowsum_attempts": max(o.rowsum_attempts for o in outcomes),
        "seconds": {k: sum(o.seconds.get(k, 0.0) for o in outcomes) for k in phases},
        "bytes_up": sum(o.bytes_up for o in outcomes),
        "bytes_down": sum(o.bytes_down for o in outcomes),
    }
    record["groups"] = [{"members": o.participants, **outcome_record(o)} for o in outcomes]
    return record

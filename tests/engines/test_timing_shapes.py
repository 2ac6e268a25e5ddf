"""The pass-shape builder the timing tests share, and the §5.1 aggregates it yields."""

from __future__ import annotations

import numpy as np

from engines import PassShape, Role

Entry = tuple[int, int, int, int, bool]


def shape(*entries: Entry, role: Role = "aggregated", capacity: int = 0) -> PassShape:
    """Build a pass from ``(n_r, c_r, P, num_output_before, samples)`` rows."""
    rows = np.array([e[:4] for e in entries], dtype=np.int64).reshape(-1, 4)
    return PassShape(
        scheduled=rows[:, 0].copy(),
        computed=rows[:, 1].copy(),
        prompt_length=rows[:, 2].copy(),
        output_before=rows[:, 3].copy(),
        samples=np.array([e[4] for e in entries], dtype=np.bool_),
        role=role,
        kv_capacity_tokens=capacity,
    )


def test_builder_yields_the_section_5_1_aggregates() -> None:
    built = shape((1, 1000, 1000, 1, True), (40, 960, 1000, 0, True), (512, 0, 2000, 0, False))
    assert built.prefill_tokens == 552
    assert built.decode_count == 1
    assert built.kv_positions == 1001 + 1000 + 512
    assert built.sampling_count == 2


def test_builder_accepts_an_empty_pass() -> None:
    built = shape()
    assert len(built.scheduled) == 0
    assert built.prefill_tokens == 0

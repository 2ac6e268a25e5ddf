"""Limits every reader and generator enforces, so that no input can exhaust a run.

The values are documented in ``docs/reference/trace-limits.md``; a test checks the page
quotes them. Exceeding one is a bad-input error raised before any simulation:
``TraceFormatError`` (``file:line: field: problem``) for a trace,
``WorkloadConfigError`` (``option: problem``) for a synthetic spec.
"""

from __future__ import annotations

__all__ = (
    "MAX_COUNT",
    "MAX_IDS",
    "MAX_INSTANT_MS",
    "MAX_MEMBER_BYTES",
    "MAX_TOKENS",
    "ids_problem",
    "instant_problem",
    "tokens_problem",
)

MAX_TOKENS = 1 << 24
"""Most tokens in one request's prompt or output (16,777,216)."""

MAX_IDS = 1 << 20
"""Most content ids in one request (``ceil(P / T)``, 1,048,576), where a reader or
generator makes them (CSV private ids, merged ``mooncake-delta`` and synthetic prompts)."""

MAX_INSTANT_MS = 100 * 365.25 * 86_400_000.0
"""Latest arrival instant and longest delay a workload may hold, in milliseconds (100
years). The virtual clock counts int64 nanoseconds (about 292 years); the headroom covers
service times and chains of delays."""

MAX_MEMBER_BYTES = 1 << 26
"""Largest JSON document the WEKA reader reads: a ``.json`` file, a ``.jsonl`` line, an
archive member (64 MiB, uncompressed; the largest in the WEKA corpus is 4 MiB)."""

MAX_COUNT = 10_000_000
"""Most sessions a synthetic spec may generate (``count``)."""


def instant_problem(value_ms: float, what: str = "") -> str:
    """The problem text for an instant or delay past :data:`MAX_INSTANT_MS`."""
    shown = f"{value_ms:.0f}" if value_ms < 1e16 else repr(value_ms)
    return (
        f"{shown} ms{what} is past the clock's range (at most {MAX_INSTANT_MS:.0f} ms, 100 years)"
    )


def ids_problem(tokens: int, block: int) -> str:
    """The problem text for a prompt needing more than :data:`MAX_IDS` content ids."""
    return (
        f"{tokens} tokens at block_size {block} make {-(-tokens // block)} content ids; "
        f"at most {MAX_IDS}"
    )


def tokens_problem(value: float) -> str:
    """The problem text for a token count past :data:`MAX_TOKENS`."""
    huge = isinstance(value, int) and value >= 10**30
    shown = f"a {len(str(value))}-digit number" if huge else str(value)
    return f"must be at most {MAX_TOKENS} tokens, got {shown}"

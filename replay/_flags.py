"""Command-line value types: each turns a flag's text into a value or an argparse error."""

from __future__ import annotations

import argparse

from loadgen import FORMATS

__all__ = (
    "format_name",
    "non_negative_float",
    "non_negative_int",
    "positive_float",
    "positive_int",
)


def format_name(text: str) -> str:
    """``auto`` or a trace format name."""
    if text not in ("auto", *FORMATS):
        known = ", ".join(("auto", *FORMATS))
        raise argparse.ArgumentTypeError(f"unknown format {text!r}; known: {known}")
    return text


def _int_at_least(low: int, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1."""
    return _int_at_least(1, text)


def non_negative_int(text: str) -> int:
    """An integer >= 0."""
    return _int_at_least(0, text)


def non_negative_float(text: str) -> float:
    """A finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value

"""Command-line value types: each turns a flag's text into a value or an argparse error."""

from __future__ import annotations

import argparse

from loadgen import FORMATS

__all__ = ("format_name", "non_negative_int", "positive_float", "positive_int")


def format_name(text: str) -> str:
    if text not in ("auto", *FORMATS):
        known = ", ".join(("auto", *FORMATS))
        raise argparse.ArgumentTypeError(f"unknown format {text!r}; known: {known}")
    return text


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value

"""Preparation: the checks and normalisations a workload goes through before any replay.

The built-in topologies call :func:`prepare`; a user-supplied composition calls it (or its
parts, :func:`validate_requests` and :func:`normalize_block_ids`) the same way.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import attrs

from loadgen import Request, SyntheticRequests, Workload

from ._exceptions import WorkloadValidationError

__all__ = ("PreparedWorkload", "normalize_block_ids", "prepare", "validate_requests")


@attrs.frozen
class PreparedWorkload:
    """A workload checked and normalised for replay.

    Attributes:
        workload: the original workload (the report lists its requests in this order).
        requests: the requests to replay, in workload order, each with exactly
            ``ceil(input_length / block_size)`` content ids: a tuple, or the workload's own
            :class:`loadgen.SyntheticRequests` when its columns pass the checks as they are
            (``SyntheticRequests.replayable``).
        positions: request id -> position in :attr:`requests`: a dict, or the
            ``SyntheticRequests.positions()`` mapping that reads positions off the ids.
        engine_block_size: the engines' KV block size ``E`` the run uses, if given.
        trimmed_ids: surplus content ids dropped by normalisation.
        tokenizer: the frontend tokenization stage (``engines.TokenizerStage``), or None.
    """

    workload: Workload
    requests: Sequence[Request]
    positions: Mapping[str, int]
    engine_block_size: int | None = None
    trimmed_ids: int = 0
    tokenizer: object | None = None

    def __len__(self) -> int:
        return len(self.requests)


def _fail(request_id: str, field: str, problem: str) -> WorkloadValidationError:
    return WorkloadValidationError(f"request {request_id!r}: {field}: {problem}")


def validate_requests(requests: Iterable[Request]) -> dict[str, int]:
    """Check that requests can be replayed and return their positions by id.

    Checks: ids non-empty and unique; ``input_length >= 1``; ``output_length >= 0``;
    ``block_size >= 1``; at least ``ceil(input_length / block_size)`` content ids; a root
    (no dependency) has a finite ``not_before_ms >= 0``; every dependency names another request
    of the workload, with a finite ``delay_ms >= 0``.

    Returns:
        Request id -> position, in order.

    Raises:
        WorkloadValidationError: the first request that breaks a rule, in order (unknown
            dependencies are reported after all ids are known).
    """
    positions: dict[str, int] = {}
    ordered = list(requests)
    for position, request in enumerate(ordered):
        rid = request.id
        if not isinstance(rid, str) or not rid:
            raise _fail(str(rid), "id", "must be a non-empty string")
        if rid in positions:
            raise _fail(rid, "id", f"duplicate of request at position {positions[rid]}")
        positions[rid] = position
        if request.input_length < 1:
            raise _fail(rid, "input_length", f"must be >= 1, got {request.input_length}")
        if request.output_length < 0:
            raise _fail(rid, "output_length", f"must be >= 0, got {request.output_length}")
        if request.block_size < 1:
            raise _fail(rid, "block_size", f"must be >= 1, got {request.block_size}")
        need = -(-request.input_length // request.block_size)
        if len(request.hash_ids) < need:
            raise _fail(
                rid,
                "hash_ids",
                f"{len(request.hash_ids)} ids cover at most "
                f"{len(request.hash_ids) * request.block_size} tokens at block_size "
                f"{request.block_size}; input_length {request.input_length} needs {need}",
            )
        arrival = request.arrival
        if arrival.not_before_ms is not None and (
            not math.isfinite(arrival.not_before_ms) or arrival.not_before_ms < 0
        ):
            raise _fail(
                rid,
                "arrival.not_before_ms",
                f"must be finite and >= 0, got {arrival.not_before_ms}",
            )
        if not arrival.after and arrival.not_before_ms is None:
            raise _fail(rid, "arrival", "a request without dependencies needs not_before_ms")
        for dep in arrival.after:
            if not math.isfinite(dep.delay_ms) or dep.delay_ms < 0:
                raise _fail(
                    rid, "arrival.after.delay_ms", f"must be finite and >= 0, got {dep.delay_ms}"
                )
            if dep.request_id == rid:
                raise _fail(rid, "arrival.after", "depends on itself")
    for request in ordered:
        for dep in request.arrival.after:
            if dep.request_id not in positions:
                raise _fail(request.id, "arrival.after", f"unknown request {dep.request_id!r}")
    return positions


def normalize_block_ids(request: Request) -> Request:
    """Return ``request`` with exactly ``ceil(input_length / block_size)`` content ids.

    Surplus ids (beyond the prompt) are dropped; a request that already has the right number is
    returned unchanged (the same object). Engines then key blocks of any size ``E`` from these
    ids (REFERENCE-engine §4.2), whether or not ``E`` divides the trace block size.

    Raises:
        WorkloadValidationError: too few ids for the prompt.
    """
    need = -(-request.input_length // request.block_size)
    have = len(request.hash_ids)
    if have == need:
        return request
    if have < need:
        raise _fail(
            request.id,
            "hash_ids",
            f"{have} ids cover at most {have * request.block_size} tokens at block_size "
            f"{request.block_size}; input_length {request.input_length} needs {need}",
        )
    return attrs.evolve(request, hash_ids=request.hash_ids[:need])


def prepare(
    workload: Workload, *, engine_block_size: int | None = None, tokenizer: object | None = None
) -> PreparedWorkload:
    """Validate a workload and normalise its requests for replay.

    Args:
        workload: the workload, as a reader or generator produced it. Its request ids are
            already deterministic (REFERENCE-workloads §1.3); they are checked, never changed.
        engine_block_size: the engines' KV block size ``E``, checked to be >= 1 and echoed.
        tokenizer: the frontend tokenization stage the run puts before the policy
            (``engines.TokenizerStage``; anything with ``enabled`` and ``pool()``), or None.

    Returns:
        The prepared workload.

    Raises:
        WorkloadValidationError: a request cannot be replayed (see :func:`validate_requests`),
            or ``engine_block_size`` or ``tokenizer`` is invalid.
    """
    if engine_block_size is not None and (
        isinstance(engine_block_size, bool)
        or not isinstance(engine_block_size, int)
        or engine_block_size < 1
    ):
        raise WorkloadValidationError(
            f"engine_block_size: must be an int >= 1, got {engine_block_size!r}"
        )
    if tokenizer is not None and not (
        hasattr(tokenizer, "enabled") and callable(getattr(tokenizer, "pool", None))
    ):
        raise WorkloadValidationError(
            f"tokenizer: must be a tokenizer stage (engines.TokenizerStage), got {tokenizer!r}"
        )
    if isinstance(workload.requests, SyntheticRequests) and workload.requests.replayable():
        # Checked on its columns: kept as it is, no request built and no table of ids.
        return PreparedWorkload(
            workload=workload,
            requests=workload.requests,
            positions=workload.requests.positions(),
            engine_block_size=engine_block_size,
            tokenizer=tokenizer,
        )
    positions = validate_requests(workload.requests)
    requests = tuple(normalize_block_ids(r) for r in workload.requests)
    trimmed = sum(
        len(a.hash_ids) - len(b.hash_ids)
        for a, b in zip(workload.requests, requests, strict=True)
        if a is not b
    )
    return PreparedWorkload(
        workload=workload,
        requests=requests,
        positions=positions,
        engine_block_size=engine_block_size,
        trimmed_ids=trimmed,
        tokenizer=tokenizer,
    )

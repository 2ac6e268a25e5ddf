"""Synthetic workloads (REFERENCE-workloads §3): arrivals, lengths, prefix groups, sessions.

Everything is drawn from four named child streams of the seed, in this order:
``arrivals, lengths, prefix, think`` (§0). Generation runs session by session and each
stream is consumed in session order, so asking for more sessions never changes the
earlier ones.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from ._distributions import (
    ArrivalProcess,
    Exponential,
    Fixed,
    LengthDistribution,
    Uniform,
    parse_arrivals,
    parse_distribution,
)
from ._exceptions import SLOError, WorkloadConfigError
from ._intern import ContentInterner, Run, reblock
from ._limits import (
    MAX_COUNT,
    MAX_IDS,
    MAX_INSTANT_MS,
    MAX_TOKENS,
    ids_problem,
    instant_problem,
    tokens_problem,
)
from ._read import read_trace
from ._slo import SLO
from ._synthetic_table import SyntheticRequests
from ._workload import Workload

__all__ = ("EmpiricalLengths", "SyntheticSpec", "generate_synthetic", "parse_synthetic")

STREAMS: tuple[str, ...] = ("arrivals", "lengths", "prefix", "think")

_SCOPE = "syn"
MAX_TURNS = 100_000  # turns per session: each later turn holds every earlier one
_INPUT = Fixed(512.0)
_OUTPUT = Fixed(128.0)
_ONE = Fixed(1.0)
_ZERO = Fixed(0.0)


@attrs.frozen
class EmpiricalLengths:
    """Lengths resampled from a trace: one request is picked, its input and output used
    together (``rng.integers(0, n)``)."""

    inputs: tuple[int, ...]
    outputs: tuple[int, ...]

    @classmethod
    def from_workload(cls, workload: Workload) -> EmpiricalLengths:
        """Take the lengths of every request of ``workload``."""
        if not workload.requests:
            raise WorkloadConfigError("lengths: the empirical trace has no requests")
        return cls(
            tuple(r.input_length for r in workload.requests),
            tuple(r.output_length for r in workload.requests),
        )

    def draw(self, rng: np.random.Generator) -> tuple[int, int]:
        """Pick one request; return its ``(input, output)``."""
        i = int(rng.integers(0, len(self.inputs)))
        return self.inputs[i], self.outputs[i]


def _opt_int(name: str, value: object, minimum: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise WorkloadConfigError(f"{name}: must be an integer >= {minimum}, got {value!r}")
    return value


@attrs.frozen
class SyntheticSpec:
    """What to generate (§3). Parse one from a config table with :meth:`from_dict`.

    Attributes:
        count: sessions to generate (requests when every session has one turn).
        arrivals: the arrival process of sessions (first turns).
        input: prompt length of first turns.
        output: output length of every turn.
        lengths: resample ``(input, output)`` pairs from a trace instead of ``input`` /
            ``output``.
        input_min, input_max, output_min, output_max: clamps.
        block_size: tokens per content id ``T``.
        prefix_groups: ``G``, the number of shared-prefix groups (0: none).
        shared_prefix_ratio: ``r``, the share of a first turn's blocks from its group.
        turns: turns per session (fixed or uniform).
        new_input: new tokens of each later turn (default: ``input``).
        think_ms: think time before each later turn (fixed, uniform, exponential,
            lognormal).
        slo: every generated request's own SLO (``slo=ttft=500,tpot=50`` in the CLI form,
            ``slo = {ttft = 500, tpot = 50}`` or the same string in a config), or None: the
            run's SLO then applies.
    """

    count: int
    arrivals: ArrivalProcess
    input: LengthDistribution = _INPUT
    output: LengthDistribution = _OUTPUT
    lengths: EmpiricalLengths | None = None
    input_min: int = 1
    input_max: int | None = None
    output_min: int = 0
    output_max: int | None = None
    block_size: int = 64
    prefix_groups: int = 0
    shared_prefix_ratio: float = 0.0
    turns: LengthDistribution = _ONE
    new_input: LengthDistribution | None = None
    think_ms: LengthDistribution = _ZERO
    slo: SLO | None = None

    def __attrs_post_init__(self) -> None:
        _opt_int("count", self.count, 1)
        _opt_int("input_min", self.input_min, 1)
        _opt_int("input_max", self.input_max, self.input_min)
        _opt_int("output_min", self.output_min, 0)
        _opt_int("output_max", self.output_max, self.output_min)
        _opt_int("block_size", self.block_size, 1)
        _opt_int("prefix_groups", self.prefix_groups, 0)
        ratio = self.shared_prefix_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio <= 1:
            raise WorkloadConfigError(
                f"shared_prefix_ratio: must be a number in [0, 1], got {ratio!r}"
            )
        if not isinstance(self.turns, (Fixed, Uniform)):
            raise WorkloadConfigError("turns: must be fixed or uniform")
        if isinstance(self.turns, Fixed) and (
            self.turns.value < 1 or not float(self.turns.value).is_integer()
        ):
            raise WorkloadConfigError(f"turns: must be an integer >= 1, got {self.turns.value}")
        if isinstance(self.turns, Uniform) and self.turns.low < 1:
            raise WorkloadConfigError(f"turns: low must be >= 1, got {self.turns.low}")
        for name in ("input", "output"):
            if isinstance(getattr(self, name), Exponential):
                raise WorkloadConfigError(f"{name}: must be fixed, uniform or lognormal")
        if self.count > MAX_COUNT:
            raise WorkloadConfigError(f"count: must be at most {MAX_COUNT}, got {self.count}")
        for name in ("input_max", "output_max"):
            bound = getattr(self, name)
            if bound is not None and bound > MAX_TOKENS:
                raise WorkloadConfigError(f"{name}: {tokens_problem(bound)}")
        for name in ("input", "output", "new_input"):
            dist = getattr(self, name)
            top = dist.value if isinstance(dist, Fixed) else getattr(dist, "high", None)
            if top is not None and top > MAX_TOKENS:
                raise WorkloadConfigError(f"{name}: {tokens_problem(_shown(top))}")
        if isinstance(self.turns, (Fixed, Uniform)):
            most = self.turns.value if isinstance(self.turns, Fixed) else self.turns.high
            if most > MAX_TURNS:
                raise WorkloadConfigError(f"turns: must be at most {MAX_TURNS}, got {_shown(most)}")

    @property
    def sessions(self) -> bool:
        """Whether requests are multi-turn sessions (ids ``syn:s<i>/<k>``)."""
        return not (isinstance(self.turns, Fixed) and self.turns.value == 1)

    @classmethod
    def from_dict(cls, table: Mapping[str, Any], *, base: Path | None = None) -> SyntheticSpec:
        """Build a spec from a ``[workload]`` table or parsed CLI options.

        Distributions are strings like ``"lognormal(12035, 6909)"``, numbers (fixed) or
        tables; ``lengths`` is ``{"trace": <path>, "format": "auto"}`` or a path string.

        Args:
            table: the options.
            base: directory relative trace paths are resolved against.

        Raises:
            WorkloadConfigError: an unknown key or a bad value (``<key>: <problem>``).
        """
        known = {f.name for f in attrs.fields(cls)}
        extra = sorted(set(table) - known)
        if extra:
            raise WorkloadConfigError(f"{extra[0]}: unknown synthetic option")
        if "count" not in table:
            raise WorkloadConfigError("count: required")
        if "arrivals" not in table:
            raise WorkloadConfigError("arrivals: required")
        values: dict[str, Any] = dict(table)
        values["arrivals"] = parse_arrivals(table["arrivals"])
        for name in ("input", "output", "turns", "new_input"):
            if table.get(name) is not None:
                values[name] = parse_distribution(table[name], option=name)
        if table.get("think_ms") is not None:
            values["think_ms"] = parse_distribution(
                table["think_ms"], option="think_ms", allow_exponential=True
            )
        if table.get("lengths") is not None:
            values["lengths"] = _empirical(table["lengths"], base)
        if table.get("slo") is not None:
            values["slo"] = _slo(table["slo"])
        return cls(**values)


def _slo(value: object) -> SLO | None:
    """A synthetic spec's ``slo``: an SLO, its text (``ttft=500,tpot=50``) or a table."""
    try:
        if isinstance(value, SLO):
            slo = value
        elif isinstance(value, str):
            slo = SLO.parse(value)
        elif isinstance(value, Mapping):
            slo = SLO.from_mapping(value)
        else:
            raise WorkloadConfigError(
                f"slo: expected bounds such as 'ttft=500,tpot=50', got {value!r}"
            )
    except SLOError as error:
        raise WorkloadConfigError(str(error)) from None
    return None if slo.is_empty else slo


def _empirical(spec: object, base: Path | None) -> EmpiricalLengths:
    if isinstance(spec, EmpiricalLengths):
        return spec
    options: dict[str, Any]
    if isinstance(spec, str):
        path, options = spec, {}
    elif isinstance(spec, Mapping) and isinstance(spec.get("trace"), str):
        path = spec["trace"]
        options = {k: v for k, v in spec.items() if k != "trace"}
    else:
        raise WorkloadConfigError(
            f"lengths: expected a trace path or {{trace = <path>}}, got {spec!r}"
        )
    where = Path(path) if base is None or Path(path).is_absolute() else base / path
    if not where.exists():
        raise WorkloadConfigError(f"lengths: no such trace {str(where)!r}")
    return EmpiricalLengths.from_workload(read_trace(where, **options))


def parse_synthetic(text: str) -> SyntheticSpec:
    """Parse the CLI form ``key=value`` pairs separated by spaces or semicolons.

    Example: ``"count=1000 arrivals=poisson(5) input=lognormal(12035,6909) output=300"``.

    Raises:
        WorkloadConfigError: a malformed pair or a bad value.
    """
    table: dict[str, Any] = {}
    depth = 0
    current = ""
    parts: list[str] = []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if depth == 0 and char in " ;\t\n":
            if current:
                parts.append(current)
            current = ""
            continue
        current += char
    if current:
        parts.append(current)
    for part in parts:
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise WorkloadConfigError(f"synthetic: expected key=value, got {part!r}")
        table[key.strip()] = _scalar(value.strip())
    return SyntheticSpec.from_dict(table)


def _scalar(text: str) -> Any:
    try:
        number = float(text)
    except ValueError:
        return text
    if math.isfinite(number) and number.is_integer() and "." not in text and "e" not in text:
        return int(number)
    return number


def _shown(value: float) -> int | float:
    return int(value) if math.isfinite(value) and float(value).is_integer() else value


def _check_lengths(
    request_id: str, block: int, prompt: int, output: int, *, merged: bool = False
) -> None:
    """Refuse a drawn (or merged) prompt or output past the limits, before building it."""
    if prompt > MAX_TOKENS:
        if merged:
            has = f"the merged prompt of {request_id} has {prompt} tokens"
            raise WorkloadConfigError(f"input: {has}; at most {MAX_TOKENS}")
        drew = f"{request_id} drew {prompt} tokens"
        raise WorkloadConfigError(f"input: {drew}; at most {MAX_TOKENS} (set input_max)")
    if -(-prompt // block) > MAX_IDS:
        what = "the merged prompt of " if merged else ""
        raise WorkloadConfigError(f"input: {what}{request_id}: {ids_problem(prompt, block)}")
    if output > MAX_TOKENS:
        drew = f"{request_id} drew {output} tokens"
        raise WorkloadConfigError(f"output: {drew}; at most {MAX_TOKENS} (set output_max)")


def _clamp(value: float, low: int, high: int | None) -> int:
    out = max(low, int(value))
    return out if high is None else min(out, high)


def generate_synthetic(
    spec: SyntheticSpec,
    *,
    seed: int | np.random.SeedSequence,
    interner: ContentInterner | None = None,
    lazy: bool = False,
) -> Workload:
    """Generate a synthetic workload (§3).

    Args:
        spec: what to generate.
        seed: an int or a ``SeedSequence`` whose first four children are the streams
            ``arrivals, lengths, prefix, think`` (a replay passes its run seed's
            ``workload`` stream, ``replay.SEED_STREAMS``).
        interner: the run's content interner (default: a fresh one).
        lazy: keep the requests as columns (a :class:`SyntheticRequests`), each built when
            read, instead of a tuple of them: the same sequence, in about a tenth of the
            memory.

    Returns:
        The workload, session by session (``syn:<i>``, or ``syn:s<i>/<k>`` in sessions).

    Raises:
        WorkloadConfigError: a drawn value passes a limit (an arrival past the clock's
            range, for example).
    """
    sequence = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    arrivals_rng, lengths_rng, prefix_rng, think_rng = (
        np.random.default_rng(s) for s in sequence.spawn(len(STREAMS))
    )
    ids = interner if interner is not None else ContentInterner()
    # A fresh block's raw id ("u", request id, j) is interned once and never again (request
    # ids are unique): in an interner of its own, nobody else sees, that is the next int,
    # and remembering the raw id would cost more than the whole request.
    fresh = _private(ids) if interner is None else _interning(ids)
    block = spec.block_size
    # The requests' columns; every request's content ids go into one array, which each
    # request views (no array of its own: a million requests of one id each hold 8 bytes
    # of ids apiece, not a small allocation).
    sessions = array("q")
    turn_column = array("q")
    inputs = array("q")
    outputs = array("q")
    flat = array("q")
    ends = array("q")
    not_before = array("d")
    thinks = array("d")
    at_ms = 0.0
    for i in range(spec.count):
        if i:
            at_ms += float(spec.arrivals.gaps_ms(arrivals_rng, 1)[0])
            if not at_ms <= MAX_INSTANT_MS:
                problem = instant_problem(at_ms, f" (session {i})")
                raise WorkloadConfigError(f"arrivals: {problem}")
        turns = int(spec.turns.draw(lengths_rng))
        prompt, output = _first_lengths(spec, lengths_rng)
        base = f"syn:s{i}" if spec.sessions else f"syn:{i}"
        first_id = f"{base}/0" if spec.sessions else base
        _check_lengths(first_id, block, prompt, output)
        runs, first_content = _first_runs(spec, first_id, prompt, prefix_rng, ids, fresh)
        prev_id = first_id
        for k in range(turns):
            request_id = first_id if k == 0 else f"{base}/{k}"
            if k == 0:
                flat.extend(first_content)
                not_before.append(round(at_ms, 6))
                if spec.sessions:
                    thinks.append(0.0)
            else:
                new, next_output = _later_lengths(spec, lengths_rng)
                think = float(spec.think_ms.draw(think_rng))
                if not think <= MAX_INSTANT_MS:
                    problem = instant_problem(think, f" before {request_id}")
                    raise WorkloadConfigError(f"think_ms: {problem}")
                merged = prompt + output + new
                _check_lengths(request_id, block, merged, next_output, merged=True)
                runs = [
                    *runs,
                    Run(("out", prev_id), output),
                    *_fresh(request_id, new, block, fresh)[0],
                ]
                runs = [r for r in runs if r.tokens > 0]
                prompt, output = merged, next_output
                flat.extend(reblock(runs, block, ids, _SCOPE).tolist())
                not_before.append(math.nan)
                thinks.append(max(0.0, think))
            if spec.sessions:
                sessions.append(i)
                turn_column.append(k)
            inputs.append(prompt)
            outputs.append(output)
            ends.append(len(flat))
            prev_id = request_id
    table = SyntheticRequests(
        input_lengths=np.frombuffer(inputs, dtype=np.int64),
        output_lengths=np.frombuffer(outputs, dtype=np.int64),
        block_size=block,
        content=np.frombuffer(flat, dtype=np.int64),
        ends=np.frombuffer(ends, dtype=np.int64),
        not_before_ms=np.frombuffer(not_before, dtype=np.float64),
        sessions=(
            (
                np.frombuffer(sessions, dtype=np.int64),
                np.frombuffer(turn_column, dtype=np.int64),
                np.frombuffer(thinks, dtype=np.float64),
            )
            if spec.sessions
            else None
        ),
        slo=spec.slo,
    )
    requests = table if lazy else tuple(table)
    return Workload(requests=requests, source="syn", format="synthetic")


def _first_lengths(spec: SyntheticSpec, rng: np.random.Generator) -> tuple[int, int]:
    if spec.lengths is not None:
        prompt, output = spec.lengths.draw(rng)
    else:
        prompt, output = int(spec.input.draw(rng)), int(spec.output.draw(rng))
    return (
        _clamp(prompt, spec.input_min, spec.input_max),
        _clamp(output, spec.output_min, spec.output_max),
    )


def _later_lengths(spec: SyntheticSpec, rng: np.random.Generator) -> tuple[int, int]:
    if spec.new_input is None and spec.lengths is not None:
        new, output = spec.lengths.draw(rng)
    else:
        new = int((spec.new_input or spec.input).draw(rng))
        output = int(spec.output.draw(rng)) if spec.lengths is None else spec.lengths.draw(rng)[1]
    return (
        _clamp(new, spec.input_min, spec.input_max),
        _clamp(output, spec.output_min, spec.output_max),
    )


def _first_runs(
    spec: SyntheticSpec,
    request_id: str,
    prompt: int,
    rng: np.random.Generator,
    ids: ContentInterner,
    fresh: _Namer,
) -> tuple[list[Run], list[int]]:
    """A first turn's prompt as runs (group blocks, then fresh blocks) and their ids."""
    block = spec.block_size
    shared = 0
    group = 0
    if spec.prefix_groups > 0:
        group = int(rng.integers(0, spec.prefix_groups))
        need = -(-prompt // block)
        shared = min(math.floor(spec.shared_prefix_ratio * need + 0.5), prompt // block)
    runs: list[Run] = []
    content: list[int] = []
    for j in range(shared):
        content_id = ids.intern(_SCOPE, ("grp", group, j))
        runs.append(Run(content_id, block, content_id))
        content.append(content_id)
    own, own_ids = _fresh(request_id, prompt - shared * block, block, fresh)
    return [*runs, *own], [*content, *own_ids]


_Namer = Callable[[str, int], int]
"""Names block ``j`` of a request's fresh content: its content id."""


def _interning(ids: ContentInterner) -> _Namer:
    def name(request_id: str, j: int) -> int:
        return ids.intern(_SCOPE, ("u", request_id, j))

    return name


def _private(ids: ContentInterner) -> _Namer:
    def name(request_id: str, j: int) -> int:
        return ids.private()

    return name


def _fresh(request_id: str, tokens: int, block: int, fresh: _Namer) -> tuple[list[Run], list[int]]:
    runs: list[Run] = []
    content: list[int] = []
    j = 0
    while tokens > 0:
        size = min(block, tokens)
        content_id = fresh(request_id, j)
        runs.append(Run(content_id, size, content_id if size == block else None))
        content.append(content_id)
        tokens -= size
        j += 1
    return runs, content

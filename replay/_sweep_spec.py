"""What a sweep runs: a base configuration, a grid of keys to vary, and seeds.

A sweep file (TOML)::

    output_dir = "sweeps/policies"     # optional: --output-dir wins
    seeds = [0, 1, 2]                  # optional: the seed axis, always the last

    [base]                             # a run configuration, as simclock replay --config reads
    workers = 4
    [base.workload]
    synthetic = "count=200 arrivals=poisson(20) input=2000 output=100"

    [grid]                             # each list is an axis, in the order written
    policy = ["round_robin", "kv_aware"]
    workers = [2, 4]
    workload.speedup = [1, 2]          # a key inside a table: a dotted key (or a sub-table)

The runs are the Cartesian product of the axes, in the order of :func:`itertools.product`:
the first axis varies slowest and the seed fastest. Run ``i`` (from 0) has the id
``r<i>-<key>=<value>-...-seed=<seed>`` (:func:`run_id`), and its configuration is the base
with each axis's value set at its key (:func:`run_config`); a grid key names a top-level key
(``workers``), or a key inside a table of the base (``workload.speedup``,
``engine.max_num_seqs``, ``policy.temperature`` when the base's policy is a table), the
table created when the base has none.
"""

from __future__ import annotations

import copy
import itertools
import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from ._config import ConfigError, ReplayConfig, resolve_config

__all__ = (
    "SweepRun",
    "SweepSpec",
    "load_sweep",
    "locate_error",
    "run_config",
    "run_id",
)

_TOP_KEYS = ("output_dir", "seeds", "base", "grid")
_ID_VALUE_CHARS = 32  # a value's text in a run id is cut to this length
_UNSAFE = re.compile(r"[^A-Za-z0-9_.=-]")


@attrs.frozen(kw_only=True)
class SweepRun:
    """One run of a sweep.

    Attributes:
        index: its position in the sweep (from 0).
        run_id: its id, also the name of its directory under ``runs/``.
        params: the swept keys' values (``seed`` not included), in grid order.
        seed: the run seed.
        config: the run's configuration table (the base with ``params`` and ``seed`` set),
            as a ``simclock replay --config`` file holds it.
    """

    index: int
    run_id: str
    params: Mapping[str, Any]
    seed: int
    config: Mapping[str, Any]


@attrs.frozen(kw_only=True)
class SweepSpec:
    """A sweep: a base configuration, the axes to vary, and the seeds.

    Attributes:
        base: a run configuration table (the keys of a ``simclock replay --config`` file).
        grid: axis key -> its values, in axis order; a key is a top-level configuration
            key or a dotted key inside one of the base's tables (``workload.speedup``).
        seeds: the seed axis (the last); None for one run per grid point with the base's
            seed.
        source: the sweep file's name, used in error messages.
    """

    base: Mapping[str, Any] = attrs.field(factory=dict)
    grid: Mapping[str, Sequence[Any]] = attrs.field(factory=dict)
    seeds: Sequence[int] | None = None
    source: str = "sweep"

    def __attrs_post_init__(self) -> None:
        """Check the shape of the sweep (the runs' values are checked by :meth:`resolve`).

        Raises:
            ConfigError: ``<source>: <key>: <problem>``.
        """
        where = self.source
        if "output_dir" in self.base:
            raise ConfigError(
                f"{where}: base.output_dir: not used in a sweep: set the top-level output_dir"
            )
        if self.seeds is not None:
            seeds = self.seeds
            if not isinstance(seeds, list | tuple) or not seeds:
                raise ConfigError(
                    f"{where}: seeds: must be a non-empty list of integers >= 0, got {seeds!r}"
                )
            for seed in seeds:
                if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
                    raise ConfigError(f"{where}: seeds: must hold integers >= 0, got {seed!r}")
            if "seed" in self.base:
                raise ConfigError(
                    f"{where}: base.seed: the seeds are swept (seeds): leave the base's seed out"
                )
        for key, values in self.grid.items():
            if key == "seed":
                raise ConfigError(
                    f"{where}: grid.seed: set the seeds with the top-level seeds list"
                )
            if key == "output_dir":
                raise ConfigError(
                    f"{where}: grid.output_dir: not used in a sweep: runs go under output_dir/runs"
                )
            if not isinstance(values, list | tuple) or not values:
                raise ConfigError(
                    f"{where}: grid.{key}: must be a non-empty list of values, got {values!r}"
                )

    @property
    def swept(self) -> tuple[str, ...]:
        """The swept keys in grid order, ``seed`` last when the seeds are swept."""
        return (*self.grid, *(("seed",) if self.seeds is not None else ()))

    def runs(self) -> tuple[SweepRun, ...]:
        """Every run, in sweep order (see the module docstring); not validated."""
        seeds: Sequence[int | None] = [None] if self.seeds is None else self.seeds
        keys = tuple(self.grid)
        points = list(itertools.product(*(self.grid[k] for k in keys), seeds))
        width = max(3, len(str(len(points) - 1)))
        out = []
        for index, point in enumerate(points):
            params = dict(zip(keys, point[:-1], strict=True))
            seed = point[-1]
            config = run_config(self.base, params, seed=seed, source=self.source)
            resolved_seed = config.get("seed", 0)
            out.append(
                SweepRun(
                    index=index,
                    run_id=run_id(index, params, seed, width=width),
                    params=params,
                    seed=resolved_seed if isinstance(resolved_seed, int) else 0,
                    config=config,
                )
            )
        return tuple(out)

    def resolve(self) -> tuple[tuple[SweepRun, ReplayConfig], ...]:
        """Every run with its validated configuration, before anything is run.

        Raises:
            ConfigError: a bad key or value in the base or the grid; the message names the
                source, the axis (``grid.workers``) or the base key (``base.policy``).
        """
        resolved = []
        for run in self.runs():
            try:
                config = resolve_config(run.config, None, source=_MARK)
            except ConfigError as exc:
                raise ConfigError(self._rename(str(exc))) from None
            resolved.append((run, config))
        return tuple(resolved)

    def _rename(self, text: str) -> str:
        """A run's configuration error said of the sweep's axis or base key."""
        key, problem = _split_error(text)
        if key is None:
            return f"{self.source}: {text.replace(_MARK + ': ', '')}"
        axis = next(
            (
                a
                for a in self.grid
                if a == key or a.startswith(key + ".") or key.startswith(a + ".")
            ),
            None,
        )
        if axis is not None:
            # "engine: max_num_seqs: problem" said of the axis engine.max_num_seqs
            problem = problem.removeprefix(axis[len(key) + 1 :] + ": ") if axis != key else problem
            return f"{self.source}: grid.{axis}: {problem}"
        return f"{self.source}: base.{key}: {problem}"


_MARK = "\x00sweep"
"""The source name runs are resolved with, so their errors can be said of the sweep file."""


def _split_error(text: str) -> tuple[str | None, str]:
    """``(key, problem)`` of ``<mark>: key: problem`` (or ``key: problem``)."""
    rest = text.removeprefix(_MARK + ": ")
    key, sep, problem = rest.partition(": ")
    if not sep or " " in key or not key:
        return None, rest
    return key, problem


def run_config(
    base: Mapping[str, Any],
    params: Mapping[str, Any],
    *,
    seed: int | None = None,
    source: str = "sweep",
) -> dict[str, Any]:
    """The configuration of one run: ``base`` with each ``params`` value set at its key.

    Args:
        base: the base configuration table (not changed).
        params: dotted key -> value.
        seed: the run seed; None keeps the base's.
        source: named in error messages.

    Raises:
        ConfigError: a dotted key goes through a value of the base that is not a table.
    """
    config = copy.deepcopy(dict(base))
    for key, value in params.items():
        *path, last = key.split(".")
        table = config
        for depth, part in enumerate(path):
            inner = table.setdefault(part, {})
            if not isinstance(inner, dict):
                above = ".".join(path[: depth + 1])
                raise ConfigError(f"{source}: grid.{key}: base.{above} is {inner!r}, not a table")
            table = inner
        table[last] = copy.deepcopy(value)
    if seed is not None:
        config["seed"] = seed
    return config


def _value_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return ",".join(f"{k}={_value_text(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ",".join(_value_text(v) for v in value)
    return str(value)


def _shorten(text: str) -> str:
    """``text`` cut to 32 characters: its first 14 and last 16, joined by ``..``."""
    if len(text) <= _ID_VALUE_CHARS:
        return text
    return f"{text[:14]}..{text[-16:]}"


def run_id(index: int, params: Mapping[str, Any], seed: int | None, *, width: int = 3) -> str:
    """The id of run ``index``: ``r003-policy=kv_aware-workers=4-seed=1``.

    Each value is written as text (a table as ``k=v,...``), a longer one than 32 characters
    cut to its first 14 and last 16 joined by ``..``; every
    character outside ``[A-Za-z0-9_.=-]`` becomes ``_``. The position makes it unique.
    """
    parts = [f"r{index:0{width}d}"]
    parts += [f"{key}={_shorten(_value_text(value))}" for key, value in params.items()]
    if seed is not None:
        parts.append(f"seed={seed}")
    return _UNSAFE.sub("_", "-".join(parts))


# --------------------------------------------------------------------------------------------
# The sweep file.


def load_sweep(path: str | Path) -> tuple[SweepSpec, str | None]:
    """Read and check a sweep file (TOML).

    Args:
        path: the file.

    Returns:
        The sweep, and the file's ``output_dir`` (None when it sets none).

    Raises:
        ConfigError: the file cannot be read, is not TOML, or has a bad key or value; the
            message names the file, the line where it can be found, and the key.
    """
    where = str(path)
    if Path(path).suffix.lower() != ".toml":
        raise ConfigError(f"{where}: a sweep file must end in .toml")
    try:
        text = Path(path).read_bytes().decode("utf-8-sig")
    except OSError as exc:
        raise ConfigError(f"{where}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: not UTF-8 text") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: invalid TOML: {exc}") from None
    lines = _KeyLines(text)

    def error(key: str, problem: str) -> ConfigError:
        line = lines.find(key)
        at = f"{where}:{line}" if line is not None else where
        return ConfigError(f"{at}: {key}: {problem}")

    for key in data:
        if key not in _TOP_KEYS:
            raise error(key, f"unknown key; known: {', '.join(_TOP_KEYS)}")
    output_dir = data.get("output_dir")
    if output_dir is not None and (not isinstance(output_dir, str) or not output_dir):
        raise error("output_dir", f"must be a non-empty string, got {output_dir!r}")
    base = data.get("base", {})
    if not isinstance(base, dict):
        raise error("base", "must be a table (a run configuration)")
    grid_table = data.get("grid", {})
    if not isinstance(grid_table, dict):
        raise error("grid", "must be a table of lists")
    try:
        spec = SweepSpec(
            base=base, grid=dict(_axes(grid_table)), seeds=data.get("seeds"), source=where
        )
        runs = spec.runs()
    except ConfigError as exc:
        raise _with_line(exc, where, lines) from None
    if runs:
        try:
            spec.resolve()
        except ConfigError as exc:
            raise _with_line(exc, where, lines) from None
    return spec, output_dir


def _axes(table: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """The grid's axes: each list is one (its dotted key); a table holds more."""
    out: list[tuple[str, Any]] = []
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out += _axes(value, prefix=name + ".")
        else:
            out.append((name, value))
    return out


def locate_error(exc: ConfigError, path: str | Path) -> ConfigError:
    """``file: key: problem`` about the sweep file ``path`` as ``file:LINE: key: problem``
    (the line where ``key`` is written, when it can be found).

    Args:
        exc: the error.
        path: the sweep file.
    """
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError):
        return exc
    return _with_line(exc, str(path), _KeyLines(text))


def _with_line(exc: ConfigError, where: str, lines: _KeyLines) -> ConfigError:
    """``file: grid.workers: problem`` as ``file:LINE: grid.workers: problem``."""
    text = str(exc)
    rest = text.removeprefix(f"{where}: ")
    key = rest.partition(": ")[0]
    line = lines.find(key) if rest != text else None
    if line is None:
        return ConfigError(text)
    return ConfigError(f"{where}:{line}: {rest}")


class _KeyLines:
    """Where a dotted key is set in a TOML text (a line number), found by reading the table
    headers and ``key =`` lines; good enough for messages, not a TOML parser."""

    _HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
    _ASSIGN = re.compile(r"^\s*([A-Za-z0-9_\"'][^=]*?)\s*=")

    def __init__(self, text: str) -> None:
        self._keys: list[tuple[tuple[str, ...], int]] = []
        table: tuple[str, ...] = ()
        for number, line in enumerate(text.splitlines(), start=1):
            header = self._HEADER.match(line)
            if header is not None:
                table = _parts(header.group(1))
                self._keys.append((table, number))
                continue
            assign = self._ASSIGN.match(line)
            if assign is not None:
                self._keys.append(((*table, *_parts(assign.group(1))), number))

    def find(self, key: str) -> int | None:
        """The line of ``key`` (dotted), or of the nearest enclosing key written; None if
        none is written."""
        parts = tuple(key.split("."))
        while parts:
            for written, number in self._keys:
                if written == parts:
                    return number
            parts = parts[:-1]
        return None


def _parts(dotted: str) -> tuple[str, ...]:
    """The parts of a TOML dotted key (bare or quoted)."""
    return tuple(p.strip("\"'") for p in _KEY_PART.findall(dotted))


_KEY_PART = re.compile(r"\"[^\"]*\"|'[^']*'|[A-Za-z0-9_-]+")

"""Configuration of ``simclock replay`` runs: config files and flags, the name registries and
the defaults.

A configuration is resolved from a TOML or JSON file and command-line overrides
(:func:`resolve_config`) into a :class:`ReplayConfig`, which builds the run's components. The
command line maps names to code in these tables only: :data:`POLICIES`, :data:`TIMINGS`,
:data:`TOPOLOGIES` and :data:`SCHEDULERS`.
"""

from __future__ import annotations

from ._config import DEFAULT_GPU as DEFAULT_GPU
from ._config import DEFAULT_MODEL as DEFAULT_MODEL
from ._config import DEFAULT_POLICY as DEFAULT_POLICY
from ._config import DEFAULT_TIMING as DEFAULT_TIMING
from ._config import DEFAULT_WORKERS as DEFAULT_WORKERS
from ._config import POLICIES as POLICIES
from ._config import SCHEDULERS as SCHEDULERS
from ._config import TIMINGS as TIMINGS
from ._config import TOPOLOGIES as TOPOLOGIES
from ._config import ComponentSpec as ComponentSpec
from ._config import ConfigError as ConfigError
from ._config import ReplayConfig as ReplayConfig
from ._config import kv_blocks_for as kv_blocks_for
from ._config import load_config_file as load_config_file
from ._config import parse_spec as parse_spec
from ._config import resolve_config as resolve_config
from ._pd_options import pd_from_config as pd_from_config

__all__ = (
    "DEFAULT_GPU",
    "DEFAULT_MODEL",
    "DEFAULT_POLICY",
    "DEFAULT_TIMING",
    "DEFAULT_WORKERS",
    "POLICIES",
    "SCHEDULERS",
    "TIMINGS",
    "TOPOLOGIES",
    "ComponentSpec",
    "ConfigError",
    "ReplayConfig",
    "kv_blocks_for",
    "load_config_file",
    "parse_spec",
    "pd_from_config",
    "resolve_config",
)

"""engines: simulated inference engines — scheduler, KV cache with prefix caching, timing."""

from __future__ import annotations

from ._catalog import GPUS as GPUS
from ._catalog import MODELS as MODELS
from ._catalog import GPUSpec as GPUSpec
from ._catalog import ModelArch as ModelArch
from ._catalog import gpu_spec as gpu_spec
from ._catalog import kv_bytes_per_token as kv_bytes_per_token
from ._catalog import model_arch as model_arch
from ._config import DEFAULT_CONTEXT_LENGTH as DEFAULT_CONTEXT_LENGTH
from ._config import EngineConfig as EngineConfig
from ._core import EngineCore as EngineCore
from ._core import Pass as Pass
from ._core import Seq as Seq
from ._engine import Engine as Engine
from ._engine import EngineSnapshot as EngineSnapshot
from ._engine import EngineView as EngineView
from ._engine import KVEvent as KVEvent
from ._engine import Rejection as Rejection
from ._engine import Reservation as Reservation
from ._engine import Tentative as Tentative
from ._estimates import MAX_ESTIMATE_PASSES as MAX_ESTIMATE_PASSES
from ._estimates import PassInFlight as PassInFlight
from ._estimates import PlacementEstimate as PlacementEstimate
from ._exceptions import EngineClosedError as EngineClosedError
from ._exceptions import EngineConfigError as EngineConfigError
from ._exceptions import EngineError as EngineError
from ._exceptions import HandshakeError as HandshakeError
from ._exceptions import InvalidRequestError as InvalidRequestError
from ._exceptions import PassTimingError as PassTimingError
from ._journal import NEVER_NS as NEVER_NS
from ._journal import PASS_KINDS as PASS_KINDS
from ._journal import Admission as Admission
from ._journal import EventKind as EventKind
from ._journal import Journal as Journal
from ._journal import LifecycleEvent as LifecycleEvent
from ._journal import RequestTrace as RequestTrace
from ._keys import BlockKeyer as BlockKeyer
from ._keys import KeyHolder as KeyHolder
from ._kv import KVCache as KVCache
from ._pass import PassShape as PassShape
from ._pass import Role as Role
from ._pass import TimingModel as TimingModel
from ._scheduler import SCHEDULERS as SCHEDULERS
from ._scheduler import EngineScheduler as EngineScheduler
from ._scheduler import Scheduler as Scheduler
from ._sglang import SGLangRules as SGLangRules
from ._sglang import SGLangScheduler as SGLangScheduler
from ._timing import FixedTiming as FixedTiming
from ._timing import LinearSample as LinearSample
from ._timing import LinearTiming as LinearTiming
from ._timing import PolynomialTiming as PolynomialTiming
from ._timing import TimingConfigError as TimingConfigError
from ._timing import fit_linear as fit_linear
from ._timing_roofline import RooflineTiming as RooflineTiming
from ._timing_table import TableTiming as TableTiming
from ._tokenizer import Tokenization as Tokenization
from ._tokenizer import TokenizerPool as TokenizerPool
from ._tokenizer import TokenizerStage as TokenizerStage
from ._tokentimes import TokenTimes as TokenTimes
from ._vllm import VLLMRules as VLLMRules
from ._vllm import VLLMScheduler as VLLMScheduler

__all__ = (
    "DEFAULT_CONTEXT_LENGTH",
    "GPUS",
    "MAX_ESTIMATE_PASSES",
    "MODELS",
    "NEVER_NS",
    "PASS_KINDS",
    "SCHEDULERS",
    "Admission",
    "BlockKeyer",
    "Engine",
    "EngineClosedError",
    "EngineConfig",
    "EngineConfigError",
    "EngineCore",
    "EngineError",
    "EngineScheduler",
    "EngineSnapshot",
    "EngineView",
    "EventKind",
    "FixedTiming",
    "GPUSpec",
    "HandshakeError",
    "InvalidRequestError",
    "Journal",
    "KVCache",
    "KVEvent",
    "KeyHolder",
    "LifecycleEvent",
    "LinearSample",
    "LinearTiming",
    "ModelArch",
    "Pass",
    "PassInFlight",
    "PassShape",
    "PassTimingError",
    "PlacementEstimate",
    "PolynomialTiming",
    "Rejection",
    "RequestTrace",
    "Reservation",
    "Role",
    "RooflineTiming",
    "SGLangRules",
    "SGLangScheduler",
    "Scheduler",
    "Seq",
    "TableTiming",
    "Tentative",
    "TimingConfigError",
    "TimingModel",
    "TokenTimes",
    "Tokenization",
    "TokenizerPool",
    "TokenizerStage",
    "VLLMRules",
    "VLLMScheduler",
    "fit_linear",
    "gpu_spec",
    "kv_bytes_per_token",
    "model_arch",
)

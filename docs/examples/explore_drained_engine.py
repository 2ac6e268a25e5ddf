"""A policy that keeps routing to an engine after it was drained: a plain replay shows nothing
wrong, ``explore`` catches it (docs/how-to/test-a-policy-against-failures.md)."""

from __future__ import annotations

import contextlib
import io
import tempfile
from pathlib import Path

from engines import EngineConfig, FixedTiming
from loadgen import generate_synthetic, parse_synthetic
from policies import BasePolicy, PolicyContext, RequestStream, RoundRobin
from replay import Aggregated, EngineDrain, Faults, Run, explore
from replay._cli import main


class RememberedRoundRobin(BasePolicy):
    """Round robin over the engines it saw at its first request. The bug: it never looks at
    ``ctx.engines`` again, so after a drain it keeps offering to the drained engine (refused,
    it then tries the next one, so every request still completes)."""

    name = "remembered_round_robin"

    def __init__(self) -> None:
        self.ids: list[int] | None = None
        self.turn = 0

    async def run(self, requests: RequestStream, ctx: PolicyContext) -> None:
        async for request in requests:
            if self.ids is None:
                self.ids = [view.id for view in ctx.engines]
            for _ in self.ids:
                engine = self.ids[self.turn % len(self.ids)]
                self.turn += 1
                placement = await ctx.dispatch(request, engine)
                if placement.committed:
                    break
            else:
                ctx.reject(request, reason="no engine took it")


CONFIG = """\
workers = 3
policy = "{path}:RememberedRoundRobin"
timing = {{type = "fixed", prefill_ms = 20, decode_ms = 5}}
slo = "ttft=200"
[workload]
synthetic = "count=80 arrivals=poisson(20) input=300 output=40"
[faults]
drains = [{{at_s = 1.5, engine = 1}}]
"""

if __name__ == "__main__":
    workload = generate_synthetic(
        parse_synthetic("count=80 arrivals=poisson(20) input=300 output=40"), seed=0
    )
    topology = Aggregated(
        workers=3,
        engine=EngineConfig(num_blocks=4000),
        timing=FixedTiming(prefill_ms=20, decode_ms=5),
    )
    faults = Faults(drains=(EngineDrain(at_s=1.5, engine=1),))

    # 1. A plain replay: every request completes; nothing says anything went wrong.
    plain = Run.build(workload, topology=topology, policy=RememberedRoundRobin(), faults=faults)
    result = plain.finish()
    counts = {k: v for k, v in result.summary.status_counts.items() if v}
    print("plain replay:", counts, "failure:", plain.failure)

    # 2. explore: five seeded runs, the drain's instant jittered by up to 0.5 s.
    for policy in (RememberedRoundRobin, RoundRobin):
        found = explore(
            workload,
            runs=5,
            policy_factory=policy,
            topology=topology,
            faults=faults,
            jitter_s=0.5,
        )
        print(f"{policy.__name__}: {len(found.failures)} of {len(found.runs)} runs failed")
        for run in found.failures[:1]:
            print(f"  seed {run.seed}: {run.violations[0]}")

    # 3. The command line, on a config file with the same drain.
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "run.toml"
        config.write_text(CONFIG.format(path=Path(__file__).resolve()))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = main(
                ["explore", str(config), "--runs", "3", "--assert", "slo_attainment>=0.9"]
            )
        print("exit status", status)
        print(out.getvalue().replace(str(config), "run.toml"), end="")

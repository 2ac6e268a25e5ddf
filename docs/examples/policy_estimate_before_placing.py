"""Estimate before you place: read the engines' timing-aware views, offer the engine with the
earliest estimated first token, and act on what its tentative placement says."""

from __future__ import annotations

from engines import EngineConfig, FixedTiming
from loadgen import ArrivalRule, Request, Workload
from policies import BasePolicy
from replay import Aggregated, run


def request(rid: str, prompt: int, output: int, at_ms: float, ids: list[int]) -> Request:
    return Request(
        id=rid,
        input_length=prompt,
        output_length=output,
        block_size=512,
        hash_ids=ids,
        arrival=ArrivalRule(not_before_ms=at_ms),
    )


class EarliestFirstToken(BasePolicy):
    name = "earliest_first_token"
    offer_timeout_ms = 20.0  # an offer still open 20 ms after the engine made it expires

    async def run(self, requests, ctx):
        async for request in requests:
            guesses = []
            for i, view in enumerate(ctx.engines):
                cached = ctx.expected_prefix_overlap_tokens(request, i)
                guess = view.estimate(
                    request.input_length,
                    output_length=request.output_length,
                    cached_tokens=cached,
                )
                guesses.append((guess.first_token_ns, i))
                flight = view.pass_in_flight
                busy = "idle" if flight is None else f"busy until {flight.end_ns / 1e6:g} ms"
                print(
                    f"{ctx.now_ms():5.0f} ms {request.id}: engine {i} {busy}, cached {cached:4d},"
                    f" first token ~{guess.first_token_ns / 1e6:g} ms"
                )
            _, best = min(guesses)
            async with ctx.offer(request, best) as offer:
                t = offer.tentative
                admit, first = t.admission_ns / 1e6, t.first_token_ns / 1e6
                print(
                    f"      -> engine {best}: hit {t.hit_tokens} (pinned),"
                    f" queue {t.queue_position}, admit ~{admit:g} ms, first token ~{first:g} ms"
                )
                await offer.commit()


workload = Workload(
    requests=(
        request("a", 1000, 10, 0.0, [1, 2]),
        request("b", 1000, 10, 1.0, [1, 2]),
        request("c", 3000, 10, 2.0, [7, 8, 9, 10, 11, 12]),
        request("d", 1000, 10, 3.0, [1, 2]),
    ),
    source="example",
    format="example",
)
topology = Aggregated(
    workers=2,
    engine=EngineConfig(num_blocks=400),
    timing=FixedTiming(prefill_ms=50.0, decode_ms=10.0),
)
result = run(workload, topology=topology, policy=EarliestFirstToken())
for record in result.requests:
    print(f"{record.request_id}: engine {record.engine}, first token {record.first_token_ms:g} ms")

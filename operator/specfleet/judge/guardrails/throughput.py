"""`maxThroughputDrop`: the share of offered requests the canary completes (finished + growth of the waiting
queue) against stable's at comparable per-pod load: a binomial bound on each share (offered requests are the
trials), the two combined on the log of their ratio as for latency."""

import math

from specfleet.api.status import Verdict
from specfleet.judge import wording
from specfleet.judge.guardrail import Guardrail, Look, Reads
from specfleet.judge.verdicts import Check, at_load, bounded
from specfleet.metrics import names
from specfleet.stats import rate_ratio_bounds, wilson_bounds


class ThroughputDrop(Guardrail):
    name = "maxThroughputDrop"
    field = "max_throughput_drop"
    metrics = (names.REQUEST_SUCCESS, names.REQUESTS_WAITING, names.GENERATION_TOKENS)
    label = "completed share drop"
    reads = Reads.CHANGE
    judged_on = "1 - canary's completed share of offered requests / stable's"
    tune_when = (
        "the canary must keep up with stable's load: 0.1 fails a canary that completes 10% less of what it is "
        "offered (queue building)"
    )

    def check(self, look: Look, limit: float) -> Check:
        g, c, s, name = look.guardrails, look.canary, look.stable, self.name
        if s.requests < g.requests_needed:
            text = f"{s.requests:.0f} stable requests (need {g.requests_needed}) for throughput"
            return Check(Verdict.INCONCLUSIVE, text, name)
        c_offered, s_offered = c.offered, s.offered
        if c_offered is None or s_offered is None:
            which = "canary" if c_offered is None else "stable"
            text = f"no waiting-queue gauge for the {which} track: throughput not judged"
            return Check(Verdict.INCONCLUSIVE, text, name)
        if c.requests <= 0 or s.requests <= 0:
            return Check(Verdict.INCONCLUSIVE, "no finished requests to judge throughput on", name)
        c_share, s_share = c.requests / c_offered, s.requests / s_offered

        def bounds(factor: float) -> tuple[float, float]:
            """Bounds on the drop, 1 - canary share / stable share."""
            z = look.z(min(c_offered, s_offered) * factor)
            c_low, c_up = wilson_bounds(c.requests * factor, c_offered * factor, z)
            s_low, s_up = wilson_bounds(s.requests * factor, s_offered * factor, z)
            log_ratio = math.log(c_share / s_share)
            worse = math.hypot(math.log(c_share / c_low) if c_low > 0 else math.inf, math.log(s_up / s_share))
            better = math.hypot(math.log(c_up / c_share), math.log(s_share / s_low) if s_low > 0 else math.inf)
            return -math.expm1(log_ratio + better), -math.expm1(log_ratio - worse)

        drop = 1 - c_share / s_share
        lowest, highest = bounds(1.0)
        text = f"completed {c_share:.1%} of offered requests vs stable {s_share:.1%}"
        c_rate, s_rate = c.per_pod_second(c_offered), s.per_pod_second(s_offered)
        load = c_rate / s_rate if c_rate is not None and s_rate else None
        if c_rate is not None and s_rate is not None:
            text += f" at {c_rate:.2f} vs {s_rate:.2f} offered requests/s per pod"
        c_tokens, s_tokens = c.per_pod_second(c.generation_tokens), s.per_pod_second(s.generation_tokens)
        if c_tokens is not None and s_tokens is not None:
            text += f" ({c_tokens:.0f} vs {s_tokens:.0f} output tokens/s per pod)"
        text += f": drop {drop:.1%}, {look.confidence} bounds {lowest:.1%} to {highest:.1%}"
        check = bounded(
            name, text, estimate=drop, bounds=bounds, limit=limit, growth=look.growth(), show=wording.whole_pct
        )
        least = None if load is None else rate_ratio_bounds(load, c_offered, s_offered, look.z(c_offered))[0]
        return at_load(check, load=load, lowest=least, verb="were offered", noun="load")


GUARDRAIL = ThroughputDrop()

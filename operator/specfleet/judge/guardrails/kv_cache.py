"""`maxKvCacheUsage`: a ceiling on the canary's KV-cache usage averaged over the range and its pods. A level
read from a gauge, not a sample of requests: no confidence bound, so it takes no share of the budget."""

from specfleet.api.status import Verdict
from specfleet.judge.guardrail import Guardrail, Look, Reads
from specfleet.judge.verdicts import Check
from specfleet.metrics import names


class KvCacheUsage(Guardrail):
    name = "maxKvCacheUsage"
    field = "max_kv_cache_usage"
    metrics = (names.KV_CACHE_USAGE,)
    label = "KV cache used (mean)"
    reads = Reads.SHARE
    judged_on = "canary KV-cache usage (`vllm:kv_cache_usage_perc`), averaged over the range and its pods"
    fails_when = "the average is above the ceiling"
    passes_when = "the average is within (a level, not a sample: no bound)"
    tune_when = "a drafter must leave KV-cache headroom: a ceiling on the canary's average usage (0-1)"
    bounded = False
    needs_requests = False

    def check(self, look: Look, limit: float) -> Check:
        mean, peak = look.canary.kv_cache_usage_mean, look.canary.kv_cache_usage_max
        if mean is None or not 0 <= mean <= 1:
            return Check(Verdict.INCONCLUSIVE, "no KV-cache usage gauge for the canary", self.name)
        text = f"KV-cache usage {mean:.0%} on average" + (f" (max {peak:.0%})" if peak is not None else "")
        if mean > limit:
            return Check(Verdict.FAIL, f"{text} > ceiling {limit:.0%}", self.name, mean, limit=limit)
        return Check(Verdict.PASS, f"{text}, ceiling {limit:.0%}", self.name, mean, limit=limit)


GUARDRAIL = KvCacheUsage()

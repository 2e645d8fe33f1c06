"""`maxQueueTimeP95Seconds`: an absolute ceiling on the canary's p95 time waiting before scheduling."""

from specfleet.judge import wording
from specfleet.judge.comparisons import p95_ceiling
from specfleet.judge.guardrail import Guardrail, Look, Reads
from specfleet.judge.verdicts import Check
from specfleet.metrics import names


class QueueTimeP95(Guardrail):
    name = "maxQueueTimeP95Seconds"
    field = "max_queue_time_p95_seconds"
    metrics = (names.QUEUE_TIME,)
    label = "p95 queue time"
    reads = Reads.SECONDS
    judged_on = "canary p95 queue time (`vllm:request_queue_time_seconds`)"
    fails_when = "lower bound > ceiling"
    passes_when = "upper bound <= ceiling"
    tune_when = "an absolute budget for time waiting before scheduling (vLLM's buckets start at 0.3 s)"

    def check(self, look: Look, limit: float) -> Check:
        return p95_ceiling(
            look,
            self.name,
            label="queue time p95",
            data=look.canary.queue_time,
            ceiling=limit,
            show=wording.duration,
        )


GUARDRAIL = QueueTimeP95()

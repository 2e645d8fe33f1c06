"""What notifications cost a rollback: the time of the operator's passes, and of the pass that rolls a canary back,
with no notifications, with a receiver that is down, and with one that holds every request 30 s.

Drives the real `Reconciler` (benchmarks/pass_cost.py's in-memory API server, whose Deployments are Ready as soon as
they are written) through `--rollbacks` canaries, each failing its first analysis and rolled back, with the real
notifier and webhook sink sending to a loopback receiver, on one event loop as the operator runs them. A notifier on
the reconcile path would add its receiver's time to the rolling-back pass; off it, the passes take what they took.

    .venv/bin/python benchmarks/notify_cost.py [--rollbacks 20]
"""

import argparse
import asyncio
import copy
import json
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))  # the loopback receiver the notification tests use

from prometheus_client import REGISTRY

from specfleet.api.resource import SpeculativeDeployment
from specfleet.api.status import Verdict
from specfleet.controller.notifier import DeliveryPolicy, Notifier
from specfleet.controller.queue import WorkQueue
from specfleet.controller.sinks import SINKS
from specfleet.controller.store import Store
from specfleet.notify.targets import parse_targets
from specfleet.rollout import Decision, Observation

from benchkit import percentile
from pass_cost import NAME, NAMESPACE, START, TICK, CountingReconciler, InMemoryKube, fleet
from receiverkit import dead_port, receiving

POLICY = DeliveryPolicy(attempts=3, timeout=5.0, backoff=1.0)
"""Fewer attempts than the default (5), the default timeout: each receiver's notifications end within a minute or
two of the last pass (the run waits for them, to count them)."""


class FailingReconciler(CountingReconciler):
    """Every analysis a Fail: the canary is rolled back at its first look."""

    async def _analyses(
        self, sdep: SpeculativeDeployment, url: str | None, decision: Decision, observation: Observation
    ) -> Observation:
        passed = await super()._analyses(sdep, url, decision, observation)
        assert passed.analysis is not None
        failed = passed.analysis.model_copy(update={"verdict": Verdict.FAIL, "reasons": ["acceptance 0.31 < 0.6"]})
        return replace(passed, analysis=failed)


async def rollbacks(count: int, notifier: Notifier | None) -> dict[str, Any]:
    """`count` canaries rolled back, one after the other: every pass's time, and the rolling-back passes'."""
    store, now = Store(), [START]
    reconciler = FailingReconciler(
        InMemoryKube(store),  # type: ignore[arg-type]  # the methods the reconciler calls, in memory
        store,
        WorkQueue(),
        clock=lambda: now[0],
        default_prometheus_url="http://prometheus.bench:9090",
        notifier=notifier,
    )
    body = fleet(k=4)
    body["metadata"]["resourceVersion"] = "1"
    store.put_sdep(body, deleted=False)
    key = (NAMESPACE, NAME)
    passes: list[float] = []
    rolling_back: list[float] = []
    if notifier is not None:
        notifier.start()
    for k in [3, 5] * (count // 2) + [3] * (count % 2):
        for _ in range(4):  # Healthy (or rolled back) for a minute
            now[0] += TICK
            passes.append(await timed(reconciler.reconcile(key)))
        changed = copy.deepcopy(store.sdeps[key])
        changed["spec"]["speculative"]["numSpeculativeTokens"] = k
        changed["metadata"]["generation"] += 1
        store.put_sdep(changed, deleted=False)
        for _ in range(40):
            now[0] += TICK
            seconds = await timed(reconciler.reconcile(key))
            passes.append(seconds)
            if store.sdeps[key]["status"]["phase"] == "RolledBack":
                rolling_back.append(seconds)
                break
        else:
            raise AssertionError(f"not rolled back: {store.sdeps[key]['status'].get('phase')}")
    in_flight, drained = (notifier.queue.qsize(), await drain(notifier)) if notifier is not None else (0, 0.0)
    return {
        "passes": len(passes),
        "pass_ms_median": round(1000 * statistics.median(passes), 2),
        "pass_ms_p95": round(1000 * percentile(passes, 0.95), 2),
        "pass_ms_max": round(1000 * max(passes), 2),
        "rollback_pass_ms_median": round(1000 * statistics.median(rolling_back), 2),
        "rollback_pass_ms_max": round(1000 * max(rolling_back), 2),
        "notifications_queued_after_the_last_pass": in_flight,
        "seconds_until_each_was_sent_or_given_up": round(drained, 1),
    }


async def drain(notifier: Notifier) -> float:
    """How long after the last pass every notification was sent or given up; the workers are stopped then."""
    started = time.monotonic()
    await asyncio.wait_for(notifier.queue.join(), timeout=600)
    await notifier.stop()
    return time.monotonic() - started


async def timed(pass_: Any) -> float:
    started = time.perf_counter()
    await pass_
    return time.perf_counter() - started


def counted() -> dict[str, float]:
    return {
        name: sum(
            s.value
            for metric in REGISTRY.collect()
            for s in metric.samples
            if s.name == f"specfleet_notifications_{name}_total"
        )
        for name in ("sent", "failed", "dropped")
    }


@contextmanager
def webhook(url: str) -> Iterator[Notifier]:
    own = parse_targets(f"targets: [{{sink: webhook, url: '{url}'}}]", "operator", SINKS.keys())
    yield Notifier(own, policy=POLICY)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollbacks", type=int, default=20)
    args = parser.parse_args()
    results: dict[str, Any] = {"rollbacks": args.rollbacks, "policy": POLICY.__dict__}
    started: datetime = datetime.now()
    results["no notifications"] = asyncio.run(rollbacks(args.rollbacks, None))
    with webhook(f"http://127.0.0.1:{dead_port()}/hook") as notifier:
        before = counted()
        results["receiver down"] = asyncio.run(rollbacks(args.rollbacks, notifier))
        results["receiver down"]["notifications"] = {k: v - before[k] for k, v in counted().items()}
    with receiving(delay=30.0) as slow, webhook(f"http://127.0.0.1:{slow.port}/hook") as notifier:
        before = counted()
        results["receiver holding each request 30 s"] = asyncio.run(rollbacks(args.rollbacks, notifier))
        results["receiver holding each request 30 s"]["notifications"] = {
            k: v - before[k] for k, v in counted().items()
        }
        results["receiver holding each request 30 s"]["requests_received"] = len(slow.received)
    results["seconds"] = round((datetime.now() - started).total_seconds(), 1)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

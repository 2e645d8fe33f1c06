"""The work queue: due order, dedup, and never one key twice at once."""

import asyncio

from specfleet.controller.queue import FailureBackoff, WorkQueue


async def _take(queue: WorkQueue, timeout: float = 1.0) -> object:
    return await asyncio.wait_for(queue.get(), timeout)


def test_keys_come_out_due_first_and_once() -> None:
    async def scenario() -> list[object]:
        queue = WorkQueue()
        queue.add("later", after=0.05)
        queue.add("now")
        queue.add("now")
        first = await _take(queue)
        second = await _take(queue)
        return [first, second, len(queue)]

    assert asyncio.run(scenario()) == ["now", "later", 0]


def test_sooner_request_wins_over_a_later_one() -> None:
    async def scenario() -> object:
        queue = WorkQueue()
        queue.add("a", after=60)
        queue.add("a", after=0)
        return await _take(queue, timeout=0.5)

    assert asyncio.run(scenario()) == "a"


def test_a_key_added_while_active_waits_for_done() -> None:
    async def scenario() -> tuple[int, int, object]:
        queue = WorkQueue()
        queue.add("a")
        await _take(queue)
        queue.add("a")  # while it is being processed: held back, not queued
        while_active = len(queue)
        queue.done("a")
        return while_active, len(queue), await _take(queue)

    assert asyncio.run(scenario()) == (0, 1, "a")


def test_a_key_reconciled_before_goes_before_new_keys_due_earlier() -> None:
    async def scenario() -> list[object]:
        queue = WorkQueue()
        queue.add("old")
        await _take(queue)
        queue.done("old")  # its first pass is done
        for name in ("new-1", "new-2"):
            queue.add(name)
        queue.add("old")  # e.g. its Deployment became available: due later than the new keys
        return [await _take(queue) for _ in range(3)]

    assert asyncio.run(scenario()) == ["old", "new-1", "new-2"]


def test_a_known_key_not_yet_due_does_not_hold_back_new_ones() -> None:
    async def scenario() -> list[object]:
        queue = WorkQueue()
        queue.add("old")
        await _take(queue)
        queue.done("old")
        queue.add("old", after=0.05)
        queue.add("new")
        return [await _take(queue), await _take(queue)]

    assert asyncio.run(scenario()) == ["new", "old"]


def test_a_forgotten_key_is_new_again() -> None:
    async def scenario() -> list[object]:
        queue = WorkQueue()
        queue.add("gone")
        await _take(queue)
        queue.done("gone")
        queue.forget("gone")  # deleted; a fleet of that name created again is a new object
        queue.add("first")
        queue.add("gone")
        return [await _take(queue), await _take(queue)]

    assert asyncio.run(scenario()) == ["first", "gone"]


def test_a_key_failing_again_and_again_waits_twice_as_long_each_time_up_to_the_cap() -> None:
    backoff: FailureBackoff[str] = FailureBackoff(base=5.0, cap=300.0)

    waits = [backoff.failed("broken") for _ in range(9)]

    assert waits == [5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0, 300.0]
    assert backoff.failed("other") == 5.0  # per key: one broken fleet does not slow the others


def test_a_success_forgets_the_failures() -> None:
    backoff: FailureBackoff[str] = FailureBackoff(base=5.0, cap=300.0)
    for _ in range(4):
        backoff.failed("flaky")

    backoff.succeeded("flaky")

    assert backoff.failures("flaky") == 0
    assert backoff.failed("flaky") == 5.0


def test_the_wait_stays_at_the_cap_however_long_a_key_fails() -> None:
    backoff: FailureBackoff[str] = FailureBackoff(base=5.0, cap=300.0)
    for _ in range(10_000):
        wait = backoff.failed("forever")
    assert wait == 300.0


def test_a_key_is_stalled_from_its_tenth_failure_in_a_row_until_a_success() -> None:
    backoff: FailureBackoff[str] = FailureBackoff(base=5.0, cap=300.0, stall_after=10)

    stalled = [(backoff.failed("broken"), backoff.stalled("broken")) for _ in range(11)]

    assert [is_stalled for _, is_stalled in stalled] == [False] * 9 + [True, True]
    assert stalled[-1][0] == 300.0  # a stalled key is still tried again, at the cap
    backoff.succeeded("broken")
    assert not backoff.stalled("broken")

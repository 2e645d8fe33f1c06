"""Pods move between stable and canary within rollout.maxSurge / maxUnavailable, on a full pool.

The state machine drives a pod-level fake (`podworld`): a canary is taken through every step and
promoted, or aborted mid-way (a rollback moves the same way), or the spec goes back to stable; at every
tick the pods holding or asking for GPUs stay within `replicas + maxSurge`, and the Ready pods that take
traffic never fall below `replicas - maxUnavailable`.
"""

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from podworld import PodWorld

from specfleet.api.durations import parse_duration
from specfleet.api.status import Phase
from specfleet.api.vocabulary import Command, ConditionType, Track
from specfleet.rollout import decide
from specfleet.rollout.moves import Budget, TrackPods, move
from specfleet.rollout.types import GpuRequest, GpuRoom

from rolloutkit import Fleet, make_spec

MAX_TICKS = 1500


def steps_strategy() -> st.SearchStrategy[list[dict[str, Any]]]:
    weights = st.lists(st.integers(1, 100), min_size=1, max_size=4, unique=True).map(sorted)
    return weights.map(lambda ws: [{"weight": w, "pause": {"duration": "20s"}} for w in ws])


def limits_strategy() -> st.SearchStrategy[tuple[int | str, int | str]]:
    count = st.integers(0, 4) | st.sampled_from(["0%", "10%", "25%", "50%"])
    return st.tuples(count, count).filter(lambda pair: pair[0] not in (0, "0%") or pair[1] not in (0, "0%"))


def rollout(replicas: int, steps: list[dict[str, Any]], surge: int | str, unavailable: int | str) -> dict[str, Any]:
    return {"replicas": replicas, "rollout": {"steps": steps, "maxSurge": surge, "maxUnavailable": unavailable}}


def full_pool(settings_: dict[str, Any]) -> PodWorld:
    """A Healthy fleet on a pool with exactly `replicas + maxSurge` pods' worth of GPUs."""
    spec = make_spec(**settings_)
    limits = spec.move_limits()
    assert limits is not None
    world = PodWorld(Fleet(spec), slots=spec.main_replicas + limits[0])
    for _ in range(10):
        world.pass_()
    assert world.fleet.status.phase is Phase.HEALTHY
    return world


def run(
    world: PodWorld, until: Any, ticks: int = MAX_TICKS, floor: int | None = None, ceiling: int | None = None
) -> list[str]:
    """Pass until `until(world)`; the invariants checked at every tick; returns what broke them. `floor`, `ceiling`:
    the Ready pods that must serve and the pods that may hold GPUs, when not `replicas - maxUnavailable` and
    `replicas + maxSurge` (replicas were just raised, or lowered)."""
    spec = world.fleet.spec
    surge, unavailable = spec.move_limits() or (0, 0)
    total, broken = spec.main_replicas, []
    floor = total - unavailable if floor is None else floor
    ceiling = total + surge if ceiling is None else ceiling
    for tick in range(ticks):
        world.pass_()
        if world.held() > ceiling:
            broken.append(
                f"tick {tick}: {world.held()} pods hold or ask for GPUs > {ceiling} ({total} + maxSurge {surge})"
            )
        if world.serving() < floor:
            broken.append(f"tick {tick}: {world.serving()} serving < {floor} ({total} - maxUnavailable {unavailable})")
        if until(world):
            return broken
    return [*broken, f"not done within {ticks} ticks: {world.fleet.status.phase} {world.fleet.status.conditions}"]


def settled_on(revision: str) -> Any:
    def done(world: PodWorld) -> bool:
        status, total = world.fleet.status, world.fleet.spec.main_replicas
        stable = [p for p in world.pods if p.track is Track.STABLE and p.state == "Ready"]
        no_canary = not any(p.track is Track.CANARY for p in world.pods)
        return (
            status.canary_revision is None
            and status.retiring_revision is None
            and no_canary
            and (len(stable) == total and all(p.revision == revision for p in stable))
        )

    return done


@settings(max_examples=60, deadline=None)
@given(
    replicas=st.integers(1, 64),
    steps=steps_strategy(),
    limits=limits_strategy(),
    ending=st.sampled_from(["promoted", "aborted", "spec-reverted"]),
    at_step=st.integers(0, 3),
)
def test_a_canary_moves_within_the_budget_every_step_and_every_ending(
    replicas: int, steps: list[dict[str, Any]], limits: tuple[int | str, int | str], ending: str, at_step: int
) -> None:
    settings_ = rollout(replicas, steps, *limits)
    world = full_pool(settings_)
    stable = world.fleet.status.stable_revision
    assert stable is not None
    world.fleet.change(**settings_, speculative={"numSpeculativeTokens": 2})
    canary = world.fleet.step().status.canary_revision
    assert canary is not None
    if ending == "promoted":
        assert run(world, settled_on(canary)) == []
        assert world.fleet.status.history[-1].outcome == "Promoted"
        return
    last = min(at_step, len(steps) - 1)
    assert run(world, lambda w: (w.fleet.status.current_step or 0) >= last and w.fleet.canary.ready > 0) == []
    if ending == "aborted":
        world.fleet.commands[Command.ABORT.annotation] = f"revision={canary}"
    else:
        world.fleet.change(**settings_)
    assert run(world, settled_on(stable)) == []


def test_replicas_changed_mid_canary_recompute_the_share_in_both_directions() -> None:
    """An HPA writes replicas through the scale subresource while the canary is at its second step."""
    steps = [{"weight": 25, "pause": {"duration": "20s"}}, {"weight": 50, "pause": {"duration": "5m"}}]
    world = full_pool(rollout(8, steps, 0, 1))
    world.fleet.change(**rollout(8, steps, 0, 1), speculative={"numSpeculativeTokens": 2})
    world.fleet.step()
    assert run(world, lambda w: w.fleet.status.current_step == 1 and w.fleet.canary.ready == 4) == []
    world.slots = 12  # the cluster autoscaler added a node
    world.fleet.change(**rollout(12, steps, 0, 1), speculative={"numSpeculativeTokens": 2})
    grown = run(world, lambda w: w.fleet.canary.ready == 6 and w.fleet.stable.serving == 6, ticks=200, floor=8 - 1)
    assert grown == []
    world.fleet.change(**rollout(6, steps, 0, 1), speculative={"numSpeculativeTokens": 2})
    shrunk = run(world, lambda w: w.fleet.canary.replicas == 3 and w.fleet.stable.replicas == 3, ticks=200, ceiling=12)
    assert shrunk == []


def test_freed_gpus_taken_by_another_pod_are_reported_and_stable_gives_up_no_more() -> None:
    steps = [{"weight": 50, "pause": {"duration": "20s"}}]
    settings_ = rollout(8, steps, 0, 1)
    world = full_pool(settings_)
    world.fleet.change(**settings_, speculative={"numSpeculativeTokens": 2})
    world.fleet.step()
    world.thief_waiting = 1  # a batch job's pod is Pending for one GPU slot
    run(world, lambda w: w.thief == 1 and w.fleet.canary.unschedulable != "", ticks=50)
    request = world.fleet.last.capacity_due if world.fleet.last else None
    for _ in range(5):  # the shell answers the request: the nodes have nothing free
        decision = world.pass_(room=GpuRoom(request, free=0, fitting=0, nodes=2)) if request else world.pass_()
        request = decision.capacity_due
    stable_before = world.deployments[Track.STABLE].replicas
    assert request is not None and request.pods == 1
    progressing = next(c for c in world.fleet.status.conditions if c.type == ConditionType.PROGRESSING)
    assert progressing.reason == "InsufficientCapacity"
    assert "another pod took the GPUs stable gave up" in progressing.message
    assert world.fleet.events.count("InsufficientCapacity") == 1
    for _ in range(10):
        world.pass_(room=GpuRoom(request, free=0, fitting=0, nodes=2))
    assert world.deployments[Track.STABLE].replicas == stable_before
    assert world.serving() >= 8 - 1


def changed_on_a_full_pool_without_max_surge() -> PodWorld:
    """16 replicas on 16 GPU slots, default rollout (a 25% step), k just changed."""
    steps = [{"weight": 25, "pause": {"duration": "20s"}}]
    world = PodWorld(Fleet(make_spec(replicas=16, rollout={"steps": steps})), slots=16)
    for _ in range(10):
        world.pass_()
    world.fleet.change(replicas=16, rollout={"steps": steps}, speculative={"numSpeculativeTokens": 2})
    return world


def test_without_max_surge_a_step_that_does_not_fit_says_so_at_once() -> None:
    world = changed_on_a_full_pool_without_max_surge()
    asked = world.fleet.step().capacity_due
    assert asked == GpuRequest(4, 1, "amd.com/gpu", ("AMD_Instinct_MI300X_OAM",))
    decision = world.fleet.step_with(room=GpuRoom(asked, free=0, fitting=0, nodes=2))
    progressing = next(c for c in decision.status.conditions if c.type == ConditionType.PROGRESSING)
    assert progressing.reason == "InsufficientCapacity"
    assert progressing.message == (
        "needs 4 amd.com/gpu on AMD_Instinct_MI300X_OAM nodes, 0 free; "
        "set rollout.maxSurge: 0 to swap stable pods for canary pods instead"
    )


def test_a_room_answer_for_another_request_is_not_read_as_this_one() -> None:
    world = changed_on_a_full_pool_without_max_surge()
    stale = GpuRequest(2, 1, "amd.com/gpu", ("AMD_Instinct_MI300X_OAM",))
    decision = world.fleet.step_with(room=GpuRoom(stale, free=0, fitting=0, nodes=2))
    progressing = next(c for c in decision.status.conditions if c.type == ConditionType.PROGRESSING)
    assert progressing.reason == "CanaryStarting"


@pytest.mark.parametrize(
    ("giver", "taker", "expected"),
    [
        (TrackPods(16, 16), TrackPods(0, 0), (15, 0)),  # no room: stable gives up one (maxUnavailable 1)
        (TrackPods(15, 15, terminating=1), TrackPods(0, 0), (15, 0)),  # its GPUs are not free yet
        (TrackPods(15, 15), TrackPods(0, 0), (15, 1)),  # they are: the canary asks for one
        (TrackPods(15, 15), TrackPods(1, 0), (15, 1)),  # it is starting: the floor holds stable
        (TrackPods(15, 15), TrackPods(1, 1), (14, 1)),  # it serves: stable gives up the next
        (TrackPods(15, 15), TrackPods(1, 0, stuck=True), (15, 1)),  # it found no room: no more given up
    ],
)
def test_one_swap_at_a_time(giver: TrackPods, taker: TrackPods, expected: tuple[int, int]) -> None:
    moved = move(16, 4, Budget(surge=0, unavailable=1), giver=giver, taker=taker)
    assert (moved.giver, moved.taker) == expected


def test_a_room_with_no_matching_node_says_so() -> None:
    request = GpuRequest(2, 1, "amd.com/gpu", ("AMD_Instinct_MI999_OAM",))
    assert GpuRoom(request, free=0, fitting=0, nodes=0).describe() == (
        "needs 2 amd.com/gpu on AMD_Instinct_MI999_OAM nodes, and none is Ready, schedulable and tolerated"
    )
    assert not GpuRoom(request, free=0, fitting=0, nodes=0).fits


def test_a_large_step_swapped_pod_by_pod_outlasts_the_deadline_without_being_cut_short() -> None:
    """46 pods swapped one at a time take longer than the 30m progress deadline; each Ready pod is progress
    (as for a Deployment), so the step ends and the canary is promoted instead of aborted."""
    settings_ = rollout(60, [{"weight": 76, "pause": {"duration": "20s"}}], 0, 1)
    world = full_pool(settings_)
    world.fleet.change(**settings_, speculative={"numSpeculativeTokens": 2})
    canary = world.fleet.step().status.canary_revision
    started = world.fleet.now
    assert run(world, settled_on(canary)) == []
    assert world.fleet.now - started > parse_duration(world.fleet.spec.rollout.progress_deadline)
    assert world.fleet.status.history[-1].outcome == "Promoted"


def test_a_stable_deployment_scaled_by_hand_during_a_swap_promotion_is_scaled_back_and_the_promotion_ends() -> None:
    """Two replicas on a pool of two (`maxSurge: 0`): just after the promotion starts, someone scales the
    stable Deployment to 3. Its third pod can never fit; the fleet owns the replica count, so the
    promotion takes the Deployment back to `replicas` and finishes rather than waiting on a pod forever."""
    steps = [{"weight": 50, "pause": {"duration": "20s"}}]
    settings_ = rollout(2, steps, 0, 1)
    world = full_pool(settings_)
    world.fleet.change(**settings_, speculative={"numSpeculativeTokens": 2})
    canary = world.fleet.step().status.canary_revision
    assert canary is not None
    assert run(world, lambda w: w.fleet.status.stable_revision == canary) == []
    world.deployments[Track.STABLE].replicas = 3
    assert run(world, settled_on(canary), ticks=300) == []
    assert world.deployments[Track.STABLE].replicas == 2


def test_a_room_that_fits_decides_as_no_room_so_the_shell_need_not_decide_again() -> None:
    world = changed_on_a_full_pool_without_max_surge()
    spec, status = world.fleet.decided_spec(), world.fleet.status
    asked = decide(spec, status, world.fleet.observe()).capacity_due
    assert asked is not None
    fitting = GpuRoom(asked, free=asked.gpus, fitting=asked.pods, nodes=2)
    too_small = GpuRoom(asked, free=0, fitting=0, nodes=2)
    without = decide(spec, status, world.fleet.observe())
    assert decide(spec, status, world.fleet.observe(room=fitting)) == without
    assert decide(spec, status, world.fleet.observe(room=too_small)) != without

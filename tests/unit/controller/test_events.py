"""The event correlator: a repeated Event is counted on one object, similar ones are combined, memory is bounded."""

from datetime import UTC, datetime, timedelta

from specfleet.controller.events import COMBINED, EventCorrelator, Involved

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)
LLAMA = Involved("default", "llama", "uid-1")
LLAMA_RECREATED = Involved("default", "llama", "uid-2")


def test_the_same_event_again_counts_on_the_first_one() -> None:
    correlator = EventCorrelator()

    first = correlator.correlate(LLAMA, "Warning", "CommandIgnored", "promote ignored", NOW)
    again = correlator.correlate(LLAMA, "Warning", "CommandIgnored", "promote ignored", NOW + timedelta(minutes=1))
    third = correlator.correlate(LLAMA, "Warning", "CommandIgnored", "promote ignored", NOW + timedelta(minutes=2))

    assert first.create and first.count == 1 and first.name.startswith("llama.")
    assert not again.create and again.name == first.name and again.count == 2
    assert (third.name, third.count, third.first_timestamp, third.last_timestamp) == (
        first.name,
        3,
        NOW,
        NOW + timedelta(minutes=2),
    )


def test_a_different_message_reason_type_or_object_is_its_own_event() -> None:
    correlator = EventCorrelator()
    first = correlator.correlate(LLAMA, "Warning", "CommandIgnored", "promote ignored", NOW)

    others = [
        correlator.correlate(LLAMA, "Warning", "CommandIgnored", "abort ignored", NOW),
        correlator.correlate(LLAMA, "Warning", "RolledBack", "promote ignored", NOW),
        correlator.correlate(LLAMA, "Normal", "CommandIgnored", "promote ignored", NOW),
        correlator.correlate(LLAMA_RECREATED, "Warning", "CommandIgnored", "promote ignored", NOW),
    ]

    assert all(other.create and other.count == 1 for other in others)
    assert len({first.name, *(other.name for other in others)}) == 5  # one clock tick, yet five names


def test_a_repeat_after_the_window_is_a_new_event() -> None:
    correlator = EventCorrelator(window=timedelta(minutes=10))
    first = correlator.correlate(LLAMA, "Normal", "Promoted", "promoted r2", NOW)

    later = correlator.correlate(LLAMA, "Normal", "Promoted", "promoted r2", NOW + timedelta(minutes=11))

    assert later.create and later.count == 1 and later.name != first.name


def test_ten_similar_events_are_combined_into_one_that_counts() -> None:
    correlator = EventCorrelator(similar=10)

    writes = [
        correlator.correlate(LLAMA, "Warning", "RolledBack", f"canary r{n} rolled back", NOW + timedelta(seconds=n))
        for n in range(14)
    ]

    assert [w.message.startswith(COMBINED) for w in writes] == [False] * 9 + [True] * 5
    combined = writes[9:]
    assert combined[0].create and combined[0].message == COMBINED + "canary r9 rolled back"
    assert all(not w.create and w.name == combined[0].name for w in combined[1:])
    assert [w.count for w in combined] == [1, 2, 3, 4, 5]
    assert combined[-1].message == COMBINED + "canary r13 rolled back"  # the patch carries the latest words


def test_a_forgotten_event_is_created_anew() -> None:
    correlator = EventCorrelator()
    first = correlator.correlate(LLAMA, "Normal", "Promoted", "promoted r2", NOW)

    correlator.forget(LLAMA, "Normal", "Promoted", "promoted r2")
    again = correlator.correlate(LLAMA, "Normal", "Promoted", "promoted r2", NOW + timedelta(seconds=1))

    assert again.create and again.count == 1 and again.name != first.name


def test_the_memory_holds_at_most_max_keys_and_drops_the_least_recently_used() -> None:
    correlator = EventCorrelator(max_keys=3)
    fleets = [Involved("default", f"fleet-{n}", f"uid-{n}") for n in range(4)]
    for fleet in fleets[:3]:
        correlator.correlate(fleet, "Normal", "Promoted", "promoted", NOW)
    correlator.correlate(fleets[0], "Normal", "Promoted", "promoted", NOW)  # fleet-0 used again: fleet-1 is oldest

    correlator.correlate(fleets[3], "Normal", "Promoted", "promoted", NOW)

    assert not correlator.correlate(fleets[0], "Normal", "Promoted", "promoted", NOW).create
    assert correlator.correlate(fleets[1], "Normal", "Promoted", "promoted", NOW).create
    assert len(correlator._seen) <= 3 and len(correlator._similar) <= 3

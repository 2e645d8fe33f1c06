"""`free_port`: a port for a child told where to listen, picked where no port-0 listener or client lands."""

import socket

import pytest

from specfleet_workshop.fleetpods import loopback


def _ephemeral() -> range:
    low, high = (int(v) for v in loopback.EPHEMERAL_RANGE.read_text().split())
    return range(low, high + 1)


def test_picked_ports_are_free_and_outside_the_range_port_zero_and_clients_draw_from() -> None:
    ephemeral = _ephemeral()
    picked = [loopback.free_port() for _ in range(50)]
    assert not [p for p in picked if p in ephemeral or p < loopback.QUIET_PORTS_START]
    for port in picked:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # free: it binds
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        assert taken.getsockname()[1] in ephemeral  # what a port-0 listener gets: never one picked above


def _rig(monkeypatch: pytest.MonkeyPatch, picks: list[int]) -> None:
    """The random picks `free_port` makes: `picks` in turn, then the last one again and again."""
    queue = iter(picks)

    class Rigged:
        def randrange(self, start: int, stop: int) -> int:
            return next(queue, picks[-1])

    monkeypatch.setattr(loopback.random, "SystemRandom", Rigged)


def test_a_taken_port_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    spare = loopback.free_port()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", loopback.free_port(exclude=[spare])))
        _rig(monkeypatch, [holder.getsockname()[1], spare])
        assert loopback.free_port() == spare


def test_with_every_pick_taken_the_kernel_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", loopback.free_port()))
        _rig(monkeypatch, [holder.getsockname()[1]])
        assert loopback.free_port() in _ephemeral()


def test_several_ports_are_distinct() -> None:
    ports = loopback.free_ports(7)
    assert len(set(ports)) == 7

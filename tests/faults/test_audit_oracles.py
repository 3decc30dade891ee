"""The audit-log oracles of the leader and restart tests (audit.py), on bindings made up here:
each must fail on the sequence it exists to catch. No cluster: these run with the unit tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from .audit import Binding, one_sender_at_a_time, requests_per_pod, resent_after_settled, turns

START = datetime(2026, 12, 7, tzinfo=UTC)
ALREADY = 'Operation cannot be fulfilled on pods/binding "p": pod p is already assigned to node "node1"'
STORAGE = (
    "Operation cannot be fulfilled on pods/binding: rpc error: code = Unavailable desc = error reading from server: EOF"
)


def binding(second: float, pod: str, sender: str, code: int | None = 201, message: str = "") -> Binding:
    """A request received at `second`, answered (when `code` is not None) 50 ms later."""
    received = START + timedelta(seconds=second)
    return Binding(
        f"id-{second}-{pod}",
        "ns",
        pod,
        f"gpu-scheduler ({sender}) kubernetes",
        received,
        code,
        message,
        None if code is None else received + timedelta(milliseconds=50),
    )


def test_the_identity_is_read_from_the_user_agent():
    assert binding(0, "p-0", "host_1").identity == "host_1"
    other = Binding("x", "ns", "p-0", "kubectl/v1.37.1 (linux/amd64)", START, 201)
    assert other.identity == "kubectl/v1.37.1 (linux/amd64)"


def test_one_sender_after_another_is_two_turns():
    found = one_sender_at_a_time(
        [binding(0, "p-0", "a"), binding(1, "p-1", "a"), binding(20, "p-2", "b"), binding(21, "p-3", "b")]
    )
    assert [(t.identity, t.requests) for t in found] == [("a", 2), ("b", 2)]


def test_two_senders_interleaved_fail_even_when_the_second_is_refused():
    bindings = [binding(0, "p-0", "a"), binding(1, "p-1", "b"), binding(2, "p-1", "a", 409, ALREADY)]
    assert [t.identity for t in turns(bindings)] == ["a", "b", "a"]
    with pytest.raises(AssertionError, match="more than one sender at a time"):
        one_sender_at_a_time(bindings)


def test_a_request_after_a_settled_answer_is_listed_whoever_sends_it():
    bindings = [
        binding(0, "p-0", "a"),
        binding(1, "p-0", "b", 409, ALREADY),  # after a 201: listed
        binding(2, "p-1", "a", None),  # no answer: may have been stored
        binding(3, "p-1", "a", 409, ALREADY),  # finding out: not listed
        binding(4, "p-2", "a", 409, STORAGE),  # a storage error: uncertain
        binding(5, "p-2", "a"),
        binding(6, "p-3", "a", 404),
        binding(7, "p-3", "a", 404),  # the pod was gone already: listed
    ]
    assert resent_after_settled(bindings) == {"p-0": ["201 from a", "409 from b"], "p-3": ["404 from a", "404 from a"]}
    assert requests_per_pod(bindings) == {"p-0": 2, "p-1": 2, "p-2": 2, "p-3": 2}


def test_an_answer_logged_just_before_the_api_server_was_killed_may_not_have_reached_its_sender():
    """kube-apiserver logs ResponseComplete before it flushes the response: a 201 logged in the
    last moment before a kill -9 may never have been read, and the resend is the scheduler
    finding out. Answers logged earlier than audit.UNSENT_WINDOW before the kill stay settled."""
    kill = START + timedelta(seconds=10)
    bindings = [
        binding(4, "early", "a"),
        binding(9.8, "late", "a"),
        binding(14, "early", "a", 409, ALREADY),  # its 201 was logged 5.95 s before the kill
        binding(14.1, "late", "a", 409, ALREADY),  # its 201 was logged 0.15 s before the kill
    ]
    assert resent_after_settled(bindings, [kill]) == {"early": ["201 from a", "409 from a"]}
    # Without the kill every resend after a 201 is listed, as before.
    assert set(resent_after_settled(bindings)) == {"early", "late"}
    # An answer logged after the kill time belongs to the next API server: settled.
    restarted = [binding(11, "after", "a"), binding(12, "after", "a", 409, ALREADY)]
    assert resent_after_settled(restarted, [kill]) == {"after": ["201 from a", "409 from a"]}

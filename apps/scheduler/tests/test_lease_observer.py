"""The pure rules of leader election: when a Lease may be taken, and what is written."""

from gpu_scheduler.kube.leader import LeaseObserver, LeaseRecord

ME = "host-a_1111"
OTHER = "host-b_2222"


def record(holder, duration=15, renew="2024-01-01T00:00:00.000000Z", transitions=0):
    return LeaseRecord(holder, duration, renew, renew, transitions)


def test_a_lease_held_by_another_is_respected_until_its_duration_passes_on_our_clock():
    observer = LeaseObserver(ME, 15)
    observer.observe(record(OTHER), now=100.0)
    assert observer.held_by_other(now=114.9)
    assert not observer.held_by_other(now=115.1)


def test_each_renewal_by_the_holder_restarts_the_wait():
    observer = LeaseObserver(ME, 15)
    observer.observe(record(OTHER, renew="2024-01-01T00:00:00.000000Z"), now=100.0)
    observer.observe(record(OTHER, renew="2024-01-01T00:00:02.000000Z"), now=110.0)
    assert observer.held_by_other(now=120.0)
    # Seeing the same record again is no renewal.
    observer.observe(record(OTHER, renew="2024-01-01T00:00:02.000000Z"), now=124.0)
    assert not observer.held_by_other(now=125.1)


def test_the_holders_own_duration_counts_not_ours():
    observer = LeaseObserver(ME, 15)
    observer.observe(record(OTHER, duration=1), now=100.0)
    assert not observer.held_by_other(now=101.5)


def test_a_released_or_own_lease_is_free_to_take():
    observer = LeaseObserver(ME, 15)
    observer.observe(record(""), now=100.0)
    assert not observer.held_by_other(now=100.0)
    observer.observe(record(ME), now=101.0)
    assert not observer.held_by_other(now=101.0)


def test_taking_over_counts_a_transition_and_renewing_keeps_the_acquire_time():
    observer = LeaseObserver(ME, 15)
    taken = observer.claim(record(OTHER, transitions=4), wall_time=0.0)
    assert (taken.holder, taken.duration_seconds, taken.transitions) == (ME, 15, 5)
    assert taken.acquire_time == taken.renew_time == "1970-01-01T00:00:00.000000Z"
    renewed = observer.claim(taken, wall_time=2.0)
    assert renewed.transitions == 5
    assert renewed.acquire_time == "1970-01-01T00:00:00.000000Z"
    assert renewed.renew_time == "1970-01-01T00:00:02.000000Z"


def test_a_new_lease_starts_with_no_transitions():
    assert LeaseObserver(ME, 15).claim(None, wall_time=0.0).transitions == 0


def test_release_empties_the_holder_and_expires_in_a_second():
    observer = LeaseObserver(ME, 15)
    released = observer.release(record(ME, transitions=3), wall_time=5.0)
    assert released.to_spec() == {
        "holderIdentity": "",
        "leaseDurationSeconds": 1,
        "leaseTransitions": 3,
        "acquireTime": "1970-01-01T00:00:05.000000Z",
        "renewTime": "1970-01-01T00:00:05.000000Z",
    }


def test_a_lease_round_trips_through_its_api_form():
    lease = {
        "spec": {
            "holderIdentity": OTHER,
            "leaseDurationSeconds": 15,
            "leaseTransitions": 2,
            "acquireTime": "a",
            "renewTime": "r",
        }
    }
    assert LeaseRecord.from_lease(lease).to_spec() == lease["spec"]
    assert LeaseRecord.from_lease({}) == LeaseRecord("", 0, None, None, 0)

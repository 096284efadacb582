"""How far ahead the claimer claims (leased.engine.slots): a wave ahead for many short jobs, nothing
extra for long ones. Slots is plain bookkeeping, so these drive it with a clock of their own and
stand-ins for claimed attempts; the worker tests run it against the databases."""

from __future__ import annotations

from leased.engine.slots import MAX_PREFETCH, Slots


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class Claimed:
    """What Slots reads of an attempt: whether it is async, and when its handler started."""

    is_async = False

    def __init__(self) -> None:
        self.started = 0.0


def slots_of(concurrency: int, clock: Clock) -> tuple[Slots, list[Claimed]]:
    started: list[Claimed] = []

    def run(attempt: Claimed) -> None:
        attempt.started = clock.now
        started.append(attempt)

    return Slots(concurrency, run_on_thread=run, run_on_loop=run, freed=lambda: None, clock=clock), started


def test_a_wave_of_equal_jobs_is_claimed_again_when_its_first_job_returns():
    clock = Clock()
    slots, started = slots_of(500, clock)
    for _ in range(500):  # 500 jobs of 50 ms, started over 15 ms
        slots.add([Claimed()])
        clock.now += 0.00003
    assert slots.running == 500 and slots.wanted(unwritten=0) == 0
    clock.now = started[0].started + 0.050
    slots.ended(started[0], on_thread=False)
    # The free slot, and the other 499, which will return within the next 50 ms.
    assert slots.wanted(unwritten=0) == 500


def test_long_jobs_get_nothing_extra_from_a_few_quick_failures():
    clock = Clock()
    slots, started = slots_of(500, clock)
    slots.add([Claimed() for _ in range(500)])
    clock.now += 60.0  # an hour-long job each, a minute in
    for attempt in started[:3]:  # three of them fail at once, say on bad arguments
        attempt.started = clock.now - 0.001
        slots.ended(attempt, on_thread=False)
    assert slots.wanted(unwritten=0) == 3  # the three free slots, no more


def test_short_jobs_are_claimed_ahead_at_the_rate_slots_free():
    clock = Clock()
    slots, started = slots_of(10, clock)
    slots.add([Claimed() for _ in range(10)])
    for n in range(250):  # a job ends every millisecond, each ran 1 ms
        clock.now += 0.001
        attempt = started[n]
        slots.ended(attempt, on_thread=False)
        slots.add([Claimed()])
    # 1,000 ends a second: the next 50 ms need 50 jobs beyond the 10 slots' own.
    assert slots.wanted(unwritten=0) == 50


def test_slow_claims_reach_further_ahead_up_to_a_cap():
    clock = Clock()
    slots, started = slots_of(10, clock)
    slots.add([Claimed() for _ in range(10)])
    for n in range(250):
        clock.now += 0.001
        slots.ended(started[n], on_thread=False)
        slots.add([Claimed()])
    for _ in range(30):  # claims take 100 ms lately: what is claimed now must last two claims
        slots.claim_took(0.100)
    assert 180 <= slots.wanted(unwritten=0) <= 200
    for _ in range(30):
        slots.claim_took(10.0)
    assert slots.wanted(unwritten=0) == MAX_PREFETCH


def test_unwritten_ends_hold_claims_back():
    clock = Clock()
    slots, _ = slots_of(10, clock)
    assert slots.wanted(unwritten=0) == 10
    assert slots.wanted(unwritten=995) == 5


def test_a_thread_whose_job_ended_takes_no_job_behind_one_still_waiting_for_a_thread():
    """A handler thread whose job ended used to take the next waiting job itself while a job given to
    the handler threads before it still waited for a thread being woken (a GIL switch or more): at
    concurrency 10 a no-op drain started jobs up to 500 places late (bench/claim_order.py). While
    one waits, the thread leaves the next job to the threads' line, behind it."""
    given: list[Claimed] = []  # given to the handler threads, and no thread has taken them yet
    slots = Slots(2, run_on_thread=given.append, run_on_loop=given.append, freed=lambda: None,
                  threads_behind=lambda: bool(given), clock=Clock())
    first, second, third, fourth = (Claimed() for _ in range(4))
    slots.add([first, second, third, fourth])
    assert given == [first, second]
    given.remove(first)  # a thread takes the first; the second waits for the thread woken for it
    assert slots.ended(first, on_thread=True) is None
    assert given == [second, third]  # for whichever thread comes first: the woken one, or this one
    given.clear()
    assert slots.ended(second, on_thread=True) is fourth  # none waits: the thread takes the next itself

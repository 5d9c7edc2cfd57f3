"""The login throttle's arithmetic over hours, on a clock the test moves (no waiting)."""

from __future__ import annotations

from theow_workers.web.throttle import (
    BUSY_DELAY,
    BUSY_FAILURES,
    FORGET_AFTER,
    FREE_FAILURES,
    MAX_DELAY,
    WRONG_PASSWORD_DELAY,
    LoginThrottle,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_each_failure_after_the_free_ones_doubles_the_wait_up_to_its_cap():
    clock = Clock()
    throttle = LoginThrottle(clock=clock)
    waits = []
    for _ in range(FREE_FAILURES):
        throttle.failed("192.0.2.1")
        assert throttle.retry_after("192.0.2.1") == 0
    for _ in range(14):
        throttle.failed("192.0.2.1")
        waits.append(throttle.retry_after("192.0.2.1"))
        clock.now += waits[-1]  # the guesser waits exactly as told, then guesses again
    assert waits[:5] == [1, 2, 4, 8, 16] and waits[-4:] == [MAX_DELAY] * 4


def test_a_correct_password_or_an_hour_of_quiet_clears_a_clients_record():
    clock = Clock()
    throttle = LoginThrottle(clock=clock)
    for _ in range(FREE_FAILURES + 2):
        throttle.failed("192.0.2.2")
    throttle.succeeded("192.0.2.2")
    assert throttle.retry_after("192.0.2.2") == 0 and throttle.failures("192.0.2.2") == 0

    for _ in range(FREE_FAILURES):
        throttle.failed("192.0.2.3")
    clock.now += FORGET_AFTER + 1
    throttle.failed("192.0.2.3")
    assert throttle.failures("192.0.2.3") == 1 and throttle.retry_after("192.0.2.3") == 0


def test_an_ipv6_client_is_one_client_across_its_64_and_ipv4_mapped_is_the_ipv4_address():
    throttle = LoginThrottle(clock=Clock())
    for n in range(FREE_FAILURES + 1):
        throttle.failed(f"2001:db8:1:2::{n + 1:x}")
    assert throttle.retry_after("2001:db8:1:2:ffff::1") > 0
    assert throttle.retry_after("2001:db8:1:3::1") == 0
    for _ in range(FREE_FAILURES + 1):
        throttle.failed("::ffff:192.0.2.9")
    assert throttle.retry_after("192.0.2.9") > 0


def test_many_failures_overall_slow_every_wrong_answer_but_refuse_no_one():
    clock = Clock()
    throttle = LoginThrottle(clock=clock)
    delays = [throttle.failed(f"198.51.100.{n}") for n in range(BUSY_FAILURES + 1)]
    assert delays[0] == WRONG_PASSWORD_DELAY and delays[-1] == BUSY_DELAY
    assert throttle.retry_after("203.0.113.1") == 0  # a new client is still let try
    clock.now += 61
    assert throttle.failed("203.0.113.1") == WRONG_PASSWORD_DELAY  # a quiet minute: back to normal

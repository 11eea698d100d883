"""The benchmark's timing protocols (jax_fp8gemm/bench/timing.py), on a fake clock: "settled" runs
an op back to back for SETTLE_SECONDS and then times windows of ~0.25 s of calls; "sustained" times
one call of the executable per window; both divide by the ops a window ran."""

import pytest

from jax_fp8gemm.bench import timing


class FakeClock:
    """perf_counter that only moves when the op runs: each call takes `seconds`."""

    def __init__(self, seconds: float):
        self.now, self.seconds, self.calls = 0.0, seconds, 0

    def perf_counter(self) -> float:
        return self.now

    def run_once(self) -> None:
        self.now += self.seconds
        self.calls += 1


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock(0.004)
    monkeypatch.setattr(timing.time, "perf_counter", c.perf_counter)
    monkeypatch.setattr(timing, "_kernel_seconds", lambda run, only=None: None)  # the wall-clock path
    yield c
    timing.PROTOCOL["name"] = "sustained"


@pytest.mark.parametrize("seconds", [0.0041, 0.0137, 0.6])
def test_settled_runs_for_the_settle_time_then_windows_of_a_quarter_second(clock, seconds):
    clock.seconds = seconds
    timing.PROTOCOL["name"] = "settled"
    calls = timing._settle(clock.run_once)
    settle_calls = clock.calls
    # It ran until SETTLE_SECONDS had passed, and not one call longer.
    assert (settle_calls - 1) * seconds < timing.SETTLE_SECONDS <= settle_calls * seconds
    # A window of `calls` calls lasts ~0.25 s (at least one call when one takes longer).
    assert calls >= 1
    assert calls == max(1, round(0.25 / seconds))

    per_op = timing._median_time(clock.run_once, reps=4, iters=3, calls=calls)
    assert clock.calls == settle_calls + 3 * calls
    assert per_op == pytest.approx(seconds / 4)


def test_sustained_does_not_settle(clock):
    timing.PROTOCOL["name"] = "sustained"
    assert timing._settle(clock.run_once) == 1
    assert clock.calls == 0
    per_op = timing._median_time(clock.run_once, reps=8, iters=5)
    assert clock.calls == 5
    assert per_op == pytest.approx(0.004 / 8)


def test_named_kernels_only_never_fall_back_to_wall_time(clock):
    """`only` asks for the time of some kernels: without CUPTI's kernel times there is none, and
    the executable's wall time (everything it ran) must not stand in for it."""
    with pytest.raises(RuntimeError, match="quantize"):
        timing._median_time(clock.run_once, reps=4, iters=2, only="quantize")
    assert timing._median_time(clock.run_once, reps=4, iters=2) == pytest.approx(0.004 / 4)


def test_device_seconds_by_kernel_name():
    """The profile's device time: all kernels, those named like `only`, or all but the flush's."""
    from types import SimpleNamespace as Event

    events = [Event(key="void fp8gemm::quantize_transpose_kernel<...>", device_time_total=100.0),
              Event(key="loop_transpose_fusion", device_time_total=5.0),
              Event(key="Memset (Device)", device_time_total=50.0)]
    prof = Event(key_averages=lambda: events)
    assert timing._device_seconds(prof) == pytest.approx(155e-6)
    assert timing._device_seconds(prof, "quantize") == pytest.approx(100e-6)
    assert timing._device_seconds(prof, skip=("Memset", "memset")) == pytest.approx(105e-6)

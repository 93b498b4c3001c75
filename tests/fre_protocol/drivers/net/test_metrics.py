"""The Prometheus text renderer: a known answer, escaping, exact sums under threads, validation."""

from __future__ import annotations

import math
import sys
import threading
import time
from pathlib import Path

import pytest

from fre_protocol.drivers.net.metrics import Metrics
from primitives.errors import InvalidParameterError


def test_known_answer() -> None:
    m = Metrics()
    requests = m.counter("fre_requests_total", "Requests served.", labels=("party", "code"))
    requests.inc(party="proxy", code="503")
    requests.inc(party="S_tag", code="200")
    requests.inc(2, party="S_tag", code="200")
    m.gauge("fre_queue_length", "Pending batches.").set(3)
    m.gauge("fre_phase", "Protocol phase.\nOne of 1, 2 \\ (none: 0).").set(-0.25)
    m.counter("fre_idle_total", "Declared, never touched.", labels=("party",))
    m.gauge("fre_budget", "Remaining budget.").set(math.inf)
    assert m.render() == (
        "# HELP fre_budget Remaining budget.\n"
        "# TYPE fre_budget gauge\n"
        "fre_budget +Inf\n"
        "# HELP fre_idle_total Declared, never touched.\n"
        "# TYPE fre_idle_total counter\n"
        "# HELP fre_phase Protocol phase.\\nOne of 1, 2 \\\\ (none: 0).\n"
        "# TYPE fre_phase gauge\n"
        "fre_phase -0.25\n"
        "# HELP fre_queue_length Pending batches.\n"
        "# TYPE fre_queue_length gauge\n"
        "fre_queue_length 3.0\n"
        "# HELP fre_requests_total Requests served.\n"
        "# TYPE fre_requests_total counter\n"
        'fre_requests_total{party="S_tag",code="200"} 3.0\n'
        'fre_requests_total{party="proxy",code="503"} 1.0\n'
    )


def test_label_values_are_escaped() -> None:
    m = Metrics()
    m.counter("errors_total", "Errors.", labels=("message",)).inc(message='a\\b "quoted"\nnext')
    assert m.render().splitlines()[-1] == 'errors_total{message="a\\\\b \\"quoted\\"\\nnext"} 1.0'


def test_a_label_free_metric_starts_at_zero_and_nan_is_spelled_nan() -> None:
    m = Metrics()
    m.counter("ticks_total", "Ticks.")
    m.gauge("ratio", "Ratio.").set(math.nan)
    assert m.render().splitlines()[2] == "ratio NaN"
    assert m.render().splitlines()[-1] == "ticks_total 0.0"


def test_concurrent_increments_sum_exactly() -> None:
    # Switching threads every microsecond makes a lost update (read, switch, write) likely
    # within a few thousand increments if the lock were missing.
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        _increment_from_threads()
    finally:
        sys.setswitchinterval(previous)


def _increment_from_threads() -> None:
    m = Metrics()
    counter = m.counter("hits_total", "Hits.", labels=("worker",))
    threads_n, per_thread = 4, 4_000
    start = threading.Barrier(threads_n)

    def work(i: int) -> None:
        start.wait()
        for _ in range(per_thread):
            counter.inc(worker="all")
            counter.inc(0.5, worker=str(i % 2))
        for _ in range(per_thread // 10):
            with m.timer("step", worker="all"):
                pass

    threads = [threading.Thread(target=work, args=(i,)) for i in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counter.value(worker="all") == threads_n * per_thread
    assert counter.value(worker="0") == counter.value(worker="1") == threads_n * per_thread / 4
    assert m.counter("step_total", "Number of timed step sections.", ["worker"]).value(worker="all") == (
        threads_n * per_thread // 10
    )


def test_timer_adds_seconds_and_one_even_when_the_body_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([10.0, 12.5, 20.0, 20.25])
    monkeypatch.setattr(time, "perf_counter", lambda: next(clock))
    m = Metrics()
    with m.timer("evaluate", party="S_tag"):
        pass
    with pytest.raises(RuntimeError), m.timer("evaluate", party="S_tag"):
        raise RuntimeError("boom")
    lines = m.render().splitlines()
    assert 'evaluate_seconds_total{party="S_tag"} 2.75' in lines
    assert 'evaluate_total{party="S_tag"} 2.0' in lines
    assert "# TYPE evaluate_seconds_total counter" in lines


def test_a_label_may_be_called_name_value_or_amount() -> None:
    m = Metrics()
    m.counter("c_total", "C.", labels=("amount",)).inc(2, amount="x")
    m.gauge("g", "G.", labels=("value",)).set(1, value="y")
    with m.timer("t", name="z"):
        pass
    text = m.render()
    assert 'c_total{amount="x"} 2.0' in text and 'g{value="y"} 1.0' in text and 't_total{name="z"} 1.0' in text


def test_a_counter_cannot_go_down() -> None:
    counter = Metrics().counter("sent_total", "Sent.")
    counter.inc(3)
    for bad in (-1, -0.5, math.nan, math.inf):
        with pytest.raises(InvalidParameterError, match="sent_total"):
            counter.inc(bad)
    assert counter.value() == 3


@pytest.mark.parametrize("name", ["", "1st", "with-dash", "with space", "é", "a.b"])
def test_invalid_metric_names_are_refused(name: str) -> None:
    m = Metrics()
    with pytest.raises(InvalidParameterError, match="metric name"):
        m.counter(name, "x")
    with pytest.raises(InvalidParameterError, match="metric name"):
        m.gauge(name, "x")
    with pytest.raises(InvalidParameterError, match="metric name"), m.timer(name):
        pass


def test_valid_names_include_colons_and_underscores() -> None:
    m = Metrics()
    m.counter("job:requests_total", "x")
    m.gauge("_private", "x")
    assert "job:requests_total 0.0" in m.render() and "_private 0.0" in m.render()


@pytest.mark.parametrize("labels", [("__reserved",), ("a:b",), ("1a",), ("x", "x"), "party"])
def test_invalid_label_names_are_refused(labels: tuple[str, ...]) -> None:
    with pytest.raises(InvalidParameterError, match="label"):
        Metrics().counter("ok_total", "x", labels=labels)


def test_labels_must_match_the_declaration() -> None:
    counter = Metrics().counter("req_total", "x", labels=("party",))
    with pytest.raises(InvalidParameterError, match="party"):
        counter.inc()
    with pytest.raises(InvalidParameterError, match="party"):
        counter.inc(party="proxy", code="200")


def test_redeclaring_returns_the_same_metric_or_refuses_a_different_one() -> None:
    m = Metrics()
    first = m.counter("req_total", "Requests.", labels=("party",))
    assert m.counter("req_total", "Requests.", labels=["party"]) is first
    with pytest.raises(InvalidParameterError, match="already declared as counter"):
        m.gauge("req_total", "Requests.", labels=("party",))
    with pytest.raises(InvalidParameterError, match="already declared"):
        m.counter("req_total", "Requests.", labels=("code",))


def test_gauge_takes_numbers_only() -> None:
    gauge = Metrics().gauge("g", "x")
    for bad in ("3", True, None):
        with pytest.raises(InvalidParameterError, match="g must be a number"):
            gauge.set(bad)  # type: ignore[arg-type]


def test_write_replaces_the_file_with_the_rendering(tmp_path: Path) -> None:
    m = Metrics()
    m.counter("w_total", "x").inc(4)
    target = tmp_path / "fre.prom"
    target.write_text("old\n")
    m.write(target)
    assert target.read_text() == m.render()
    assert [p.name for p in tmp_path.iterdir()] == ["fre.prom"]

"""Counters and gauges of a service, rendered in the Prometheus text exposition format 0.0.4.

The services need only counters, gauges and timed sections, which is a few dozen lines; the
format is small and fixed, so it is written here rather than adding ``prometheus_client`` as a
dependency. Format: https://prometheus.io/docs/instrumenting/exposition_formats/ (text 0.0.4).

One :class:`Metrics` registry per process is shared by all threads; one lock guards every value,
so concurrent updates never lose an increment and :meth:`Metrics.render` sees one consistent state.
Output is sorted (metrics by name, samples by label values) so two renders of the same state are
byte-identical.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

from fre_protocol.drivers.net.files import write_file_atomically
from primitives.errors import InvalidParameterError

__all__ = ["CONTENT_TYPE", "Counter", "Gauge", "Metrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

Kind = Literal["counter", "gauge"]
LabelValues = tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Spec:
    name: str
    help: str
    kind: Kind
    labels: tuple[str, ...]


class _Metric:
    """One named metric: its declaration and a value per combination of label values."""

    __slots__ = ("_label_names", "_lock", "_values", "spec")

    def __init__(self, spec: _Spec, lock: threading.Lock) -> None:
        self.spec = spec
        self._lock = lock
        self._label_names = frozenset(spec.labels)  # compared with every update's labels
        # A metric without labels has exactly one series, present (at 0) from the start.
        self._values: dict[LabelValues, float] = {} if spec.labels else {(): 0.0}

    def value(self, **labels: object) -> float:
        """The current value of the series ``labels`` (0 if it was never touched)."""
        key = self._key(labels)
        with self._lock:
            return self._values.get(key, 0.0)

    def _key(self, labels: dict[str, object]) -> LabelValues:
        if labels.keys() != self._label_names:
            raise InvalidParameterError(
                f"labels of {self.spec.name} must be {sorted(self.spec.labels)}, got {sorted(labels)}"
            )
        return tuple(str(labels[name]) for name in self.spec.labels)

    def _samples(self) -> list[tuple[LabelValues, float]]:
        return sorted(self._values.items())


class Counter(_Metric):
    """A value that only goes up (requests served, seconds spent)."""

    __slots__ = ()

    def inc(self, amount: float = 1, /, **labels: object) -> None:
        """Add ``amount`` (finite, >= 0) to the series ``labels``."""
        value = _number(amount, "amount added to", self.spec.name)
        if not (math.isfinite(value) and value >= 0):
            raise InvalidParameterError(
                f"amount added to counter {self.spec.name} must be finite and >= 0, got {amount!r}"
            )
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + value


class Gauge(_Metric):
    """A value that is set (queue length, phase, last batch size)."""

    __slots__ = ()

    def set(self, value: float, /, **labels: object) -> None:
        number = _number(value, "value of gauge", self.spec.name)
        key = self._key(labels)
        with self._lock:
            self._values[key] = number


M = TypeVar("M", Counter, Gauge)


class Metrics:
    """A thread-safe registry of counters and gauges, rendered as Prometheus text."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._metrics: dict[str, _Metric] = {}

    def counter(self, name: str, help: str, labels: Sequence[str] = ()) -> Counter:
        """The counter ``name``, declared on first use; declaring it again identically returns it."""
        return self._declare(_spec(name, help, "counter", labels), Counter)

    def gauge(self, name: str, help: str, labels: Sequence[str] = ()) -> Gauge:
        """The gauge ``name``, declared on first use; declaring it again identically returns it."""
        return self._declare(_spec(name, help, "gauge", labels), Gauge)

    @contextmanager
    def timer(self, name: str, /, **labels: object) -> Iterator[None]:
        """Time the ``with`` body: add its seconds to ``<name>_seconds_total`` and 1 to
        ``<name>_total``, both with ``labels``. A body that raises is counted too: its time was
        spent all the same."""
        _check_metric_name(name)
        names = sorted(labels)
        seconds = self.counter(f"{name}_seconds_total", f"Seconds spent in {name}.", names)
        count = self.counter(f"{name}_total", f"Number of timed {name} sections.", names)
        start = time.perf_counter()
        try:
            yield
        finally:
            seconds.inc(time.perf_counter() - start, **labels)
            count.inc(1, **labels)

    def render(self) -> str:
        """Every metric as text exposition 0.0.4: ``# HELP``, ``# TYPE``, then one line a series."""
        lines: list[str] = []
        with self._lock:
            for name in sorted(self._metrics):
                metric = self._metrics[name]
                spec = metric.spec
                lines.append(f"# HELP {name} {_escape_help(spec.help)}")
                lines.append(f"# TYPE {name} {spec.kind}")
                for values, value in metric._samples():
                    lines.append(f"{name}{_label_set(spec.labels, values)} {_format_value(value)}")
        return "".join(line + "\n" for line in lines)

    def write(self, path: Path) -> None:
        """Write :meth:`render` to ``path`` in one step (for a node exporter's textfile collector,
        which must never read half a file). World-readable: metrics are not secret."""
        write_file_atomically(Path(path), self.render().encode("utf-8"), mode=0o644)

    def _declare(self, spec: _Spec, cls: type[M]) -> M:
        with self._lock:
            existing = self._metrics.get(spec.name)
            if existing is None:
                metric = cls(spec, self._lock)
                self._metrics[spec.name] = metric
                return metric
        # Equal specs have equal kinds, so the existing metric is of class ``cls``.
        if existing.spec == spec and isinstance(existing, cls):
            return existing
        raise InvalidParameterError(
            f"metric {spec.name} is already declared as {existing.spec.kind} with labels "
            f"{list(existing.spec.labels)} and help {existing.spec.help!r}, got {spec.kind} "
            f"with labels {list(spec.labels)} and help {spec.help!r}"
        )


def _check_metric_name(name: str) -> None:
    if not isinstance(name, str) or not _METRIC_NAME.fullmatch(name):
        raise InvalidParameterError(f"metric name must match {_METRIC_NAME.pattern}, got {name!r}")


def _spec(name: str, help: str, kind: Kind, labels: Sequence[str]) -> _Spec:
    _check_metric_name(name)
    if isinstance(labels, str):
        raise InvalidParameterError(f"labels of {name} must be a sequence of names, got the string {labels!r}")
    for label in labels:
        # Names starting with "__" are reserved for Prometheus itself.
        if not isinstance(label, str) or not _LABEL_NAME.fullmatch(label) or label.startswith("__"):
            raise InvalidParameterError(
                f"label name of {name} must match {_LABEL_NAME.pattern} without a leading '__', got {label!r}"
            )
    if len(set(labels)) != len(labels):
        raise InvalidParameterError(f"label names of {name} must be distinct, got {list(labels)}")
    return _Spec(name=name, help=str(help), kind=kind, labels=tuple(labels))


def _number(value: object, what: str, name: str) -> float:
    """``value`` as a float; the message (``what`` ``name`` must be a number) is only built for
    a refusal, since services count every request they answer."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidParameterError(f"{what} {name} must be a number, got {value!r}")
    return float(value)


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label_value(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _label_set(names: tuple[str, ...], values: LabelValues) -> str:
    if not names:
        return ""
    return "{" + ",".join(f'{n}="{_escape_label_value(v)}"' for n, v in zip(names, values, strict=True)) + "}"


def _format_value(value: float) -> str:
    # The format's spellings of the non-finite values; repr gives the shortest exact decimal.
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)

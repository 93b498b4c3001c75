"""The one canonical JSON form of every value fre-e2t writes (bytes as hex).

Every layer that writes JSON — the privacy ledger and release files (``mechanism``), transcript
headers, artifacts and audit reports (``transcripts``), and a synthesis run's outputs
(``fre_protocol``) — turns its values into strict JSON here, so a value is spelled the same in
every file:

* ``None``, ``bool`` and ``str`` as they are;
* ``int`` and numpy integers as ``int``; ``float`` and numpy floats as ``float``, except that the
  non-finite ones become the strings ``"inf"``, ``"-inf"`` and ``"nan"`` (strict JSON has no such
  numbers; :func:`mechanism.ledger.parse_float` reads them back);
* numpy arrays and other numpy scalars through ``tolist()``; tuples as lists;
* ``bytes`` (and ``bytearray``, ``memoryview``) as lower-case hex;
* paths (``os.PathLike``) as their string;
* mappings as ``dict`` with ``str`` keys: numbers and bytes as keys are spelled as above (``json``
  itself turns ``1`` into ``"1"``); two keys that collide that way are refused. With
  ``str_keys=True`` only ``str`` keys are accepted, for documents that must read back exactly.

Anything else is refused with :class:`~primitives.errors.InvalidInputError`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from primitives.errors import InvalidInputError

__all__ = ["json_safe"]


def json_safe(value: Any, *, where: str = "value", str_keys: bool = False) -> Any:
    """``value`` in its canonical strict-JSON form (module docstring); ``where`` names it in errors."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return _float(float(value))
    if isinstance(value, np.ndarray | np.generic):
        return json_safe(value.tolist(), where=where, str_keys=str_keys)
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = _key(key, where=where, str_keys=str_keys)
            if name in out:
                raise InvalidInputError(f"{where} has two keys spelled {name!r} in JSON")
            out[name] = json_safe(item, where=f"{where}[{name!r}]", str_keys=str_keys)
        return out
    if isinstance(value, list | tuple):
        return [json_safe(item, where=f"{where}[{i}]", str_keys=str_keys) for i, item in enumerate(value)]
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise InvalidInputError(
        f"{where} must be JSON-safe (dict, list, str, int, float, bool, None, bytes, path or numpy), "
        f"got {type(value).__name__}"
    )


def _float(v: float) -> float | str:
    if math.isfinite(v):
        return v
    return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")


def _key(key: Any, *, where: str, str_keys: bool) -> str:
    if isinstance(key, str):
        return key
    if str_keys or isinstance(key, bool) or not isinstance(key, int | float | np.number | bytes):
        raise InvalidInputError(f"{where} keys must be str, got {type(key).__name__} key {key!r}")
    return str(json_safe(key, where=where))

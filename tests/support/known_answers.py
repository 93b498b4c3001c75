"""Known-answer vector files (tests/vectors) and the one way tests read them: with their
recorded sha256, so a changed file fails loudly instead of silently testing something else."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1] / "vectors"
#: Vector files that ship with the package, because the public conformance suite
#: (:mod:`fre_protocol.testing.conformance`) runs them from an installed copy too.
PACKAGED = ("rfc9497/",)

#: sha256 of each vector file, as recorded in its README.
SHA256 = {
    "compact/broadcast.json": "6025e8a48243da73c247f4e652a17058bb63d928addc64477386b4bf96974367",
    "ddg_plan/plans.json": "089567b2bbc517249e11ce6101d34ba3ee9e189b7a4fadfbe2e297a040b624ec",
    "embedding/minilm.json": "f1668f25b278a4e1dadcd8c53ce9828b9adbd45947665cb442755099d8d2865c",
    "protocol/dp_noise.json": "5291145a92a583fdfc4f4684d226bb021a9afac4e75cc6dc68e15df4c536f899",
    "protocol/noiseless.json": "98fa9076fd130a6a48ee8f2c1bf269470045df4d6694e3ecdd56e96684821a9d",
    "rfc9380/expand_message_xmd_sha512.json": "c015dbd315369b331c762bad0b180536632fbb2bd58cdf42ffdd1135d0c89db4",
    "rfc9496/ristretto255.json": "dca1409417a264533ac5378aa39f1274194c3e33380d53832dcaeb83a62745f5",
    "user/device.json": "ad2c3d6213bf8d58a5fe70e9cd7d7680fefc3ff25d66cea7b3d5149c7d44b528",
}


def load(relative: str) -> dict[str, Any]:
    """The parsed vector file ``relative`` (under tests/vectors), after checking its sha256."""
    if relative.startswith(PACKAGED):
        from fre_protocol.testing import vectors

        return vectors.load(relative)
    data = (ROOT / relative).read_bytes()
    assert hashlib.sha256(data).hexdigest() == SHA256[relative], f"{relative} changed"
    loaded: dict[str, Any] = json.loads(data)
    return loaded


def render(value: Any, depth: int = 0) -> str:
    """JSON with sorted keys, one line per container of scalars (an operation, an embedding row),
    so a vector file stays small and a regenerated one diffs line by line."""
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    if not any(isinstance(v, dict | list) for v in items):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    pad, inner = " " * depth, " " * (depth + 1)
    if isinstance(value, dict):
        body = ",\n".join(f"{inner}{json.dumps(k)}: {render(value[k], depth + 1)}" for k in sorted(value))
        return "{\n" + body + "\n" + pad + "}"
    return "[\n" + ",\n".join(inner + render(v, depth + 1) for v in value) + "\n" + pad + "]"


def write_vector(path: Path, data: Any) -> None:
    """Write a generator's vector file (:func:`render`) and print its sha256 line for the README
    and :data:`SHA256`."""
    text = render(data) + "\n"
    path.write_text(text, encoding="utf-8")
    print(f"- `{path.name}`: `{hashlib.sha256(text.encode()).hexdigest()}` ({len(text)} bytes)")

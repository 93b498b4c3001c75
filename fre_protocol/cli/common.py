"""Flags and file handling shared by the sub-commands that run a release."""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from fre_protocol.inputs import load_embeddings, load_user_labels
from fre_protocol.outputs import prepare_out_dir, write_json_atomic, write_npy_atomic
from fre_protocol.text.seed_sources import DEFAULT_SEEDS_FROM, SEEDS_FROM
from mechanism.contributions import TEXT_UNIT, PrivacyUnit, dense_users, estimate_cap
from mechanism.params import FreParams
from mechanism.seeds import SeedPlan
from primitives.errors import InvalidParameterError

# The output writers (fre_protocol.outputs) and the embeddings reader (fre_protocol.inputs) are
# used by the library too; named here for the sub-commands that import them from this module.
__all__ = [
    "NO_EMBEDDER", "CliParser", "HelpFormatter", "add_component_flag", "add_embedder_flag", "round_embedder",
    "with_embedder", "add_deprecated_alias", "components_of", "add_progress_flag",
    "add_param_flags", "add_unit_flags", "load_embeddings", "parse_cap", "privacy_unit", "non_negative_int", "params_from_args", "parse_epsilon",
    "positive_int", "prepare_out_dir", "write_json_atomic", "write_npy_atomic",
]


def parse_epsilon(text: str) -> float:
    if text.strip().lower() in ("inf", "infinity", "∞"):
        return math.inf
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0 or 'inf', got {text!r}") from None
    return value


def _integer_at_least(text: str, minimum: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


def pool_size(text: str) -> int | None:
    """argparse type of ``--pool-max``: an integer >= 1, or 'all' / 0 for no cap (None)."""
    from fre_protocol.text.public_pool import parse_max_texts

    try:
        return parse_max_texts(text, "the pool size")
    except InvalidParameterError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0 (seeds, counts)."""
    return _integer_at_least(text, 0, "a non-negative integer")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (sizes, worker counts)."""
    return _integer_at_least(text, 1, "a positive integer")


def fraction(text: str) -> float:
    """A number in [0, 1) (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1), got {text!r}") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1), got {text!r}")
    return value


def add_noise_flags(parser: argparse.ArgumentParser) -> None:
    """How many contributors each user's DDG noise is sized for, and the accountant that sizes it
    (design §4.4)."""
    from fre_protocol.roles.config import DEFAULT_DROPOUT_ALLOWANCE, NOISE_CALIBRATIONS
    from primitives.ddg.encoder import ACCOUNTANTS, DEFAULT_ACCOUNTANT

    parser.add_argument("--noise-calibration", choices=NOISE_CALIBRATIONS, default=NOISE_CALIBRATIONS[0],
                        help="'count' (default): a user in released bucket h sizes its DDG noise for "
                        "m_h = max(⌈τ⌉, ⌊(1 - F)·n_h⌋) contributors, n_h the bucket's released count; "
                        "'floor': for ⌈τ⌉ contributors whatever the count (the paper's protocol)")
    parser.add_argument("--dropout-allowance", type=fraction, default=DEFAULT_DROPOUT_ALLOWANCE, metavar="F",
                        help="with --noise-calibration count: the fraction of a released bucket's "
                        "submitters that may drop out before the dropout policy acts; each user's noise "
                        f"grows by sqrt(1/(1 - F)) (default {DEFAULT_DROPOUT_ALLOWANCE}: best under topup; "
                        "under withhold choose F above the devices' dropout rate)")
    parser.add_argument("--ddg-accountant", choices=ACCOUNTANTS, default=DEFAULT_ACCOUNTANT,
                        help="the bound that sizes the users' DDG noise: 'analytic' (default): the smaller "
                        "epsilon of KLS21's RDP bound and the analytic bound (the centralized mechanism's "
                        "sigma to within 0.1%%); 'rdp': KLS21 alone (the paper's protocol)")


def add_dropout_flags(parser: argparse.ArgumentParser, *, simulated: bool) -> None:
    """What S_tag does with a released bucket whose users went offline between the phases (design
    §4.4), and, where the users are simulated, how many go offline."""
    from fre_protocol.roles.base import DROPOUT_POLICIES
    from fre_protocol.roles.config import DEFAULT_DROPOUT_POLICY

    parser.add_argument("--dropout-policy", choices=DROPOUT_POLICIES, default=DEFAULT_DROPOUT_POLICY,
                        help="a released bucket left with fewer phase-2 contributors than its noise was "
                        "sized for: let S_tag top up the missing users' noise, or withhold its centroid "
                        "(then give --dropout-allowance above the devices' dropout rate, or most buckets "
                        f"with a dropout are withheld) (default {DEFAULT_DROPOUT_POLICY})")
    if simulated:
        parser.add_argument("--dropout", type=fraction, default=0.0, metavar="FRACTION",
                            help="fraction of users that go offline between the two phases, drawn "
                            "independently of their texts (simulated; default 0)")


def add_param_flags(parser: argparse.ArgumentParser, *, defaults: FreParams | None = None) -> None:
    """The public parameters of a release, named as in the paper (design §3)."""
    d = defaults or FreParams()
    g = parser.add_argument_group("privacy and grid parameters")
    g.add_argument("--epsilon", type=parse_epsilon, default=d.epsilon, help="total ε ('inf' = non-DP)")
    g.add_argument("--delta", type=float, default=d.delta, help="total δ")
    g.add_argument("--radius", type=float, default=d.radius, help="neighbourhood radius r")
    g.add_argument("--threshold", type=int, default=d.threshold, help="frequency threshold t")
    g.add_argument("--k", type=int, default=d.k, help="projected dimension k")
    g.add_argument("--p-sample", type=float, default=d.p_sample, help="sampling rate p_s")
    g.add_argument("--budget-factor", type=float, default=d.budget_factor, help="Lemma 1 factor v")
    g.add_argument(
        "--sensitivity-ratio", type=float, default=d.sensitivity_ratio, help="u in Δ = min(u·r, 2C)"
    )
    g.add_argument(
        "--edge-multiplier", type=float, default=d.edge_multiplier, help="m_L in L = m_L·2r/√k"
    )
    g.add_argument("--rounding", choices=["exact", "paper"], default=d.rounding,
                   help="the analytic Gaussian's noise multiplier: 'exact' uses m* as computed, 'paper' "
                   "rounds it up to two decimals as the paper does (Algorithm 3)")
    g.add_argument(
        "--clip", type=float, default=d.clip, metavar="C",
        help="L2 clip C of each embedding (1 = unit norm): caps the sensitivity at Δ = min(u·r, 2C)",
    )


def add_pool_flags(group: argparse._ArgumentGroup) -> None:
    """The public pool's flags (retrieval's index and the guided search's seeds)."""
    from fre_protocol.text.public_pool import DEFAULT_MAX_TEXTS

    group.add_argument("--pool-file", action="append", default=[], metavar="FILE",
                       help="extra PUBLIC texts for the pool (.txt/.jsonl/.csv; repeatable); refused when it is "
                            "the private input or shares more than 1%% of its texts with it (default: none)")
    group.add_argument("--pool-field", metavar="NAME", help="field/column of --pool-file (default: text)")
    group.add_argument("--pool-sources", default="news,wordnet",
                       help="built-in public pool sources, comma separated, or 'none' (default: news,wordnet)")
    group.add_argument("--pool-max", type=pool_size, default=DEFAULT_MAX_TEXTS, metavar="N",
                       help="size of the public pool: built-in texts kept, evenly spaced per source "
                            f"('all' or 0 = every one; default {DEFAULT_MAX_TEXTS})")


def add_seeds_from_flag(group: argparse._ArgumentGroup) -> None:
    """``--seeds-from``: where the guided search starts (``GuidedInverter(seeds_from=...)``)."""
    group.add_argument("--seeds-from", choices=SEEDS_FROM, default=DEFAULT_SEEDS_FROM,
                       help="guided only: where the search starts: the learned generator's draft (prefix), "
                            "the nearest readable pool text (retrieval), or the closer of the two (both); "
                            "auto (default): prefix with the packaged embedder, retrieval with another")


def pool_sources(args: argparse.Namespace) -> tuple[str, ...]:
    """``--pool-sources`` as a tuple ('none' = no built-in source)."""
    return tuple(s.strip() for s in args.pool_sources.split(",") if s.strip() and s.strip() != "none")


def params_from_args(args: argparse.Namespace) -> FreParams:
    p_sample = args.p_sample
    if math.isinf(args.epsilon):
        p_sample = 1.0
    return FreParams(
        epsilon=args.epsilon,
        delta=args.delta,
        radius=args.radius,
        threshold=args.threshold,
        k=args.k,
        p_sample=p_sample,
        budget_factor=args.budget_factor,
        sensitivity_ratio=args.sensitivity_ratio,
        edge_multiplier=args.edge_multiplier,
        rounding=args.rounding,
        clip=args.clip,
    )


# -- the unit of privacy (design §4.6) ----------------------------------------------------------------
#: c when a user field is named without --cap: one bucket per user, so the ε given is what a
#: person gets, at no extra cost; prolific users then weigh as much as everyone else.
DEFAULT_CAP = 1
#: What --cap auto spends on its DP histogram of texts per user (σ ≈ 10 users per bin).
DEFAULT_CAP_EPSILON = 0.5
DEFAULT_CAP_DELTA = 1e-8


def parse_cap(text: str) -> int | str:
    """argparse type of ``--cap``: an integer >= 1, or ``auto``."""
    if text.strip().lower() == "auto":
        return "auto"
    return _integer_at_least(text, 1, "an integer >= 1 or 'auto'")


def add_unit_flags(parser: argparse.ArgumentParser, *, user_field_help: str) -> None:
    """Who one user is: ``--user-field``, ``--cap C|auto`` and what ``auto`` may spend."""
    g = parser.add_argument_group("unit of privacy (who one user is)")
    g.add_argument("--user-field", metavar="NAME", help=user_field_help)
    g.add_argument(
        "--cap", type=parse_cap, metavar="C|auto",
        help=f"buckets one user contributes to, at most one text each (default {DEFAULT_CAP}); the "
        "per-user guarantee is about c times the per-contribution one; 'auto' picks c as the 0.9-quantile "
        "of a DP histogram of texts per user, paid with --cap-epsilon/--cap-delta",
    )
    g.add_argument("--cap-epsilon", type=float, metavar="E",
                   help=f"epsilon of --cap auto's histogram (default {DEFAULT_CAP_EPSILON})")
    g.add_argument("--cap-delta", type=float, metavar="D",
                   help=f"delta of --cap auto's histogram (default {DEFAULT_CAP_DELTA:g})")


def privacy_unit(
    args: argparse.Namespace,
    users: Sequence[str] | None,
    seeds: SeedPlan,
    *,
    log: Callable[[str], None] = print,
) -> PrivacyUnit:
    """The unit of ``args`` (``--user-field``, ``--cap``), with ``users`` the per-text labels
    read from the user field. ``--cap auto`` draws its estimate from ``seeds`` and records its
    cost in the unit."""
    auto_only = [flag for flag, value in (("--cap-epsilon", args.cap_epsilon), ("--cap-delta", args.cap_delta))
                 if value is not None]
    if auto_only and args.cap != "auto":
        raise InvalidParameterError(f"{' and '.join(auto_only)} apply to --cap auto only, got --cap {args.cap}")
    if args.user_field is None or users is None:
        if args.cap is not None:
            raise InvalidParameterError(
                "--cap bounds what one user contributes: it needs --user-field naming whose each text is"
            )
        return TEXT_UNIT
    if args.cap != "auto":
        return PrivacyUnit(kind="user", cap=args.cap or DEFAULT_CAP, user_field=args.user_field)
    owners, n_users = dense_users(np.asarray(users), len(users))
    estimate = estimate_cap(
        np.bincount(owners, minlength=n_users),
        epsilon=DEFAULT_CAP_EPSILON if args.cap_epsilon is None else args.cap_epsilon,
        delta=DEFAULT_CAP_DELTA if args.cap_delta is None else args.cap_delta,
        seeds=seeds,
    )
    log(f"--cap auto: c = {estimate.cap} (the {estimate.quantile:g}-quantile of a DP histogram of texts per "
        f"user, at (epsilon={estimate.epsilon:g}, delta={estimate.delta:g}) added to the per-user guarantee)")
    return estimate.unit(args.user_field)


def add_users_flags(parser: argparse.ArgumentParser) -> None:
    """``--user-labels FILE`` (whose each embedding row is) with the unit flags of :func:`add_unit_flags`."""
    parser.add_argument(
        "--user-labels", metavar="FILE",
        help="whose each embedding row is, in row order: a .npy array or a .txt of one label per line, or a "
        ".jsonl/.csv with --user-field naming the column (default: every row is its own user)",
    )
    add_deprecated_alias(parser, "--users", "--user-labels")
    add_unit_flags(parser, user_field_help="the column of a .jsonl/.csv --user-labels file naming each row's user "
                   "(default: none; a .npy/.txt file has no columns)")


def users_and_unit(
    args: argparse.Namespace, rows: int, seeds: SeedPlan, *, log: Callable[[str], None] = print
) -> tuple[list[str] | None, PrivacyUnit]:
    """The per-row user labels of ``--user-labels`` (None without it) and the unit of privacy they make
    with ``--user-field``/``--cap`` (:func:`privacy_unit`)."""
    users = None
    if args.user_labels is not None:
        users = load_user_labels(args.user_labels, rows, field=args.user_field)
        args.user_field = args.user_field or "user"  # a .npy/.txt names no column: its labels are the users
    elif args.user_field is not None:
        raise InvalidParameterError("--user-field names a column of the --user-labels file; give --user-labels")
    return users, privacy_unit(args, users, seeds, log=log)


# -- the swappable components (design §5, docs/library.md) ---------------------------------------------
def add_component_flag(
    parser: argparse.ArgumentParser, *, group: argparse._ArgumentGroup | None = None, what: str = "",
    absent: str = "every family takes its default",
) -> None:
    """``--component FAMILY=NAME`` (repeatable): the registry name of one family's component. The
    names are checked right after parsing, plug-ins included (``fre-e2t components`` lists them):
    an unknown one stops the command before any work with one line and exit status 2."""
    (group or parser).add_argument(
        "--component", action="append", default=[], metavar="FAMILY=NAME", dest="component",
        help=what + "use the component registered as NAME for FAMILY, e.g. shuffler=uniform; repeatable, one per "
        "family; plug-ins of installed packages included (`fre-e2t components` lists them) "
        f"(default: none; {absent})",
    )
    if hasattr(parser, "settle"):  # a CliParser: checked right after parsing (else by components_of)
        parser.settle.append(settle_components)


def _checked_components(given: Sequence[str]) -> dict[str, str] | None:
    from fre_protocol.components import component_names, parse_component

    overrides: dict[str, str] = {}
    for text in given:
        family, name = parse_component(text)
        if family in overrides and overrides[family] != name:
            raise InvalidParameterError(f"--component names {family} twice ({overrides[family]!r} and {name!r}); give one")
        overrides[family] = name
    if overrides:
        component_names(overrides)  # UnknownComponentError listing the known names, plug-ins included
    return overrides or None


def settle_components(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``args.component`` (a list of FAMILY=NAME) becomes ``args.components``, a checked mapping
    ``family -> name`` (None when no flag was given); a bad one exits 2 with one line."""
    from primitives.errors import FreError

    given = vars(args).pop("component", None)
    if given is None:  # settled already (argparse parses a sub-command's namespace twice)
        return
    try:
        args.components = _checked_components(given)
    except FreError as exc:
        parser.exit(2, f"{parser.prog}: error: --component: {exc}\n")


def components_of(args: argparse.Namespace) -> dict[str, str] | None:
    """The ``--component`` overrides of ``args`` (None: every default); checked here when the
    parser was not a :class:`CliParser` (a FreError then: one line, exit 2, from ``main``)."""
    if hasattr(args, "components"):
        return args.components  # type: ignore[no-any-return]
    return _checked_components(getattr(args, "component", None) or [])


def with_components(settings: Any, args: argparse.Namespace) -> Any:
    """Round settings (``serve``/``users``: read from a configuration file) with the
    ``--component`` overrides of ``args`` applied; the other families keep the file's names."""
    import dataclasses

    from fre_protocol.components import component_names

    overrides = components_of(args)
    if not overrides:
        return settings
    return dataclasses.replace(settings, components=component_names({**settings.components, **overrides}))


#: ``--embedder none``: the round names no embedder (its devices bring their embedding).
NO_EMBEDDER = "none"


def add_embedder_flag(parser: argparse.ArgumentParser, *, absent: str) -> None:
    """``--embedder NAME_OR_DIR|none``: the model a round's embeddings come from, which the round
    document names (``deploy-local``, ``serve``)."""
    parser.add_argument(
        "--embedder", metavar="NAME_OR_DIR", default=None,
        help="the sentence-transformers model (name or folder) that made the round's embeddings, named in the "
        "round document so every device embeds with it; its dimension must be the round's; "
        f"'{NO_EMBEDDER}': the round names no embedder (devices bring their embedding) (default: {absent})",
    )


def round_embedder(name: str | None, dim: int) -> Any:
    """The :class:`~fre_protocol.drivers.net.round.EmbedderSpec` a round names for ``--embedder
    name`` (None: the packaged default where ``dim`` is its dimension, else no embedder;
    ``"none"``: no embedder, None). A model folder is named by
    its content fingerprint, a model name as given; the default's dimension is checked against
    ``dim`` here, another model's when a device embeds with it (``fre-e2t join``)."""
    from fre_protocol.drivers.net.round import EmbedderSpec
    from fre_protocol.text.embedder import DEFAULT_MODEL_DIM, DEFAULT_MODEL_ID, model_id

    if name == NO_EMBEDDER:
        return None
    if name is None and dim != DEFAULT_MODEL_DIM:
        # Embeddings the default model cannot have made (synthetic ones, say): the round names
        # none rather than refusing a run the user did not ask to bind to a model.
        return None
    mid = model_id(name)
    if mid == DEFAULT_MODEL_ID and dim != DEFAULT_MODEL_DIM:
        raise InvalidParameterError(
            f"--embedder: the embedder {DEFAULT_MODEL_ID} gives "
            f"{DEFAULT_MODEL_DIM}-dimensional embeddings, but the round's dim (the embeddings') is {dim}; pass "
            f"--embedder NAME_OR_DIR naming the model that made them, or --embedder {NO_EMBEDDER} for a round that "
            "names no embedder (its devices then bring their embedding: join --embedding)"
        )
    return EmbedderSpec(name=mid, dim=dim, normalize=True)


def with_embedder(settings: Any, args: argparse.Namespace) -> Any:
    """Round settings (``serve``: read from a configuration file) with ``--embedder`` applied, when given."""
    import dataclasses

    name = getattr(args, "embedder", None)
    if name is None:
        return settings
    return dataclasses.replace(settings, embedder=round_embedder(name, settings.dim))


# -- one vocabulary of flags (docs/cli.md) -------------------------------------------------------------
class HelpFormatter(argparse.HelpFormatter):
    """Appends each option's default to its help, unless the help already states one.

    Plain switches (off unless given) and required options have no default to show; an option
    whose default is None must say in its help what its absence means (tests/fre_protocol/test_cli_flags.py).
    """

    STATES_DEFAULT = re.compile(r"[(;] ?default\b|default:", re.IGNORECASE)  # "(default 2)", "; default 0"

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help
        if not text or text == argparse.SUPPRESS or self.STATES_DEFAULT.search(text):
            return text
        shown = default_text(action)
        return text if shown is None else f"{text} (default: {shown.replace('%', '%%')})"


def default_text(action: argparse.Action) -> str | None:
    """How ``--help`` writes the default of ``action``; None where it has none to show."""
    value = action.default
    if action.required or value is None or value is argparse.SUPPRESS:
        return None
    if isinstance(action, argparse.BooleanOptionalAction):
        return "on" if value else "off"
    if action.nargs == 0:  # a plain switch
        return None
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value) if value else None
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


class CliParser(argparse.ArgumentParser):
    """The command's parser: help with defaults, and hooks (``settle``) that run after parsing,
    for flags whose old spellings combine into one new choice (``simulate --driver``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        self.settle: list[Callable[[argparse.ArgumentParser, argparse.Namespace], None]] = []

    def parse_known_args(  # type: ignore[override]  # one signature for argparse's overloads
        self, args: Any = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, rest = super().parse_known_args(args, namespace)
        for hook in self.settle:
            hook(self, parsed)
        return parsed, rest


def deprecation_note(prog: str, old: str, use: str) -> None:
    """The one line an old spelling prints (``prog``: ``fre-e2t CMD``) before it acts as the new one."""
    print(f"{prog}: {old} is deprecated; use {use}", file=sys.stderr)


class _DeprecatedAlias(argparse.Action):
    def __init__(self, option_strings: list[str], dest: str, *, use: str | Callable[[Any], str],
                 act: Callable[[argparse.ArgumentParser, argparse.Namespace, Any], None], **kwargs: Any) -> None:
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kwargs)
        self.use, self.act = use, act

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        use = self.use(values) if callable(self.use) else self.use
        deprecation_note(parser.prog, option_string or self.option_strings[0], use)
        self.act(parser, namespace, values)


def add_deprecated_alias(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    old: str,
    new: str,
    *,
    act: Callable[[argparse.ArgumentParser, argparse.Namespace, Any], None] | None = None,
    use: str | Callable[[Any], str] | None = None,
    **kwargs: Any,
) -> None:
    """A hidden ``old`` spelling, kept for one release: it prints one deprecation line to stderr
    (``fre-e2t CMD: OLD is deprecated; use NEW``), then acts exactly as the option ``new`` (an
    option string already added, e.g. ``--user-labels`` or ``--no-progress``) given the same
    values. ``act`` (with ``kwargs`` for nargs, choices, ...) replaces that for an old flag that
    maps onto a new choice, and ``use`` (a string, or a function of the values) then says what
    to write instead (default: ``new``)."""
    if act is None:
        target = parser._option_string_actions[new]
        takes_no_value = isinstance(target, argparse.BooleanOptionalAction) or target.nargs == 0  # --no-progress
        kwargs = {"nargs": 0} if takes_no_value else {
            "nargs": target.nargs, "type": target.type, "choices": target.choices, "metavar": target.metavar,
        }

        def act(p: argparse.ArgumentParser, ns: argparse.Namespace, values: Any) -> None:
            target(p, ns, values, new)

    # The alias sets nothing itself (no dest, no default): ``act`` does, as the new spelling would.
    parser.add_argument(old, action=_DeprecatedAlias, use=use or new, act=act, dest=argparse.SUPPRESS,
                        default=argparse.SUPPRESS, **kwargs)


def add_progress_flag(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, default: bool,
                      quiet_alias: bool = False) -> None:
    """``--progress/--no-progress``, the one progress switch of every command; ``quiet_alias``
    keeps the old ``--quiet`` (= ``--no-progress``) of the text commands for one release."""
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=default,
                        help="show progress bars")
    if quiet_alias:
        add_deprecated_alias(parser, "--quiet", "--no-progress")

"""Checking a component against its family's contract (design §5).

Each registry family has one :class:`typing.Protocol` that lists what the protocol calls on its
components and nothing else (:data:`FAMILY_PROTOCOLS`). :func:`check_component` compares a built
component — or, before it is built, its factory class — with that Protocol by name and arity, so a
component missing a method, or taking the wrong arguments, is refused with
:class:`~primitives.errors.ComponentContractError` when the run's components are built, before
any work, rather than as an ``AttributeError`` halfway through a round.

The check is structural and cheap (no call is made): a method must exist, be callable, accept
every positional argument the Protocol passes and every keyword the Protocol names, and require
no argument the Protocol does not pass. Data attributes (``name``, ``modulus``, ``config``, …)
must exist on a built component; on a factory class they are not checked, since instance fields
appear only when it is built. Properties of behaviour — that shares reconstruct, that a shuffle is
uniform — are the conformance suite's business (:mod:`fre_protocol.testing.conformance`).
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from primitives.errors import ComponentContractError, UnknownComponentError

#: family -> "module:attribute" of its Protocol (imported on first use, like the registry).
FAMILY_PROTOCOLS: dict[str, str] = {
    "group": "primitives.group:PrimeOrderGroup",
    "oprf": "primitives.voprf:Oprf",
    "secret_sharing": "primitives.sharing:SecretSharing",
    "discrete_gaussian": "primitives.noise.base:DiscreteGaussianSampler",
    "ddg_encoder": "primitives.ddg.encoder:Encoder",
    "dummy_generator": "primitives.dummies:DummyGenerator",
    "shuffler": "primitives.shuffle:Shuffler",
    "channel": "primitives.channel:Channel",
    "broadcast": "primitives.compact.broadcast:BroadcastEncoding",
}

# Names every Protocol class carries that are not part of a contract.
_IGNORED = frozenset({"_is_protocol", "_is_runtime_protocol", "_abc_impl", "__protocol_attrs__"})


def protocol_of(family: str) -> type:
    """The Protocol class of ``family``."""
    if family not in FAMILY_PROTOCOLS:
        raise UnknownComponentError(
            f"family must be one of {sorted(FAMILY_PROTOCOLS)}, got {family!r}"
        )
    module_name, _, attribute = FAMILY_PROTOCOLS[family].partition(":")
    protocol: type = getattr(importlib.import_module(module_name), attribute)
    return protocol


def contract_members(protocol: type) -> tuple[dict[str, inspect.Signature], tuple[str, ...]]:
    """``(methods, attributes)`` of a Protocol: each method's signature (without ``self``), and the
    names of its data attributes and properties."""
    methods: dict[str, inspect.Signature] = {}
    attributes: list[str] = []
    for klass in reversed(protocol.__mro__):
        if klass is object or not getattr(klass, "_is_protocol", False) or klass.__name__ in {"Protocol", "Generic"}:
            continue
        for member, value in vars(klass).items():
            if member in _IGNORED or (member.startswith("__") and member not in {"__len__"}):
                continue
            if isinstance(value, property):
                attributes.append(member)
            elif inspect.isfunction(value):
                signature = inspect.signature(value)
                methods[member] = signature.replace(parameters=list(signature.parameters.values())[1:])
        for member in getattr(klass, "__annotations__", {}):
            if not member.startswith("_"):
                attributes.append(member)
    return methods, tuple(dict.fromkeys(a for a in attributes if a not in methods))


def _arity_problem(wanted: inspect.Signature, method: Any, *, unbound: bool = False) -> str | None:
    """Why ``method`` cannot be called the ways ``wanted`` allows, or None. Three calls are tried
    (by binding, nothing runs): the required arguments alone, every argument positionally, and the
    required ones positionally with the optional ones by name. ``unbound``: ``method`` is a
    function on a class, so a placeholder ``self`` goes first."""
    try:
        have = inspect.signature(method)
    except (TypeError, ValueError):  # a builtin without a signature: nothing to compare
        return None
    lead = (None,) if unbound else ()
    want = list(wanted.parameters.values())
    positional = [p.name for p in want if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p.name for p in want if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
    optional = [p.name for p in want if p.kind is p.POSITIONAL_OR_KEYWORD and p.default is not p.empty]
    keywords = {p.name: None for p in want if p.kind is p.KEYWORD_ONLY}
    required_keywords = {p.name: None for p in want if p.kind is p.KEYWORD_ONLY and p.default is p.empty}
    calls = {
        f"({', '.join(required + list(required_keywords))})": ((*lead, *required), required_keywords),
        f"({', '.join(positional + list(keywords))}) positionally": ((*lead, *positional), keywords),
        f"({', '.join(required)}) with {', '.join(optional + list(keywords))} by name": (
            (*lead, *required), {**dict.fromkeys(optional), **keywords}
        ),
    }
    for described, (args, kwargs) in calls.items():
        try:
            have.bind(*args, **kwargs)
        except TypeError as exc:
            return f"cannot be called as {described}: {exc}"
    return None


def contract_problems(family: str, component: Any, *, built: bool = True) -> list[str]:
    """What ``component`` (or a factory class, ``built=False``) lacks of ``family``'s contract,
    one line per method or attribute; empty when it conforms."""
    methods, attributes = contract_members(protocol_of(family))
    problems: list[str] = []
    for member, signature in methods.items():
        target = getattr(component, member, None)
        if target is None:
            problems.append(f"missing method {member}{signature}")
        elif not callable(target):
            problems.append(f"{member} is not callable")
        else:
            unbound = not built and inspect.isfunction(inspect.getattr_static(component, member))
            why = _arity_problem(signature, target, unbound=unbound)
            if why is not None:
                problems.append(f"method {member} {why} (contract: {member}{signature})")
    if built:
        problems += [f"missing attribute {a!r}" for a in attributes if not hasattr(component, a)]
    return problems


def check_component(family: str, name: str, component: Any, *, built: bool = True) -> Any:
    """``component`` unchanged if it meets ``family``'s contract; otherwise
    :class:`ComponentContractError` naming the family, the registry name and every problem."""
    problems = contract_problems(family, component, built=built)
    if problems:
        what = "component" if built else "factory"
        raise ComponentContractError(
            f"{family} {name!r} ({what} {type(component).__name__ if built else getattr(component, '__qualname__', component)}) "
            f"does not meet the {family} contract: " + "; ".join(problems)
        )
    return component


def check_factory(family: str, name: str, factory: Any) -> None:
    """Check a registry factory before anything is built: a class is checked for the contract's
    methods (its data attributes appear only on instances); a plain function is left to
    :func:`check_component` on what it builds."""
    if inspect.isclass(factory):
        check_component(family, name, factory, built=False)


__all__ = [
    "FAMILY_PROTOCOLS",
    "check_component",
    "check_factory",
    "contract_members",
    "contract_problems",
    "protocol_of",
]

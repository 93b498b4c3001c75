"""The flat exception hierarchy shared by every layer of fre-e2t.

Messages name the parameter, what was expected and what came. They never contain a secret.
"""

from __future__ import annotations


class FreError(Exception):
    """Root of every error raised on purpose by fre-e2t."""


class InvalidParameterError(FreError, ValueError):
    """A configuration value is outside its domain (e.g. ``p_sample`` not in (0, 1])."""


class InvalidInputError(FreError, ValueError):
    """Data handed to a function is malformed: wrong shape, NaN, empty, wrong length."""


class DecodeError(InvalidInputError):
    """Bytes that should encode a group element, scalar, share or message do not."""


class VerificationError(FreError):
    """A proof or integrity check failed. Deliberately not a ``ValueError``."""


class ProtocolStateError(FreError):
    """An operation came in the wrong phase, twice, or from a party that may not send it."""


class RateLimitedError(ProtocolStateError):
    """A sender went over its allowance of one kind of message in a round (a user credential
    used twice at the networked proxy, HTTP 429; more than its cap c of messages at the
    in-process proxy)."""


class InfeasibleBudgetError(InvalidParameterError):
    """The privacy budget cannot pay for the requested setting; the message says which term."""


class UnknownComponentError(InvalidParameterError):
    """A registry name that nothing is registered under."""


class ComponentPluginError(UnknownComponentError):
    """A component from another distribution (an entry point of ``fre_e2t.components``) or
    from ``registry.register()`` cannot be added or loaded; the message names where it came from."""


class ComponentContractError(InvalidParameterError):
    """A component does not meet its family's contract (a Protocol in :mod:`primitives`): a method
    the protocol calls is missing, is not callable or takes the wrong arguments. The message names
    the family, the component's registry name and the method."""

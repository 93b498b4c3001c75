"""The protocol's parties (design §6): users, the tagging server S_tag with its dummy user, the
synthesis server S_syn, and the anonymizing proxy through which every user ↔ server message
passes. Each party records what it receives into its own transcript view."""

from __future__ import annotations

from fre_protocol.roles.base import Meter, Recorder, Workers
from fre_protocol.roles.dummy_user import DummyUser
from fre_protocol.roles.proxy import AnonymizingProxy, Delivery
from fre_protocol.roles.synthesis_server import Reconstruction, SynthesisServer
from fre_protocol.roles.tagging_server import TaggingServer
from fre_protocol.roles.user import ServerKeys, UserPopulation

__all__ = [
    "AnonymizingProxy",
    "Delivery",
    "DummyUser",
    "Meter",
    "Recorder",
    "Reconstruction",
    "ServerKeys",
    "SynthesisServer",
    "TaggingServer",
    "UserPopulation",
    "Workers",
]

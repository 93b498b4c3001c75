"""The networked deployment: S_tag, S_syn and the proxy as HTTPS services — the network driver
over the same role classes (:mod:`fre_protocol.parties`) that the in-process runner drives.

Operators (S_tag, S_syn, the proxy) authenticate one another with mutual TLS under one deployment
CA; users reach the proxy over TLS with no certificate of their own.

Modules: :mod:`~fre_protocol.net.round` (the public round document, each service's
configuration), :mod:`~fre_protocol.net.signing` (the round document signed by S_tag and
S_syn), :mod:`~fre_protocol.net.wire` (batch framing, typed errors → HTTP statuses),
:mod:`~fre_protocol.net.state` (the crash-safe request log), :mod:`~fre_protocol.net.service`
(what every service shares), :mod:`~fre_protocol.net.logged` (a server rebuilt from its log),
:mod:`~fre_protocol.net.tag_service`, :mod:`~fre_protocol.net.syn_service`,
:mod:`~fre_protocol.net.proxy_service`, :mod:`~fre_protocol.net.users_client` (N users as
clients), :mod:`~fre_protocol.net.deploy` (``deploy-local``), :mod:`~fre_protocol.net.transcript`
(per-party stores and their audit), :mod:`~fre_protocol.net.certs`, :mod:`~fre_protocol.net.metrics`,
:mod:`~fre_protocol.net.files`.
"""

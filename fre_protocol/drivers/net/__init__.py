"""The networked deployment: S_tag, S_syn and the proxy as HTTPS services — the network driver
over the same role classes (:mod:`fre_protocol.roles`) that the in-process driver drives.

Operators (S_tag, S_syn, the proxy) authenticate one another with mutual TLS under one deployment
CA; users reach the proxy over TLS with no certificate of their own.

Modules: :mod:`~fre_protocol.drivers.net.round` (the public round document, each service's
configuration), :mod:`~fre_protocol.drivers.net.signing` (the round document signed by S_tag and
S_syn), :mod:`~fre_protocol.drivers.net.wire` (batch framing, typed errors → HTTP statuses),
:mod:`~fre_protocol.drivers.net.state` (the crash-safe request log), :mod:`~fre_protocol.drivers.net.listener`
(the HTTPS listener and its connection limits), :mod:`~fre_protocol.drivers.net.service` (what every
service shares per request), :mod:`~fre_protocol.drivers.net.peers` (the mTLS client to the other services),
:mod:`~fre_protocol.drivers.net.logged` (a server rebuilt from its log),
:mod:`~fre_protocol.drivers.net.tag_service`, :mod:`~fre_protocol.drivers.net.syn_service`,
:mod:`~fre_protocol.drivers.net.proxy_service` (with :mod:`~fre_protocol.drivers.net.proxy_log`,
:mod:`~fre_protocol.drivers.net.proxy_admission`, :mod:`~fre_protocol.drivers.net.proxy_view`),
:mod:`~fre_protocol.drivers.net.users_client` (N users as
clients), :mod:`~fre_protocol.drivers.net.deploy` (``deploy-local``), :mod:`~fre_protocol.drivers.net.transcript`
(per-party stores and their audit), :mod:`~fre_protocol.drivers.net.certs`, :mod:`~fre_protocol.drivers.net.metrics`,
:mod:`~fre_protocol.drivers.net.files`.
"""

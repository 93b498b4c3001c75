"""The networked deployment: S_tag, S_syn and the proxy as HTTPS services.

Operators (S_tag, S_syn, the proxy) authenticate one another with mutual TLS under one deployment
CA; users reach the proxy over TLS with no certificate of their own.
"""

"""The two-server, two-phase Fre-E2T protocol: parties, messages, runner, text pipeline, CLI.

Heavy ML dependencies (torch, sentence-transformers) are imported only inside
``fre_protocol.text``, lazily, so ``import fre_protocol`` works with the core install.
"""

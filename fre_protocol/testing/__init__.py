"""What a third party needs to test a component of its own against fre-e2t's contracts: the
conformance suite (:mod:`fre_protocol.testing.conformance`), the statistics it uses
(:mod:`fre_protocol.testing.stats`) and the recorded known-answer vectors it runs
(:mod:`fre_protocol.testing.vectors`)."""

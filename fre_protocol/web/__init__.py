"""What a browser needs to take part in a round: the assets of the device's embedder
(:mod:`fre_protocol.web.assets`)."""

"""Golden vectors, one package below sim/: the file format (format), the case catalogue (cases),
their computation (compute), the check against the numpy reference (check), the exchange cases
(exchange) and the datapath corner cases (datapath). It imports only the wire format and the
numeric contract; the real-gradient cases need trained models, so gradblock.realgrads builds
them above and hands them to compute.generate_golden."""

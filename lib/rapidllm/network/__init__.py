"""Network model: topology, rank mapping, routing, collectives, link-queue simulator, faults."""

"""Joins operator prices, memory and communication into end-to-end step time and latency."""

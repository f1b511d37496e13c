"""Execution graph: compute and communication nodes of a case, and their export."""

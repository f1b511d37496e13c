"""Workload -> operators and their prices (roofline baseline, GEMM tile model, attention, MoE)."""

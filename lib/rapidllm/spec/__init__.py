"""Specs: load, validate and resolve model, hardware, network, case and experiment YAML."""
from rapidllm.spec.case import Case, load_case, resolve_case
from rapidllm.spec.errors import SpecError
from rapidllm.spec.hardware import HardwareSpec, SMLimits, Utilization
from rapidllm.spec.layout import InferenceWorkload, Parallelism, TrainingWorkload
from rapidllm.spec.model import ModelSpec, MoESpec, MLASpec
from rapidllm.spec.network import NetworkSpec, DimensionSpec, FaultSpec

__all__ = [
    "SpecError", "ModelSpec", "MoESpec", "MLASpec", "HardwareSpec", "SMLimits", "Utilization",
    "NetworkSpec", "DimensionSpec", "FaultSpec", "Case", "Parallelism", "TrainingWorkload",
    "InferenceWorkload", "load_case", "resolve_case",
]

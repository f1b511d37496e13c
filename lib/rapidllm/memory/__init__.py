"""Memory feasibility: persistent state (weights, gradients, optimizer, KV cache) plus activations."""

"""Routing analysis tools for MoE router traces (Strata's and Megatron-LM's; docs/router_trace.md).

Modules: trace (streaming JSONL reader), sidecar (bf16 .bin tensors), router_state (safetensors and
Megatron .pt router state), concentration, predictability, load (one analysis each, each runnable as
a script), routing (the dispatcher: concentration|predictability|load|all), to_megatron.
"""

"""polymoe: Mixture-of-Experts layers composed from compile-time policies, chosen by name.

    import numpy as np, polymoe
    layer = polymoe.Layer.from_checkpoint("Qwen3-30B-A3B", 12, quant="bf16")   # kernel="auto"
    out = layer.forward(hidden, router_logits)                                # float32 [T, H]

Tensors: float32 numpy arrays, or host tensors exposing ``__dlpack__``, with contiguous rows (a row
stride is fine), viewed in place; ``out=`` is written in place. bfloat16: uint16 arrays of bf16 bit
patterns with ``dtype="bfloat16"``. Errors are ``polymoe.Error`` (a ValueError) or TypeError, with
the library's ``polymoe:`` message.
"""
from ._polymoe import Error, Handle, Layer, auto_kernel, describe, valid_triples

__all__ = ["Error", "Handle", "Layer", "auto_kernel", "describe", "valid_triples"]
__version__ = describe()["version"]

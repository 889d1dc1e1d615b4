"""polymoe: Mixture-of-Experts layers composed from compile-time policies, chosen by name.

    import numpy as np, polymoe
    layer = polymoe.Layer.from_checkpoint("Qwen3-30B-A3B", 12, quant="bf16")   # kernel="auto"
    out = layer.forward(hidden, router_logits)                                # float32 [T, H]

Tensors: numpy arrays, or tensors exposing ``__dlpack__`` (PyTorch, CuPy, JAX), float32 or
bfloat16, with contiguous rows (a row stride is fine), viewed in place; ``out=`` is written in
place. Without ``out=`` the output is made like ``hidden`` (a torch tensor gives a torch tensor).
numpy has no bfloat16: pass uint16 arrays of bf16 bit patterns with ``dtype="bfloat16"``. Host
tensors go to the CPU kernels; with ``kernel="cuda"`` (where the CUDA component is built) CUDA
tensors go to the GPU on ``stream=`` (a cudaStream_t as an int; 0 is CUDA's default stream).
Errors are ``polymoe.Error`` (a ValueError) or TypeError, with the library's ``polymoe:`` message.

With PyTorch importable, ``torch.ops.polymoe.moe_forward(hidden, router_logits, layer_id)`` runs a
layer inside a model (``layer_id = polymoe.op_id(layer)``), on the current CUDA stream for CUDA
tensors.
"""
import itertools
import weakref

from ._polymoe import Error, Handle, Layer, auto_kernel, describe, valid_triples

__all__ = ["Error", "Handle", "Layer", "auto_kernel", "describe", "valid_triples", "op_id"]
__version__ = describe()["version"]

# The layers torch.ops.polymoe.moe_forward can run, by id; a layer is dropped here when Python
# drops it elsewhere.
_op_layers = weakref.WeakValueDictionary()
_op_ids = weakref.WeakKeyDictionary()
_next_id = itertools.count(1)


def op_id(layer):
    """The id that names ``layer`` to ``torch.ops.polymoe.moe_forward`` (the same id each call)."""
    if layer not in _op_ids:
        i = next(_next_id)
        _op_ids[layer] = i
        _op_layers[i] = layer
    return _op_ids[layer]


def _op_layer(layer_id):
    layer = _op_layers.get(layer_id)
    if layer is None:
        raise Error(f"polymoe: moe_forward: no live layer has id {layer_id} (polymoe.op_id(layer) gives one)")
    return layer


def _register_torch_op():
    try:
        import torch
    except ImportError:
        return
    if not hasattr(torch, "library") or not hasattr(torch.library, "custom_op"):
        return  # torch before 2.4: no custom_op

    @torch.library.custom_op("polymoe::moe_forward", mutates_args=())
    def moe_forward(hidden: torch.Tensor, router_logits: torch.Tensor, layer_id: int) -> torch.Tensor:
        layer = _op_layer(layer_id)
        stream = torch.cuda.current_stream(hidden.device).cuda_stream if hidden.is_cuda else 0
        return layer.forward(hidden.detach(), router_logits.detach(), stream=stream)

    @moe_forward.register_fake
    def _(hidden, router_logits, layer_id):
        layer = _op_layer(layer_id)
        dtype = torch.bfloat16 if hidden.dtype == torch.bfloat16 else torch.float32
        return hidden.new_empty((hidden.shape[0], layer.config["hidden"]), dtype=dtype)


_register_torch_op()

"""Gradient compression for allreduce (horovod.torch.Compression)."""
import torch


class Compressor:
    """Turns a tensor into the tensor that travels, and back."""

    @staticmethod
    def compress(tensor):
        """Returns (tensor to send, context for decompress)."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        """Returns the tensor compress() started from, given the reduced
        tensor and compress()'s context."""
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends the tensor as it is."""

    @staticmethod
    def compress(tensor):
        """Returns (tensor, None)."""
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        """Returns tensor."""
        return tensor


def _cast_compressor(wire_dtype, doc):
    class _Cast(Compressor):
        @staticmethod
        def compress(tensor):
            """Floating tensors of another type cast to the wire type, with
            their dtype as the context; others as they are."""
            if tensor.dtype.is_floating_point and tensor.dtype != wire_dtype:
                return tensor.to(wire_dtype), tensor.dtype
            return tensor, None

        @staticmethod
        def decompress(tensor, ctx):
            """Casts back to the original dtype (ctx)."""
            return tensor if ctx is None else tensor.to(ctx)

    _Cast.__doc__ = doc
    return _Cast


FP16Compressor = _cast_compressor(
    torch.float16, "Floating-point tensors travel as float16 and are cast back.")
FP16Compressor.__name__ = FP16Compressor.__qualname__ = "FP16Compressor"
BF16Compressor = _cast_compressor(
    torch.bfloat16, "Floating-point tensors travel as bfloat16 and are cast back.")
BF16Compressor.__name__ = BF16Compressor.__qualname__ = "BF16Compressor"


class Compression:
    """The available compressors: ``none``, ``fp16``, ``bf16``."""

    none = NoneCompressor
    """No compression (the default)."""
    fp16 = FP16Compressor
    """Floating tensors travel as float16."""
    bf16 = BF16Compressor
    """Floating tensors travel as bfloat16 (kolo's own; Horovod has fp16 only)."""

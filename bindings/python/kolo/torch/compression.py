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
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends the tensor as it is."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


def _cast_compressor(wire_dtype, doc):
    class _Cast(Compressor):
        @staticmethod
        def compress(tensor):
            if tensor.dtype.is_floating_point and tensor.dtype != wire_dtype:
                return tensor.to(wire_dtype), tensor.dtype
            return tensor, None

        @staticmethod
        def decompress(tensor, ctx):
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
    fp16 = FP16Compressor
    bf16 = BF16Compressor

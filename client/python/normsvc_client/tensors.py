"""NumPy arrays <-> normsvc.v1.Tensor messages.

fp32 and fp16 map to np.float32 / np.float16. bf16 travels as its 16-bit
patterns: arrays are rounded to bf16 (nearest even) when sent with
dtype="bf16" (or when they are ml_dtypes.bfloat16 arrays), and bf16 results
come back as np.float32 arrays holding the exact bf16 values.
"""
import numpy as np

from ._stubs import pb

_DTYPE_NAMES = {"fp32": pb.FP32, "float32": pb.FP32, "fp16": pb.FP16, "float16": pb.FP16,
                "bf16": pb.BF16, "bfloat16": pb.BF16}


def wire_dtype(name):
    """pb.DType for "fp32" / "fp16" / "bf16", a NumPy float32 / float16 dtype,
    or one of the enum values pb.FP32, pb.FP16, pb.BF16 passed through."""
    if isinstance(name, (int, np.integer)) and not isinstance(name, (bool, np.bool_)):
        if int(name) in (pb.FP32, pb.FP16, pb.BF16):
            return int(name)
        raise ValueError(f"unknown dtype {name!r}; use fp32, fp16 or bf16")
    key = name
    if not isinstance(name, str):
        try:
            key = np.dtype(name).name
        except TypeError:
            key = str(name)
    try:
        return _DTYPE_NAMES[str(key).lower()]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; use fp32, fp16 or bf16") from None


def float_to_bf16_bits(values):
    """Rounds float32 values to bf16 (nearest even; NaN stays NaN) -> uint16 bits."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    nan = np.isnan(np.asarray(values, dtype=np.float32))
    rounded = np.where(nan, (bits >> np.uint32(16)) | np.uint32(0x40), rounded)
    return rounded.astype(np.uint16)


def bf16_bits_to_float(bits):
    """uint16 bf16 patterns -> float32 values (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def _is_ml_bfloat16(array):
    return array.dtype.name == "bfloat16"


def to_tensor(array, dtype=None):
    """A Tensor of `array` (C order), converted to `dtype` when given.

    Without dtype: float32 -> FP32, float16 -> FP16, ml_dtypes.bfloat16 ->
    BF16, other floating and integer types -> FP32. Complex, boolean,
    string and object arrays raise ValueError (nothing is sent).
    """
    array = np.asarray(array)
    if array.dtype.kind not in "fiu" and not _is_ml_bfloat16(array):
        raise ValueError(f"cannot send an array of {array.dtype}: give real numbers "
                         "(floating point or integer)")
    if array.ndim == 0:
        array = array.reshape(1)
    if dtype is None:
        # Any byte order: '>f2' is not np.float16 but is sent as fp16 (re-encoded
        # little-endian below).
        if array.dtype.kind == "f" and array.dtype.itemsize == 2:
            dtype = pb.FP16
        elif _is_ml_bfloat16(array):
            dtype = pb.BF16
        else:
            dtype = pb.FP32
    dtype = wire_dtype(dtype)
    if dtype == pb.FP32:
        data = np.ascontiguousarray(array, dtype="<f4").tobytes()
    elif dtype == pb.FP16:
        data = np.ascontiguousarray(array, dtype="<f2").tobytes()
    elif _is_ml_bfloat16(array):
        data = np.ascontiguousarray(array).view("<u2").tobytes()
    else:
        data = float_to_bf16_bits(array.astype(np.float32)).astype("<u2").tobytes()
    return pb.Tensor(dtype=dtype, shape=list(array.shape), data=data)


def from_tensor(tensor):
    """The tensor as a NumPy array (float32, float16, or float32 for bf16)."""
    shape = tuple(tensor.shape)
    if tensor.dtype == pb.FP32:
        return np.frombuffer(tensor.data, dtype="<f4").reshape(shape).astype(np.float32)
    if tensor.dtype == pb.FP16:
        return np.frombuffer(tensor.data, dtype="<f2").reshape(shape).astype(np.float16)
    if tensor.dtype == pb.BF16:
        return bf16_bits_to_float(np.frombuffer(tensor.data, dtype="<u2")).reshape(shape)
    raise ValueError(f"tensor has unknown dtype {tensor.dtype}")

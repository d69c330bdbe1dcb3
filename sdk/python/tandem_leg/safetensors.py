"""A small safetensors reader and writer in the standard library (https://github.com/huggingface/safetensors,
"format"): an 8-byte little-endian header length, a JSON header {name: {dtype, shape, data_offsets}},
then the raw little-endian data. Reading returns float32 `array('f')` values, upcasting F16/BF16
exactly (BF16: the 16 bits become the high half of the float32) and F64 by rounding to nearest;
writing writes F32.
"""
import array
import json
import struct
import sys

_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2}
if sys.byteorder != "little":  # the format and the protocol's digests are little-endian
    raise ImportError("tandem_leg.safetensors needs a little-endian machine")


class SafetensorsError(ValueError):
    pass


def read_header(path):
    """(header dict without __metadata__, metadata dict, data start offset)."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise SafetensorsError(f"{path}: shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", raw)
        if n > 100_000_000:
            raise SafetensorsError(f"{path}: header length {n} is implausible")
        text = f.read(n)
        if len(text) != n:
            raise SafetensorsError(f"{path}: truncated header")
    try:
        header = json.loads(text)
    except ValueError as e:
        raise SafetensorsError(f"{path}: header is not JSON ({e})") from None
    meta = header.pop("__metadata__", {}) or {}
    return header, meta, 8 + n


def _f16_to_f32(raw):
    """IEEE half -> float32 bit by bit (exact; infinities and NaN payloads kept, subnormals normalised)."""
    halves = array.array("H")
    halves.frombytes(raw)
    bits = array.array("I", bytes(4 * len(halves)))
    for i, h in enumerate(halves):
        sign = (h & 0x8000) << 16
        exp = (h >> 10) & 0x1F
        mant = h & 0x3FF
        if exp == 0x1F:
            bits[i] = sign | 0x7F800000 | (mant << 13)
        elif exp:
            bits[i] = sign | ((exp + 112) << 23) | (mant << 13)
        elif mant == 0:
            bits[i] = sign
        else:
            e = -1
            while not mant & 0x400:
                mant <<= 1
                e += 1
            bits[i] = sign | ((112 - e) << 23) | ((mant & 0x3FF) << 13)
    out = array.array("f")
    out.frombytes(bits.tobytes())
    return out


def to_float32(dtype, raw):
    """float32 array('f') of raw little-endian bytes of the given safetensors dtype."""
    if dtype == "F32":
        out = array.array("f")
        out.frombytes(raw)
        return out
    if dtype == "BF16":
        wide = bytearray(2 * len(raw))
        wide[2::4] = raw[0::2]   # low byte of the bfloat16 -> byte 2 of the float32
        wide[3::4] = raw[1::2]   # high byte (sign, exponent) -> byte 3
        out = array.array("f")
        out.frombytes(bytes(wide))
        return out
    if dtype == "F16":
        return _f16_to_f32(raw)
    if dtype == "F64":
        return array.array("f", array.array("d", raw))
    raise SafetensorsError(f"unsupported dtype {dtype} (F32, F16, BF16, F64)")


def read(path):
    """{name: (shape list, array('f'))}, every tensor upcast to float32."""
    header, _meta, start = read_header(path)
    out = {}
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        for name, info in header.items():
            dtype, shape, (b, e) = info["dtype"], info["shape"], info["data_offsets"]
            if dtype not in _SIZES:
                raise SafetensorsError(f"{path}: tensor {name}: unsupported dtype {dtype}")
            count = 1
            for d in shape:
                count *= d
            if e - b != count * _SIZES[dtype] or start + e > size:
                raise SafetensorsError(f"{path}: tensor {name}: data_offsets do not match its shape and dtype")
            f.seek(start + b)
            out[name] = (list(shape), to_float32(dtype, f.read(e - b)))
    return out


def write(path, tensors, metadata=None):
    """tensors: {name: (shape, array('f') or a sequence of floats)}, written as F32, names sorted."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        shape, data = tensors[name]
        a = data if isinstance(data, array.array) and data.typecode == "f" else array.array("f", data)
        count = 1
        for d in shape:
            count *= d
        if count != len(a):
            raise SafetensorsError(f"{path}: tensor {name}: shape {shape} holds {count} values, got {len(a)}")
        b = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)  # data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)

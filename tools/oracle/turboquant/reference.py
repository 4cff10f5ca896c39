#!/usr/bin/env python3
"""Float64 reference of mlxgo's TurboQuant KV codec, in pure Python.

One token's key or value vector of head_dim d (64, 128, 256 or 512) is
encoded into bytes; the layout is what kv's TurboQuant caches store per
token and KV head.

Keys (unrotated, asymmetric affine, groups of 32 along d):
  8 bits:  bias m = f16((max+min)/2), scale s = f16(max(max-m, m-min)/127),
           code q = clip(rne((x-m)/s), -127, 127), stored as int8;
  b in {2, 4, 5}: m = f16(min), s = f16(max(max-m, 0)/(2^b-1)),
           q = clip(rne((x-m)/s), 0, 2^b-1), unsigned;
  s = 0 gives q = 0. Decoded: q*s + m.
  Bytes: the d codes as a little-endian bitstream of b bits each (code j at
  bit j*b; for 8 bits the int8 bytes), then per group s, m as float16 LE.

Values (rotated, Lloyd-Max):
  y = H (sign * v) / sqrt(d): fixed +-1 signs (splitmix64 from seed 42, bit 0
  of the i-th output; 1 means -1), then the Walsh-Hadamard butterfly
  (stride 1, 2, 4, ...; a+b then a-b) and a division by sqrt(d).
  Per group of 32: sigma = f16(sqrt(sum(y^2)/32)); u = y/sigma (0 when sigma
  is 0); code = number of thresholds below u (thresholds: midpoints of
  adjacent levels of the b-bit Gaussian codebook in codebooks.json).
  Decoded in the rotated domain: level[code]*sigma; back: sign * H(.) / sqrt(d).
  Bytes: d codes as a little-endian bitstream of b bits, then sigma per
  group as float16 LE.

f16 rounds a float64 to the nearest float16 (ties to even) after clamping
to +-65504. Everything else is float64, in the order written here.
"""
import bisect
import json
import math
import os
import struct

GROUP = 32
HEAD_DIMS = (64, 128, 256, 512)
KEY_BITS = (2, 4, 5, 8)
VALUE_BITS = (2, 3, 4, 5, 8)
MASK64 = (1 << 64) - 1

_here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(_here, "codebooks.json")) as _f:
    _BOOKS = json.load(_f)


def levels(bits):
    return _BOOKS[str(bits)]["levels"]


def thresholds(bits):
    c = levels(bits)
    return [(c[i] + c[i + 1]) / 2 for i in range(len(c) - 1)]


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def signs(d):
    s, out = 42, []
    for _ in range(d):
        s, z = splitmix64(s)
        out.append(-1.0 if z & 1 else 1.0)
    return out


def f16(x):
    x = max(-65504.0, min(65504.0, x))
    return struct.unpack("<e", struct.pack("<e", x))[0]


def f16_bits(x):
    return struct.unpack("<H", struct.pack("<e", x))[0]


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def pack_bits(codes, bits):
    out = bytearray(len(codes) * bits // 8)
    for j, q in enumerate(codes):
        q &= (1 << bits) - 1
        for k in range(bits):
            if q >> k & 1:
                pos = j * bits + k
                out[pos >> 3] |= 1 << (pos & 7)
    return bytes(out)


def fwht(y):
    y = list(y)
    d, h = len(y), 1
    while h < d:
        for i in range(0, d, 2 * h):
            for j in range(i, i + h):
                a, b = y[j], y[j + h]
                y[j], y[j + h] = a + b, a - b
        h *= 2
    return y


def encode_key(x, bits):
    """x: d floats -> (codes, scales, biases, packed bytes, decoded floats)."""
    codes, scales, biases, dec = [], [], [], []
    for g in range(0, len(x), GROUP):
        grp = x[g:g + GROUP]
        mn, mx = min(grp), max(grp)
        if bits == 8:
            m = f16((mx + mn) / 2)
            s = f16(max(mx - m, m - mn) / 127)
            lo, hi = -127, 127
        else:
            m = f16(mn)
            s = f16(max(mx - m, 0.0) / ((1 << bits) - 1))
            lo, hi = 0, (1 << bits) - 1
        for v in grp:
            q = 0 if s == 0 else min(hi, max(lo, round((v - m) / s)))
            codes.append(q)
            dec.append(f32(q * s + m))
        scales.append(s)
        biases.append(m)
    packed = pack_bits(codes, bits)
    for s, m in zip(scales, biases):
        packed += struct.pack("<ee", s, m)
    return codes, scales, biases, packed, dec


def rotate(v):
    d = len(v)
    sg = signs(d)
    y = fwht([s * a for s, a in zip(sg, v)])
    r = math.sqrt(d)
    return [a / r for a in y]


def unrotate(y):
    d = len(y)
    sg = signs(d)
    z = fwht(y)
    r = math.sqrt(d)
    return [s * (a / r) for s, a in zip(sg, z)]


def encode_value(v, bits):
    """v: d floats -> (codes, sigmas, packed bytes, decoded floats)."""
    y = rotate(v)
    c, t = levels(bits), thresholds(bits)
    codes, sigmas, yq = [], [], []
    for g in range(0, len(y), GROUP):
        grp = y[g:g + GROUP]
        sigma = f16(math.sqrt(sum(a * a for a in grp) / GROUP))
        for a in grp:
            u = 0.0 if sigma == 0 else a / sigma
            q = bisect.bisect_left(t, u)
            codes.append(q)
            yq.append(c[q] * sigma)
        sigmas.append(sigma)
    packed = pack_bits(codes, bits)
    for s in sigmas:
        packed += struct.pack("<e", s)
    dec = [f32(a) for a in unrotate(yq)]
    return codes, sigmas, packed, dec

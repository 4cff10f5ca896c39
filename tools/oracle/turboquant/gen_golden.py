#!/usr/bin/env python3
"""Goldens for kv's TurboQuant codec from the float64 reference.

For every head_dim in reference.HEAD_DIMS, a fixed set of float32 input
vectors (Gaussian, offset, outliers, zeros, constant groups, tiny, bf16-
rounded) is encoded as keys with every key width and as values with every
value width; the inputs, codes, scales, biases, packed bytes and decoded
floats are written to kv/testdata/turboquant_golden.json:

    python3 tools/oracle/turboquant/gen_golden.py [repo-root]
"""
import json
import os
import random
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference as ref  # noqa: E402


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def bf16(x):
    b = struct.unpack("<I", struct.pack("<f", x))[0]
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("<f", struct.pack("<I", b))[0]


def inputs(d, rng):
    g = lambda s=1.0, m=0.0: [m + s * rng.gauss(0, 1) for _ in range(d)]
    out = [g(), g(3, 0.5), g(0.01, 10)]
    v = g()
    for i in rng.sample(range(d), 4):
        v[i] *= 20
    out.append(v)
    out.append([0.0] * d)
    v = g()
    v[:ref.GROUP] = [1.5] * ref.GROUP
    out.append(v)
    out.append(g(1e-6))
    out.append([bf16(x) for x in g(8)])
    return [[f32(x) for x in v] for v in out]


def hexf32(v):
    return struct.pack(f"<{len(v)}f", *v).hex()


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    rng = random.Random(20260919)
    cases = []
    for d in ref.HEAD_DIMS:
        xs = inputs(d, rng)
        for i, x in enumerate(xs):
            for b in ref.KEY_BITS:
                codes, s, m, packed, dec = ref.encode_key(x, b)
                cases.append({"kind": "key", "d": d, "bits": b, "input": i, "x": hexf32(x), "codes": codes,
                              "scales": [ref.f16_bits(a) for a in s], "biases": [ref.f16_bits(a) for a in m],
                              "packed": packed.hex(), "decoded": hexf32(dec)})
            for b in ref.VALUE_BITS:
                codes, s, packed, dec = ref.encode_value(x, b)
                cases.append({"kind": "value", "d": d, "bits": b, "input": i, "x": hexf32(x), "codes": codes,
                              "scales": [ref.f16_bits(a) for a in s], "packed": packed.hex(), "decoded": hexf32(dec)})
    os.makedirs(os.path.join(root, "kv", "testdata"), exist_ok=True)
    with open(os.path.join(root, "kv", "testdata", "turboquant_golden.json"), "w") as f:
        json.dump({"generator": "tools/oracle/turboquant/gen_golden.py", "cases": cases}, f, separators=(",", ":"))
        f.write("\n")
    print(f"{len(cases)} cases", file=sys.stderr)


if __name__ == "__main__":
    main()

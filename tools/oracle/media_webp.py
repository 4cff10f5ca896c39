#!/usr/bin/env python3
"""WebP decoding goldens for mlxgo's model/media, from PIL (libwebp).

Encodes a few small synthetic images with PIL's WebP encoder — lossy (VP8)
at several qualities and methods, odd and even sizes, one with an alpha
channel (VP8X + ALPH), and lossless (VP8L) with and without alpha — then
decodes each back with PIL and records convert("RGB") as a PNG, which Go
decodes exactly:

    <out>/webp/<name>.webp   the file as PIL's encoder wrote it
    <out>/webp/<name>.png    PIL's decode of it, converted to RGB
    <out>/webp/index.json    sizes, modes, PIL and libwebp versions

Run where Pillow with WebP support is installed:

    python3 tools/oracle/media_webp.py model/media/testdata

Reruns with the same Pillow/libwebp give the same files.
"""

import json
import os
import sys

import numpy as np
from PIL import Image, features

CASES = [
    # name, width, height, mode, save options
    ("lossy_q75_37x23", 37, 23, "RGB", dict(quality=75)),
    ("lossy_q30_64x48", 64, 48, "RGB", dict(quality=30)),
    ("lossy_q95_m6_130x67", 130, 67, "RGB", dict(quality=95, method=6)),
    ("lossy_q50_m0_200x150", 200, 150, "RGB", dict(quality=50, method=0)),
    ("lossy_q10_31x45", 31, 45, "RGB", dict(quality=10)),
    ("lossy_1x1", 1, 1, "RGB", dict(quality=80)),
    ("lossy_2x3", 2, 3, "RGB", dict(quality=80)),
    ("lossy_alpha_41x30", 41, 30, "RGBA", dict(quality=70)),
    ("lossless_33x21", 33, 21, "RGB", dict(lossless=True)),
    ("lossless_alpha_20x17", 20, 17, "RGBA", dict(lossless=True, exact=True)),
    ("lossless_m6_96x40", 96, 40, "RGB", dict(lossless=True, method=6, quality=100)),
]


def picture(w, h, mode, rng):
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack(
        [x * 255 / max(w - 1, 1), y * 255 / max(h - 1, 1), (x + y) * 127 / max(w + h - 2, 1)], -1
    )
    img = base + rng.integers(-30, 31, size=base.shape)
    if w >= 8 and h >= 8:  # a sharp-edged block, for the loop filter
        img[h // 4 : h // 2, w // 3 : 2 * w // 3] = [220, 40, 70]
    img = np.clip(img, 0, 255).astype(np.uint8)
    if mode == "RGBA":
        a = np.clip(x * 255 / max(w - 1, 1), 0, 255).astype(np.uint8)
        a[: h // 3] = 255
        a[:, :2] = 0
        img = np.concatenate([img, a[..., None]], -1)
    return Image.fromarray(img, mode)


def main():
    out = os.path.join(sys.argv[1] if len(sys.argv) > 1 else ".", "webp")
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(2024)
    import PIL

    index = dict(
        pillow=PIL.__version__,
        libwebp=features.version_module("webp") if hasattr(features, "version_module") else None,
        cases={},
    )
    for name, w, h, mode, opts in CASES:
        p = os.path.join(out, name + ".webp")
        picture(w, h, mode, rng).save(p, "WEBP", **opts)
        dec = Image.open(p)
        info = dict(width=w, height=h, src_mode=mode, decoded_mode=dec.mode, options=opts, bytes=os.path.getsize(p))
        rgb = dec.convert("RGB")
        rgb.save(os.path.join(out, name + ".png"))
        with open(p, "rb") as f:
            head = f.read(16)
        info["chunk"] = head[12:16].decode("latin1")
        index["cases"][name] = info
        print(name, info)
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump(index, f, indent=1, sort_keys=True)
    print("pillow", index["pillow"], "libwebp", index["libwebp"])


if __name__ == "__main__":
    main()

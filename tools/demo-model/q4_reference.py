"""HF transformers reference for the demo model's 4-bit form.

Reads model/demo/q4 (MLX affine 4-bit, written by `mlxgo convert`), expands
every quantized tensor with the affine scheme (w = scale * q + bias, in
float32), loads the result into HF's Gemma4ForCausalLM (config from
model/demo/bf16) and records, for the prompts of model/demo/testdata/golden.json,
the last-position logits and a 16-token greedy continuation with its top-2
gaps. mlxgo's 4-bit forward must reproduce this float model.

Usage (where torch + transformers are installed):
    python3 tools/demo-model/q4_reference.py OUT.json
"""
import json
import struct
import sys

import numpy as np
import torch
from transformers import AutoConfig, AutoModelForCausalLM

ROOT = "model/demo"


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = data[b:e]
        dt = info["dtype"]
        if dt == "BF16":
            a = (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif dt == "F32":
            a = np.frombuffer(raw, dtype=np.float32)
        elif dt == "F16":
            a = np.frombuffer(raw, dtype=np.float16).astype(np.float32)
        elif dt == "U32":
            a = np.frombuffer(raw, dtype=np.uint32)
        else:
            raise SystemExit(f"unexpected dtype {dt} for {name}")
        out[name] = a.reshape(info["shape"])
    return out


def dequantize(words, scales, biases, bits, group):
    rows = words.shape[0]
    per = 32 // bits
    shifts = (np.arange(per, dtype=np.uint32) * bits)[None, None, :]
    codes = ((words[:, :, None] >> shifts) & ((1 << bits) - 1)).reshape(rows, -1).astype(np.float32)
    k = codes.shape[1]
    s = np.repeat(scales.astype(np.float32), group, axis=1)[:, :k]
    b = np.repeat(biases.astype(np.float32), group, axis=1)[:, :k]
    return s * codes + b


def main():
    out_path = sys.argv[1]
    qcfg = json.load(open(f"{ROOT}/q4/config.json"))
    bits, group = qcfg["quantization"]["bits"], qcfg["quantization"]["group_size"]
    tensors = read_safetensors(f"{ROOT}/q4/model.safetensors")
    state = {}
    for name, a in tensors.items():
        if name.endswith(".scales") or name.endswith(".biases"):
            continue
        if a.dtype == np.uint32:
            base = name[: -len(".weight")]
            a = dequantize(a, tensors[base + ".scales"], tensors[base + ".biases"], bits, group)
        state[name] = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))
    config = AutoConfig.from_pretrained(f"{ROOT}/bf16")
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if "lm_head" not in m]
    if missing or unexpected:
        raise SystemExit(f"state dict mismatch: missing {missing} unexpected {unexpected}")
    model.tie_weights()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    model = model.to(dev).eval()
    golden = json.load(open(f"{ROOT}/testdata/golden.json"))
    results = []
    with torch.no_grad():
        for p in golden["prompts"]:
            ids = list(p["ids"])
            logits = model(torch.tensor([ids], device=dev)).logits[0, -1].float().cpu()
            seq, gaps = [], []
            cur = list(ids)
            for _ in range(16):
                lg = model(torch.tensor([cur], device=dev)).logits[0, -1].float().cpu()
                top = torch.topk(lg, 2)
                seq.append(int(top.indices[0]))
                gaps.append(float(top.values[0] - top.values[1]))
                cur.append(seq[-1])
            results.append({"ids": ids, "logits_last": logits.tolist(), "greedy": seq, "gaps": gaps})
    json.dump({"transformers_version": __import__("transformers").__version__, "bits": bits,
               "group_size": group, "prompts": results}, open(out_path, "w"))
    print("wrote", out_path, len(results), "prompts")


if __name__ == "__main__":
    main()

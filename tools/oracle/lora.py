#!/usr/bin/env python3
"""LoRA adapter goldens for mlxgo's lora module, from PEFT.

For each tiny random fixture tools/oracle/models.py and models_gemma4.py
wrote (model/testdata/<variant>/f32), builds two seeded PEFT LoRA
adapters and writes

    <out>/<variant>/a_peft/   adapter_config.json + adapter_model.safetensors
        rank 8, alpha 16, every attention and MLP projection
    <out>/<variant>/b_peft/   a second adapter: rank 4, alpha 8, use_rslora,
        q/v/o/down only, rank_pattern {down_proj: 6}, alpha_pattern {v_proj: 20}
    <out>/<variant>/a_mlx/    adapter a in mlx-lm's format: adapters.safetensors
        (lora_a [in, r], lora_b [r, out]) + adapter_config.json
        (lora_parameters.scale = alpha / r)
    <out>/<variant>/golden.json
        prompt                 the fixture's prompt ids
        logits_{a,b,ab}        PEFT's float32 logits at every prompt position
        greedy_{base,a,b,ab}   greedy continuations (16 ids, whole sequence
                               recomputed each step)
        scales                 each adapter's per-module scale as PEFT
                               computed it (module name -> scale)

"ab" is the PEFT model with both adapters active (a then b), whose
residuals PEFT sums. LoRA B matrices are drawn random (PEFT starts them at
zero, which would make every adapter a no-op). Run where torch,
transformers 5.x and peft are installed, from the repository root:

    python3 tools/oracle/lora.py --fixtures model/testdata --out lora/testdata
"""
import argparse
import json
import os
import sys

# this folder holds tokenizers.py, which must not shadow the real package
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

VARIANTS = ["llama3", "qwen3", "gemma4_dense"]
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
GREEDY = 16


def configs(peft):
    a = peft.LoraConfig(r=8, lora_alpha=16, target_modules=list(ALL), lora_dropout=0.0,
                        bias="none", init_lora_weights=False)
    b = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "o_proj", "down_proj"],
                        lora_dropout=0.0, bias="none", use_rslora=True, init_lora_weights=False,
                        rank_pattern={"down_proj": 6}, alpha_pattern={"v_proj": 20})
    return a, b


def randomize(torch, model, name, seed):
    """Seeded N(0, 0.25) A and B matrices for adapter name."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for pname, p in sorted(model.named_parameters()):
            if (".lora_A." + name + ".") in pname or (".lora_B." + name + ".") in pname:
                p.copy_(0.25 * torch.randn(p.shape, generator=g))


def greedy(torch, model, prompt, n):
    ids = list(prompt)
    for _ in range(n):
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids])).logits[0, -1]
        ids.append(int(torch.argmax(out.float()).item()))
    return ids[len(prompt):]


def logits(torch, model, prompt):
    with torch.no_grad():
        out = model(input_ids=torch.tensor([prompt])).logits[0].float()
    return [[float(x) for x in row] for row in out.tolist()]


def scales(model, name):
    out = {}
    for mname, mod in model.named_modules():
        s = getattr(mod, "scaling", None)
        if isinstance(s, dict) and name in s:
            out[mname.removeprefix("base_model.model.")] = float(s[name])
    return out


def to_mlx(torch, src, dst, alpha, r):
    """Adapter src (PEFT, uniform rank and alpha) in mlx-lm's format."""
    from safetensors.torch import load_file, save_file
    t = load_file(os.path.join(src, "adapter_model.safetensors"))
    out, keys, layers = {}, set(), set()
    for k, v in t.items():
        mod = k.removeprefix("base_model.model.")
        if mod.endswith(".lora_A.weight"):
            base = mod.removesuffix(".lora_A.weight")
            out[base + ".lora_a"] = v.t().contiguous()
        elif mod.endswith(".lora_B.weight"):
            base = mod.removesuffix(".lora_B.weight")
            out[base + ".lora_b"] = v.t().contiguous()
        else:
            raise SystemExit("unexpected adapter tensor " + k)
        parts = base.split(".")
        i = parts.index("layers")
        layers.add(int(parts[i + 1]))
        keys.add(".".join(parts[i + 2:]))
    os.makedirs(dst, exist_ok=True)
    save_file(out, os.path.join(dst, "adapters.safetensors"), metadata={"format": "mlx"})
    cfg = {"fine_tune_type": "lora", "num_layers": len(layers),
           "lora_parameters": {"rank": r, "scale": alpha / r, "dropout": 0.0, "keys": sorted(keys)}}
    with open(os.path.join(dst, "adapter_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def build(torch, transformers, peft, fixtures, out, i, name):
    src = os.path.join(fixtures, name, "f32")
    with open(os.path.join(fixtures, name, "golden.json")) as f:
        prompt = json.load(f)["prompt"]
    base = transformers.AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32, attn_implementation="eager")
    base = base.float().eval()
    g_base = greedy(torch, base, prompt, GREEDY)
    ca, cb = configs(peft)
    pm = peft.get_peft_model(base, ca, adapter_name="a")
    pm.add_adapter("b", cb)
    randomize(torch, pm, "a", 500 + i)
    randomize(torch, pm, "b", 600 + i)
    pm.eval()
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    res = {"variant": name, "transformers": transformers.__version__, "peft": peft.__version__,
           "prompt": prompt, "greedy_base": g_base, "scales": {}}
    for which in ("a", "b"):
        pm.set_adapter(which)
        res["logits_" + which] = logits(torch, pm, prompt)
        res["greedy_" + which] = greedy(torch, pm, prompt, GREEDY)
        res["scales"][which] = scales(pm, which)
    pm.base_model.set_adapter(["a", "b"])
    print(name, "active adapters:", pm.base_model.active_adapters)
    res["logits_ab"] = logits(torch, pm, prompt)
    res["greedy_ab"] = greedy(torch, pm, prompt, GREEDY)
    pm.save_pretrained(d, selected_adapters=["a", "b"])
    # save_pretrained writes each adapter not named "default" under d/<name>
    for which, sub in (("a", "a_peft"), ("b", "b_peft")):
        loc = os.path.join(d, which)
        if not os.path.exists(os.path.join(loc, "adapter_config.json")):
            loc = d
        dst = os.path.join(d, sub)
        os.makedirs(dst, exist_ok=True)
        for fn in ("adapter_config.json", "adapter_model.safetensors"):
            os.replace(os.path.join(loc, fn), os.path.join(dst, fn))
    for sub in ("", "a", "b"):
        p = os.path.join(d, sub, "README.md")
        if os.path.exists(p):
            os.remove(p)
        if sub and os.path.isdir(os.path.join(d, sub)):
            os.rmdir(os.path.join(d, sub))
    to_mlx(torch, os.path.join(d, "a_peft"), os.path.join(d, "a_mlx"), 16, 8)
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(res, f)
    from safetensors import safe_open
    with safe_open(os.path.join(d, "b_peft", "adapter_model.safetensors"), "pt") as f:
        ks = sorted(f.keys())
        print(name, "b keys:", len(ks), ks[:6], [tuple(f.get_tensor(k).shape) for k in ks[:6]])
    print(name, "b config:", open(os.path.join(d, "b_peft", "adapter_config.json")).read())
    print(name, "greedy base", g_base[:8], "a", res["greedy_a"][:8], "b", res["greedy_b"][:8],
          "ab", res["greedy_ab"][:8])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", default="model/testdata")
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    import peft
    import torch
    import transformers

    torch.set_grad_enabled(False)
    print("torch", torch.__version__, "transformers", transformers.__version__, "peft", peft.__version__)
    failed = 0
    for i, name in enumerate(VARIANTS):
        if args.only and name not in args.only.split(","):
            continue
        try:
            build(torch, transformers, peft, args.fixtures, args.out, i, name)
        except Exception:  # report and go on: one broken variant should not cost the others
            import traceback
            traceback.print_exc()
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

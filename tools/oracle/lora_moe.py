#!/usr/bin/env python3
"""LoRA goldens on mixture-of-experts fixtures, from PEFT.

For the tiny random MoE fixtures tools/oracle/models*.py wrote
(model/testdata/<variant>/f32: qwen3_moe, gemma4_moe), builds two seeded
PEFT LoRA adapters that adapt the attention projections, the dense MLP
where there is one, and the experts, and writes

    <out>/<variant>/a_peft/   rank 8, alpha 16
    <out>/<variant>/b_peft/   rank 4, alpha 8, use_rslora, no k_proj,
        rank_pattern {down_proj: 6}, alpha_pattern {v_proj: 20}
    <out>/<variant>/golden.json
        prompt, logits_{a,b,ab}, greedy_{base,a,b,ab} as tools/oracle/lora.py
        layout       "parameters" (transformers 5's fused expert tensors,
                     adapted through target_parameters) or "modules"
                     (per-expert nn.Linear, adapted through target_modules)
        layers       every LoRA layer PEFT made: its state-dict prefix, the
                     parameter it adapts (parameters layout), the shape of
                     that parameter, num_experts, and per adapter r and scale
    <out>/<variant>/deltas_a.safetensors
        PEFT's own delta weight (get_delta_weight, scale included) of adapter
        a for every expert parameter, keyed "<prefix>|<parameter>"

When the experts are fused parameters, the targeted parameters are
experts.gate_up_proj and experts.down_proj for both adapters (PEFT needs
every adapter to target the same parameters, and for Qwen3-MoE it
counts gate_proj/up_proj/down_proj in target_modules as those parameters
too, hence both adapters name all three). Run where torch,
transformers 5.x and peft are installed, from the repository root:

    python3 tools/oracle/lora_moe.py --fixtures model/testdata --out lora/testdata
"""
import argparse
import json
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

VARIANTS = ["qwen3_moe", "gemma4_moe"]
GREEDY = 16
PARAMS = ["experts.gate_up_proj", "experts.down_proj"]


def fused_layout(model):
    import torch
    for _, mod in model.named_modules():
        p = getattr(mod, "gate_up_proj", None)
        if isinstance(p, torch.nn.Parameter) and p.ndim == 3:
            return True
    return False


def configs(peft, fused):
    extra = {"target_parameters": list(PARAMS)} if fused else {}
    a = peft.LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, bias="none", init_lora_weights=False,
                        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
                        **extra)
    b = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, bias="none", init_lora_weights=False, use_rslora=True,
                        target_modules=["q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
                        rank_pattern={"down_proj": 6}, alpha_pattern={"v_proj": 20}, **extra)
    return a, b


def randomize(torch, model, name, seed):
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


def layers(pm):
    out = []
    for mname, mod in pm.named_modules():
        r = getattr(mod, "r", None)
        s = getattr(mod, "scaling", None)
        if not isinstance(r, dict) or not isinstance(s, dict) or not r:
            continue
        e = {"prefix": mname.removeprefix("base_model.model."), "class": type(mod).__name__,
             "r": {k: int(v) for k, v in r.items()}, "scale": {k: float(v) for k, v in s.items()},
             "in": int(getattr(mod, "in_features", -1) or -1), "out": int(getattr(mod, "out_features", -1) or -1)}
        if hasattr(mod, "parameter_name"):
            e["parameter"] = mod.parameter_name
            e["num_experts"] = int(mod.num_experts)
            e["param_shape"] = list(mod.get_param().shape)
            e["is_transposed"] = bool(getattr(mod.get_base_layer(), "is_transposed", False))
        out.append(e)
    return out


def build(torch, transformers, peft, fixtures, out, i, name):
    from safetensors.torch import save_file
    src = os.path.join(fixtures, name, "f32")
    with open(os.path.join(fixtures, name, "golden.json")) as f:
        prompt = json.load(f)["prompt"]
    base = transformers.AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32, attn_implementation="eager")
    base = base.float().eval()
    fused = fused_layout(base)
    print(name, type(base).__name__, "fused experts:", fused)
    g_base = greedy(torch, base, prompt, GREEDY)
    ca, cb = configs(peft, fused)
    pm = peft.get_peft_model(base, ca, adapter_name="a")
    pm.add_adapter("b", cb)
    randomize(torch, pm, "a", 700 + i)
    randomize(torch, pm, "b", 800 + i)
    pm.eval()
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    res = {"variant": name, "transformers": transformers.__version__, "peft": peft.__version__,
           "layout": "parameters" if fused else "modules", "prompt": prompt, "greedy_base": g_base}
    for which in ("a", "b"):
        pm.set_adapter(which)
        res["logits_" + which] = logits(torch, pm, prompt)
        res["greedy_" + which] = greedy(torch, pm, prompt, GREEDY)
    pm.base_model.set_adapter(["a", "b"])
    print(name, "active adapters:", pm.base_model.active_adapters)
    res["logits_ab"] = logits(torch, pm, prompt)
    res["greedy_ab"] = greedy(torch, pm, prompt, GREEDY)
    res["layers"] = layers(pm)
    deltas = {}
    for mname, mod in pm.named_modules():
        if hasattr(mod, "parameter_name") and "a" in getattr(mod, "lora_A", {}):
            deltas[mname.removeprefix("base_model.model.") + "|" + mod.parameter_name] = \
                mod.get_delta_weight("a").detach().float().contiguous()
    if deltas:
        save_file(deltas, os.path.join(d, "deltas_a.safetensors"))
    pm.save_pretrained(d, selected_adapters=["a", "b"])
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
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(res, f)
    from safetensors import safe_open
    for sub in ("a_peft", "b_peft"):
        with safe_open(os.path.join(d, sub, "adapter_model.safetensors"), "pt") as f:
            ks = sorted(f.keys())
            print(name, sub, len(ks), "tensors; experts:",
                  [(k, tuple(f.get_tensor(k).shape)) for k in ks if "expert" in k][:8])
    for e in res["layers"]:
        if "parameter" in e:
            print(name, "layer", e)
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
        except Exception:
            import traceback
            traceback.print_exc()
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

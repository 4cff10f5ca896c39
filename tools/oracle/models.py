#!/usr/bin/env python3
"""Reference fixtures for mlxgo's Llama 3, Qwen3 and Qwen3-MoE forward passes.

Builds tiny random Hugging Face transformers models (seeded), widens their
random init so logits are not flat, and writes for each variant:

    <out>/<variant>/f32/   config.json + model.safetensors (float32)
    <out>/<variant>/bf16/  the same weights cast to bfloat16
    <out>/<variant>/golden.json
        prompt       24 token ids
        logits_f32   HF's float32 logits at every prompt position [24][vocab]
        greedy_f32   HF's greedy continuation (32 ids, float32)
        greedy_bf16  HF's greedy continuation (16 ids, bfloat16)
        inv_freq     the rotary inverse frequencies HF used (layer 0)

Greedy decoding recomputes the whole sequence every step (no cache), so
the reference does not depend on HF's cache code. Run where torch and
transformers (5.x) are installed:

    python3 tools/oracle/models.py --out model/testdata
"""
import argparse
import json
import os
import sys

# this folder holds tokenizers.py, which must not shadow the real package
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

PROMPT_LEN = 24
GREEDY_F32 = 32
GREEDY_BF16 = 16


def variants():
    """(name, config class name, config kwargs)."""
    common = dict(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=128,
        rms_norm_eps=1e-6,
        attention_bias=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    llama3_rope = {
        "rope_type": "llama3",
        "rope_theta": 10000.0,
        "factor": 4.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        # small so that the high, medium and low frequency bands all occur
        # at head dim 16 (wavelengths 6.3 ... 19869)
        "original_max_position_embeddings": 64,
    }
    return [
        ("llama3", "LlamaConfig", dict(common, num_hidden_layers=3, tie_word_embeddings=False,
                                       mlp_bias=False, rope=llama3_rope)),
        ("qwen3", "Qwen3Config", dict(common, num_hidden_layers=3, tie_word_embeddings=True,
                                      use_sliding_window=False,
                                      rope={"rope_type": "default", "rope_theta": 1000000.0})),
        ("qwen3_moe", "Qwen3MoeConfig", dict(common, num_hidden_layers=3, tie_word_embeddings=False,
                                             num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                                             norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1],
                                             use_sliding_window=False,
                                             rope={"rope_type": "default", "rope_theta": 1000000.0})),
    ]


def make_config(transformers, cls_name, kw):
    kw = dict(kw)
    rope = kw.pop("rope")
    major = int(transformers.__version__.split(".")[0])
    if major >= 5:
        kw["rope_parameters"] = rope
    else:
        kw["rope_theta"] = rope["rope_theta"]
        if rope["rope_type"] != "default":
            kw["rope_scaling"] = {k: v for k, v in rope.items() if k != "rope_theta"}
    cfg = getattr(transformers, cls_name)(**kw)
    cfg._attn_implementation = "eager"
    return cfg


def widen(torch, model, seed):
    """Random init wide enough that logits are spread out: weights N(0, 0.15),
    norm weights 1 + N(0, 0.1) so that loading them wrongly shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.15 * torch.randn(p.shape, generator=g))


def greedy(torch, model, prompt, n):
    ids = list(prompt)
    for _ in range(n):
        with torch.no_grad():
            out = model(torch.tensor([ids])).logits[0, -1]
        ids.append(int(torch.argmax(out.float()).item()))
    return ids[len(prompt):]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    import torch
    import transformers

    torch.set_grad_enabled(False)
    print("torch", torch.__version__, "transformers", transformers.__version__)
    failed = 0
    for i, (name, cls_name, kw) in enumerate(variants()):
        if args.only and name not in args.only.split(","):
            continue
        try:
            build(torch, transformers, args.out, i, name, cls_name, kw)
        except Exception:  # report and go on: one broken variant should not cost the others
            import traceback
            traceback.print_exc()
            failed += 1
    return 1 if failed else 0


def build(torch, transformers, out, i, name, cls_name, kw):
    torch.manual_seed(1234 + i)
    cfg = make_config(transformers, cls_name, kw)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    model = model.float().eval()
    widen(torch, model, 99 + i)
    if cfg.tie_word_embeddings:
        model.tie_weights()
    g = torch.Generator().manual_seed(7 + i)
    prompt = torch.randint(3, cfg.vocab_size, (PROMPT_LEN,), generator=g).tolist()
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0].float()
    rot = getattr(model.model, "rotary_emb", None)
    inv_freq = rot.inv_freq.float().tolist() if rot is not None else []
    g32 = greedy(torch, model, prompt, GREEDY_F32)
    d = os.path.join(out, name)
    model.save_pretrained(os.path.join(d, "f32"), safe_serialization=True)
    mb = model.to(torch.bfloat16)
    gbf = greedy(torch, mb, prompt, GREEDY_BF16)
    mb.save_pretrained(os.path.join(d, "bf16"), safe_serialization=True)
    golden = {
        "variant": name,
        "transformers": transformers.__version__,
        "prompt": prompt,
        "logits_f32": [[float(x) for x in row] for row in logits.tolist()],
        "greedy_f32": g32,
        "greedy_bf16": gbf,
        "inv_freq": inv_freq,
    }
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(golden, f)
    for sub in ("f32", "bf16"):
        for junk in ("generation_config.json",):
            p = os.path.join(d, sub, junk)
            if os.path.exists(p):
                os.remove(p)
    from safetensors import safe_open
    with safe_open(os.path.join(d, "f32", "model.safetensors"), "pt") as f:
        keys = sorted(f.keys())
    print(name, "keys:", len(keys), [k for k in keys if "layers.0." in k or "layers" not in k])
    print(name, "config:", open(os.path.join(d, "f32", "config.json")).read())
    print(name, "max|logit|", float(logits.abs().max()), "greedy", g32[:8], "bf16", gbf[:8])


if __name__ == "__main__":
    sys.exit(main())

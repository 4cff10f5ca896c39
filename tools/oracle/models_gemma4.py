#!/usr/bin/env python3
"""Golden fixtures for mlxgo's Gemma 4 text models, from HF transformers.

Builds tiny random Gemma4ForCausalLM models (one per variant the Go code
supports), widens their random init so that logits are far from flat,
and writes for each variant a folder

    <out>/<variant>/f32/{config.json, model.safetensors}
    <out>/<variant>/bf16/{config.json, model.safetensors}
    <out>/<variant>/golden.json

golden.json holds the prompt ids, HF's f32 logits for the whole prompt
(a prompt longer than the sliding window), HF's greedy continuation
decoded through HF's own caches (32 tokens in f32, 16 in bf16), the
bf16 prompt logits, and the per-layer attention shapes HF built (so the
Go side can check its reading of the config).

Run where torch and transformers (5.x) are installed:

    PYTHONUNBUFFERED=1 python3 tools/oracle/models_gemma4.py OUTDIR

Reruns with the same transformers give the same files (fixed seeds, CPU).
"""

import copy
import json
import os
import sys

# tools/oracle holds a tokenizers.py of its own, which would shadow the
# tokenizers package transformers imports.
_here = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != _here]

import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import save_file
from transformers import Gemma4ForCausalLM, Gemma4TextConfig

PROMPT_LEN = 24
F32_NEW = 32
BF16_NEW = 16

BASE = dict(
    vocab_size=256,
    hidden_size=64,
    intermediate_size=96,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    global_head_dim=32,
    hidden_activation="gelu_pytorch_tanh",
    max_position_embeddings=4096,
    rms_norm_eps=1e-6,
    pad_token_id=0,
    eos_token_id=1,
    bos_token_id=2,
    sliding_window=8,
    final_logit_softcapping=30.0,
    hidden_size_per_layer_input=0,
    vocab_size_per_layer_input=256,
    tie_word_embeddings=True,
)

# Each variant: config overrides, and whether to write the nested
# (model_type gemma4, text_config, model.language_model.*) checkpoint form.
VARIANTS = {
    # explicit layer types, proportional RoPE on full layers (the default
    # rope_parameters), tied head, softcap.
    "gemma4_dense": dict(
        cfg=dict(
            num_hidden_layers=4,
            layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        ),
        nested=False,
    ),
    # attention_k_eq_v with its own global kv heads, derived layer types,
    # explicit rope parameters, untied head, nested config + prefixes.
    "gemma4_kv": dict(
        cfg=dict(
            num_hidden_layers=3,
            attention_k_eq_v=True,
            num_global_key_value_heads=1,
            tie_word_embeddings=False,
            final_logit_softcapping=None,
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.5, "rope_theta": 1000000.0},
            },
        ),
        nested=True,
    ),
    # per-layer inputs, KV sharing over the last 2 layers, double-wide MLP.
    "gemma4_ple": dict(
        cfg=dict(
            num_hidden_layers=5,
            layer_types=[
                "sliding_attention",
                "full_attention",
                "sliding_attention",
                "sliding_attention",
                "full_attention",
            ],
            hidden_size_per_layer_input=8,
            vocab_size_per_layer_input=256,
            num_kv_shared_layers=2,
            use_double_wide_mlp=True,
        ),
        nested=False,
    ),
    # MoE block next to the dense MLP, with k_eq_v full layers.
    "gemma4_moe": dict(
        cfg=dict(
            num_hidden_layers=3,
            layer_types=["sliding_attention", "sliding_attention", "full_attention"],
            enable_moe_block=True,
            num_experts=4,
            top_k_experts=2,
            moe_intermediate_size=32,
            attention_k_eq_v=True,
            num_global_key_value_heads=1,
        ),
        nested=False,
    ),
}


def widen(model, gen):
    """Replace HF's tiny init with one that gives non-flat logits."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("layernorm.weight") or ".router.scale" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith("per_expert_scale"):
                p.copy_(0.5 + torch.rand(p.shape, generator=gen))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
        for name, b in model.named_buffers():
            if name.endswith("layer_scalar"):
                b.copy_(0.5 + torch.rand(b.shape, generator=gen))


def greedy(model, prompt, n):
    """Greedy decoding through HF's cache, one token at a time."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    ids = prompt.clone()
    out = []
    gaps = []
    with torch.no_grad():
        logits = model(input_ids=ids, past_key_values=cache, use_cache=True).logits[:, -1].float()
        for _ in range(n):
            top = torch.topk(logits[0], 2)
            nxt = int(top.indices[0])
            gaps.append(float(top.values[0] - top.values[1]))
            out.append(nxt)
            step = torch.tensor([[nxt]], dtype=torch.long)
            logits = model(input_ids=step, past_key_values=cache, use_cache=True).logits[:, -1].float()
    return out, gaps


def greedy_nocache(model, prompt, n):
    """Greedy decoding recomputing the whole sequence each step (cross-check)."""
    ids = prompt.clone()
    out = []
    with torch.no_grad():
        for _ in range(n):
            logits = model(input_ids=ids, use_cache=False).logits[0, -1].float()
            nxt = int(torch.argmax(logits))
            out.append(nxt)
            ids = torch.cat([ids, torch.tensor([[nxt]], dtype=torch.long)], dim=1)
    return out


def layer_shapes(model):
    rows = []
    for i, layer in enumerate(model.model.layers):
        a = layer.self_attn
        rows.append(
            dict(
                layer=i,
                type=model.config.layer_types[i],
                head_dim=a.head_dim,
                q_out=a.q_proj.out_features,
                k_out=a.k_proj.out_features if getattr(a, "k_proj", None) is not None else 0,
                has_v=getattr(a, "v_proj", None) is not None,
                kv_shared=bool(a.is_kv_shared_layer),
                mlp_inter=layer.mlp.intermediate_size,
            )
        )
    return rows


def save_checkpoint(model, folder, nested, dtype_name):
    os.makedirs(folder, exist_ok=True)
    cfg = model.config.to_dict()
    sd = model.state_dict()
    tensors = {}
    for k, v in sd.items():
        if model.config.tie_word_embeddings and k == "lm_head.weight":
            continue
        if nested:
            if k.startswith("model."):
                k = "model.language_model." + k[len("model.") :]
        tensors[k] = v.detach().contiguous().clone()
    save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    if nested:
        text = dict(cfg)
        for drop in ("architectures", "transformers_version"):
            text.pop(drop, None)
        outer = {
            "architectures": ["Gemma4ForConditionalGeneration"],
            "model_type": "gemma4",
            "text_config": text,
            "tie_word_embeddings": cfg.get("tie_word_embeddings", True),
            "torch_dtype": dtype_name,
            "transformers_version": transformers.__version__,
        }
        # a nested checkpoint keeps eos ids at the top level too
        outer["eos_token_id"] = cfg.get("eos_token_id")
        cfg = outer
    else:
        cfg["torch_dtype"] = dtype_name
        cfg["architectures"] = ["Gemma4ForCausalLM"]
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True, default=str)


def build(name, spec, out):
    kw = dict(BASE)
    kw.update(spec["cfg"])
    cfg = Gemma4TextConfig(**kw)
    torch.manual_seed(1234)
    model = Gemma4ForCausalLM(cfg).eval()
    try:
        model.set_attn_implementation("eager")
    except Exception:
        model.config._attn_implementation = "eager"
    gen = torch.Generator().manual_seed(sum(map(ord, name)))
    widen(model, gen)

    g = torch.Generator().manual_seed(7 + len(name))
    prompt = torch.randint(3, kw["vocab_size"], (1, PROMPT_LEN), generator=g)

    with torch.no_grad():
        logits = model(input_ids=prompt, use_cache=False).logits[0].float()
    ids32, gaps32 = greedy(model, prompt, F32_NEW)
    ids32_nc = greedy_nocache(model, prompt, F32_NEW)

    mb = copy.deepcopy(model).to(torch.bfloat16)
    with torch.no_grad():
        logits_bf = mb(input_ids=prompt, use_cache=False).logits[0].float()
    ids16, gaps16 = greedy(mb, prompt, BF16_NEW)

    d = os.path.join(out, name)
    save_checkpoint(model, os.path.join(d, "f32"), spec["nested"], "float32")
    save_checkpoint(mb, os.path.join(d, "bf16"), spec["nested"], "bfloat16")
    golden = dict(
        variant=name,
        transformers_version=transformers.__version__,
        torch_version=torch.__version__,
        prompt=prompt[0].tolist(),
        vocab_size=kw["vocab_size"],
        logits_f32=[[round(float(x), 7) for x in row] for row in logits],
        greedy_f32=ids32,
        greedy_f32_nocache=ids32_nc,
        greedy_f32_gaps=gaps32,
        logits_bf16=[[round(float(x), 5) for x in row] for row in logits_bf],
        greedy_bf16=ids16,
        greedy_bf16_gaps=gaps16,
        layers=layer_shapes(model),
    )
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(golden, f)
    print(
        f"{name}: max|logit|={logits.abs().max():.3f} greedy32={ids32[:8]}... "
        f"cache==nocache {ids32 == ids32_nc} min gap f32 {min(gaps32):.4f} bf16 {min(gaps16):.4f}"
    )


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "gemma4_fixtures"
    torch.set_num_threads(4)
    only = sys.argv[2:] or list(VARIANTS)
    print("transformers", transformers.__version__, "torch", torch.__version__)
    failed = []
    for name in only:
        try:
            build(name, VARIANTS[name], out)
        except Exception:  # keep going: one broken variant must not cost the others
            import traceback

            traceback.print_exc()
            failed.append(name)
    if failed:
        print("FAILED:", failed)
        sys.exit(1)


if __name__ == "__main__":
    main()

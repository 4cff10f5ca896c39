#!/usr/bin/env python3
"""Golden fixtures for mlxgo's generic dense tier, the Qwen3.5 / Qwen3-Next
hybrids and the MLA (DeepSeek-V3, GLM-4.5 MoE, GLM-5 DSA) models.

For every variant below it builds a tiny random Hugging Face model
(seeded, on the CPU, eager attention), widens the random init so that
logits are far from flat, and writes

    <out>/<variant>/f32/config.json, model.safetensors   (float32)
    <out>/<variant>/golden.json
        variant, hf_class, transformers   what made it
        prompt        24 token ids (longer than any sliding window and
                      than DSA's index_topk)
        logits_f32    HF's float32 logits at every prompt position [24][vocab]
        greedy_f32    HF's greedy continuation, 24 ids, each step
                      recomputing the whole sequence without a cache (so
                      the reference does not depend on HF's cache code)
        hidden_f32    HF's hidden states after the embeddings and after
                      each layer [layers+1][24][hidden] (for debugging)
        rope          every rotary buffer HF built (inv_freq, scaling)
        window        the smallest sliding window (0: none)

One run writes every variant; a variant that fails is reported and the
others go on. Run where torch and transformers 5.x are installed:

    PYTHONUNBUFFERED=1 python3 tools/oracle/models_more.py --out OUTDIR [--only a,b]

It also writes <variant>/bf16/ (the same weights cast to bfloat16; MoE
correction biases stay float32) and golden.json's greedy_bf16 (HF's greedy
continuation in bfloat16). The *_mtp variants add an MTP block instead
(see build_mtp) and golden.json's mtp_logits_f32.

Reruns with the same transformers give the same files.
"""
import argparse
import json
import os
import sys
import traceback

# tools/oracle holds a tokenizers.py of its own, which would shadow the
# tokenizers package transformers imports.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

PROMPT_LEN = 24
GREEDY = 24

BASE = dict(
    vocab_size=128,
    hidden_size=32,
    intermediate_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=128,
    rms_norm_eps=1e-6,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)

SW = ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]
HYBRID = ["linear_attention", "full_attention", "linear_attention", "full_attention"]


def variants():
    """(name, HF config class, list of kwargs to try in order)."""
    b = BASE
    out = []

    def add(name, cls, *alts):
        out.append((name, cls, [dict(b, **a) for a in alts]))

    # --- generic dense tier -------------------------------------------------
    add("llama_linear", "LlamaConfig",
        dict(num_hidden_layers=2, tie_word_embeddings=True, attention_bias=True, mlp_bias=True,
             rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}))
    add("mistral", "MistralConfig",
        dict(num_hidden_layers=2, tie_word_embeddings=False, sliding_window=8,
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0}))
    add("ministral", "MinistralConfig",
        dict(num_hidden_layers=4, tie_word_embeddings=False, sliding_window=8, layer_types=SW,
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0}))
    add("qwen2_yarn", "Qwen2Config",
        dict(num_hidden_layers=2, tie_word_embeddings=True, use_sliding_window=False,
             rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                              "original_max_position_embeddings": 32}))
    # Phi-3 takes its head size from hidden_size / num_attention_heads (8)
    rot = int(8 * 0.75) // 2
    add("phi3_longrope", "Phi3Config",
        dict(num_hidden_layers=2, tie_word_embeddings=False, sliding_window=None, head_dim=8,
             original_max_position_embeddings=64, partial_rotary_factor=0.75,
             rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                              "partial_rotary_factor": 0.75,
                              "original_max_position_embeddings": 64,
                              "short_factor": [1.0 + 0.3 * i for i in range(rot)],
                              "long_factor": [2.0 + 0.5 * i for i in range(rot)]}),
        dict(num_hidden_layers=2, tie_word_embeddings=False, sliding_window=None, head_dim=8,
             original_max_position_embeddings=64,
             rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                              "original_max_position_embeddings": 64,
                              "short_factor": [1.0 + 0.3 * i for i in range(4)],
                              "long_factor": [2.0 + 0.5 * i for i in range(4)]}))
    add("smollm3", "SmolLM3Config",
        dict(num_hidden_layers=4, tie_word_embeddings=True, no_rope_layer_interval=2,
             use_sliding_window=False,
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0}))
    add("olmo2", "Olmo2Config",
        dict(num_hidden_layers=2, tie_word_embeddings=False,
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0}))
    add("granite", "GraniteConfig",
        dict(num_hidden_layers=2, tie_word_embeddings=True, embedding_multiplier=3.0,
             attention_multiplier=0.1, residual_multiplier=0.6, logits_scaling=2.0,
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0}))
    add("starcoder2", "Starcoder2Config",
        dict(num_hidden_layers=2, tie_word_embeddings=True, use_bias=True, sliding_window=8,
             norm_epsilon=1e-5, hidden_act="gelu_pytorch_tanh",
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0}))
    gemma = dict(hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=24)
    add("gemma3", "Gemma3TextConfig",
        dict(gemma, num_hidden_layers=4, tie_word_embeddings=True, sliding_window=8, layer_types=SW,
             final_logit_softcapping=30.0,
             rope_parameters={"full_attention": {"rope_type": "linear", "rope_theta": 1000000.0, "factor": 2.0},
                              "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
        dict(gemma, num_hidden_layers=4, tie_word_embeddings=True, sliding_window=8, layer_types=SW,
             final_logit_softcapping=30.0))
    add("gemma2", "Gemma2Config",
        dict(gemma, num_hidden_layers=4, tie_word_embeddings=True, sliding_window=8, layer_types=SW,
             attn_logit_softcapping=20.0, final_logit_softcapping=30.0,
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0}))
    add("gemma", "GemmaConfig",
        dict(num_hidden_layers=2, tie_word_embeddings=True, hidden_act="gelu_pytorch_tanh",
             hidden_activation="gelu_pytorch_tanh",
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0}))
    add("glm4", "Glm4Config",
        dict(num_hidden_layers=2, tie_word_embeddings=False, partial_rotary_factor=0.5,
             attention_bias=True,
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}))

    # --- Qwen3.5 / Qwen3-Next hybrids --------------------------------------
    hyb = dict(num_hidden_layers=4, layer_types=HYBRID, tie_word_embeddings=False,
               linear_conv_kernel_dim=4, linear_key_head_dim=8, linear_value_head_dim=8,
               linear_num_key_heads=2, linear_num_value_heads=4)
    rope35 = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
              "mrope_section": [2, 1, 1], "mrope_interleaved": True}
    rope_next = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}
    moe = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
               shared_expert_intermediate_size=24, norm_topk_prob=True, decoder_sparse_step=1)
    add("qwen3_5", "Qwen3_5TextConfig", dict(hyb, rope_parameters=rope35),
        dict(hyb, rope_parameters=rope_next))
    add("qwen3_5_moe", "Qwen3_5MoeTextConfig", dict(hyb, **moe, rope_parameters=rope35),
        dict(hyb, **moe, rope_parameters=rope_next))
    add("qwen3_next", "Qwen3NextConfig", dict(hyb, **moe, mlp_only_layers=[], rope_parameters=rope_next))

    # --- MLA and DeepSeek-style MoE ---------------------------------------
    # head_dim is the rotary part (HF's rotary embedding reads it)
    mla = dict(num_hidden_layers=3, num_key_value_heads=4, tie_word_embeddings=False, head_dim=8,
               moe_intermediate_size=16, n_shared_experts=1, n_routed_experts=8,
               routed_scaling_factor=2.5, kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8,
               v_head_dim=16, qk_nope_head_dim=16, n_group=2, topk_group=1, num_experts_per_tok=2,
               first_k_dense_replace=1, norm_topk_prob=True)
    add("deepseek_v3", "DeepseekV3Config",
        dict(mla, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}))
    add("deepseek_v3_yarn", "DeepseekV3Config",
        dict(mla, rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                   "original_max_position_embeddings": 32, "beta_fast": 32.0,
                                   "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}))
    add("glm_moe_dsa", "GlmMoeDsaConfig",
        dict(mla, index_topk=8, index_head_dim=16, index_n_heads=2,
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0}))
    add("glm4_moe", "Glm4MoeConfig",
        dict(num_hidden_layers=3, tie_word_embeddings=False, moe_intermediate_size=16,
             n_shared_experts=1, n_routed_experts=8, routed_scaling_factor=2.5, n_group=2,
             topk_group=1, num_experts_per_tok=2, first_k_dense_replace=1, norm_topk_prob=True,
             use_qk_norm=True, attention_bias=True, partial_rotary_factor=0.5,
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}))
    # With 2 indexer heads a key whose ReLU scores are all zero ties others
    # at exactly 0, and torch.topk's order among ties decides the selection
    # (glm_moe_dsa above is compared only where every key is selected); 8
    # heads make such ties rare. Appended last so the seeds above stay.
    add("glm_moe_dsa_h8", "GlmMoeDsaConfig",
        dict(mla, index_topk=8, index_head_dim=16, index_n_heads=8,
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0}))
    # Multi-token prediction: the models are built with one more layer,
    # which becomes the MTP block (see build_mtp). Appended last as well.
    add("deepseek_v3_mtp", "DeepseekV3Config",
        dict(mla, num_hidden_layers=4, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}))
    add("glm_moe_dsa_mtp", "GlmMoeDsaConfig",
        dict(mla, num_hidden_layers=4, index_topk=8, index_head_dim=16, index_n_heads=8,
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0}))
    add("qwen3_next_mtp", "Qwen3NextConfig",
        dict(hyb, **moe, num_hidden_layers=5, layer_types=HYBRID + ["full_attention"],
             mlp_only_layers=[], rope_parameters=rope_next))
    add("qwen3_5_mtp", "Qwen3_5TextConfig",
        dict(hyb, num_hidden_layers=5, layer_types=HYBRID + ["full_attention"], rope_parameters=rope35),
        dict(hyb, num_hidden_layers=5, layer_types=HYBRID + ["full_attention"], rope_parameters=rope_next))
    return out


# MTP variants: HF builds L+1 decoder layers; the last is the MTP block's
# decoder layer, the model proper runs the first L. The checkpoint stores
# it the way DeepSeek-V3 / GLM (model.layers.L.{enorm,hnorm,eh_proj,
# shared_head.norm,...}) or Qwen3-Next (mtp.{fc,pre_fc_norm_embedding,
# pre_fc_norm_hidden,layers.0,norm}) do.
MTP = {"deepseek_v3_mtp": "deepseek", "glm_moe_dsa_mtp": "deepseek", "qwen3_next_mtp": "qwen", "qwen3_5_mtp": "qwen"}


def widen(torch, model, seed):
    """Random init wide enough that logits are spread out: weights N(0, 0.15);
    norm weights 1 + N(0, 0.1), or N(0, 0.1) where HF starts them at zero
    (Gemma-style and zero-centred norms, which scale by 1 + w); biases
    N(0, 0.1); router correction biases N(0, 0.5)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and p.ndim == 1 and not name.endswith("bias"):
                base = 0.0 if bool((p == 0).all()) else 1.0
                p.copy_(base + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias") or p.ndim == 1:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.15 * torch.randn(p.shape, generator=g))
        for name, buf in model.named_buffers():
            if "correction_bias" in name:
                buf.copy_(0.5 * torch.randn(buf.shape, generator=g))


def greedy(torch, model, prompt, n):
    ids = list(prompt)
    for _ in range(n):
        out = model(torch.tensor([ids]), use_cache=False).logits[0, -1]
        ids.append(int(torch.argmax(out.float()).item()))
    return ids[len(prompt):]


def rope_buffers(model):
    out = {}
    for name, buf in model.named_buffers():
        if "inv_freq" in name:
            out[name] = [float(x) for x in buf.float().flatten().tolist()]
    for name, mod in model.named_modules():
        s = getattr(mod, "attention_scaling", None)
        if isinstance(s, (int, float)):
            out[name + ".attention_scaling"] = float(s)
    return out


def build(torch, transformers, out, i, name, cls_name, alts):
    from safetensors.torch import save_file

    last = None
    cfg = None
    for kw in alts:
        try:
            cfg = getattr(transformers, cls_name)(**kw)
            break
        except Exception as e:  # try the next spelling of the config
            last = e
            print(name, "config attempt failed:", repr(e))
    if cfg is None:
        raise last
    torch.manual_seed(1234 + i)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    model = model.float().eval()
    widen(torch, model, 99 + i)
    if getattr(cfg, "tie_word_embeddings", False):
        model.tie_weights()
    g = torch.Generator().manual_seed(7 + i)
    prompt = torch.randint(3, cfg.vocab_size, (PROMPT_LEN,), generator=g).tolist()
    res = model(torch.tensor([prompt]), use_cache=False, output_hidden_states=True)
    logits = res.logits[0].float()
    hidden = [h[0].float().tolist() for h in res.hidden_states] if res.hidden_states is not None else []
    d = os.path.join(out, name)
    f32 = os.path.join(d, "f32")
    if name in MTP:
        build_mtp(torch, model, cfg, name, prompt, d, f32, 500 + i)
        return
    g32 = greedy(torch, model, prompt, GREEDY)
    model.save_pretrained(f32, safe_serialization=True)
    for junk in ("generation_config.json",):
        p = os.path.join(f32, junk)
        if os.path.exists(p):
            os.remove(p)
    windows = [getattr(cfg, "sliding_window", None) or 0]
    lt = getattr(cfg, "layer_types", None)
    if lt is not None and not any("sliding" in t for t in lt):
        windows = [0]
    if name in ("qwen2_yarn", "smollm3"):
        windows = [0]
    golden = {
        "variant": name,
        "hf_class": type(model).__name__,
        "transformers": transformers.__version__,
        "prompt": prompt,
        "logits_f32": [[float(x) for x in row] for row in logits.tolist()],
        "greedy_f32": g32,
        "hidden_f32": hidden,
        "rope": rope_buffers(model),
        "window": int(min([w for w in windows if w] or [0])),
    }
    # the same weights in bfloat16, and HF's greedy continuation there
    mb = model.to(torch.bfloat16)
    for mname, sub in mb.named_modules():  # kept in float32, as HF loads it
        buf = getattr(sub, "e_score_correction_bias", None)
        if buf is not None:
            sub.e_score_correction_bias = buf.float()
    mb.save_pretrained(os.path.join(d, "bf16"), safe_serialization=True)
    p = os.path.join(d, "bf16", "generation_config.json")
    if os.path.exists(p):
        os.remove(p)
    golden["greedy_bf16"] = greedy(torch, mb, prompt, GREEDY)
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(golden, f)
    from safetensors import safe_open
    with safe_open(os.path.join(f32, "model.safetensors"), "pt") as f:
        keys = sorted(f.keys())
        shapes = {k: list(f.get_slice(k).get_shape()) for k in keys}
    size = os.path.getsize(os.path.join(f32, "model.safetensors"))
    print("==", name, type(model).__name__, "bytes", size)
    print(name, "tensors:", {k: v for k, v in shapes.items() if "layers." not in k or ".0." in k or ".1." in k})
    print(name, "config:", open(os.path.join(f32, "config.json")).read())
    print(name, "max|logit|", float(logits.abs().max()), "std", float(logits.std()), "greedy", g32)


def causal_mask(torch, t):
    m = torch.full((t, t), torch.finfo(torch.float32).min)
    return torch.triu(m, diagonal=1)[None, None]


def build_mtp(torch, model, cfg, name, prompt, d, f32, seed):
    """Saves the first L layers as the model and the last as its MTP
    block, with golden logits of both.

    MTP at position i reads the model's final-normed hidden state h_i and
    the embedding of token i+1: x = proj([norm_e(embed(t_{i+1})),
    norm_h(h_i)]), then the decoder layer over x at positions 0..T-2 (its
    own causal attention), then a norm and the head. mtp_logits_f32[i]
    predicts token i+2."""
    import sys as _sys
    from safetensors.torch import load_file, save_file
    mod = _sys.modules[type(model).__module__]
    kind = MTP[name]
    inner = model.model
    L = len(inner.layers) - 1
    hidden = cfg.hidden_size
    prefix = type(model).__name__.replace("ForCausalLM", "")
    Norm = getattr(mod, prefix + "RMSNorm")
    g = torch.Generator().manual_seed(seed)
    extra = {}
    norms = {}
    for key in ("e", "h", "out"):
        n = Norm(hidden, eps=cfg.rms_norm_eps)
        with torch.no_grad():
            base = 0.0 if bool((n.weight == 0).all()) else 1.0
            n.weight.copy_(base + 0.1 * torch.randn(n.weight.shape, generator=g))
        norms[key] = n.float().eval()
    proj = torch.nn.Linear(2 * hidden, hidden, bias=False)
    with torch.no_grad():
        proj.weight.copy_(0.15 * torch.randn(proj.weight.shape, generator=g))
    # the checkpoint: HF's save of L+1 layers, the last renamed
    model.save_pretrained(f32, safe_serialization=True)
    for junk in ("generation_config.json",):
        p = os.path.join(f32, junk)
        if os.path.exists(p):
            os.remove(p)
    st = load_file(os.path.join(f32, "model.safetensors"))
    lp = "model.layers.%d." % L
    out = {}
    for k, v in st.items():
        if k.startswith(lp):
            rest = k[len(lp):]
            out[(lp if kind == "deepseek" else "mtp.layers.0.") + rest] = v
        else:
            out[k] = v
    if kind == "deepseek":
        out[lp + "enorm.weight"] = norms["e"].weight.detach().clone()
        out[lp + "hnorm.weight"] = norms["h"].weight.detach().clone()
        out[lp + "eh_proj.weight"] = proj.weight.detach().clone()
        out[lp + "shared_head.norm.weight"] = norms["out"].weight.detach().clone()
        if name.startswith("deepseek"):  # DeepSeek-V3 stores its own copies
            out[lp + "embed_tokens.weight"] = inner.embed_tokens.weight.detach().clone()
            out[lp + "shared_head.head.weight"] = model.lm_head.weight.detach().clone()
    else:
        out["mtp.pre_fc_norm_embedding.weight"] = norms["e"].weight.detach().clone()
        out["mtp.pre_fc_norm_hidden.weight"] = norms["h"].weight.detach().clone()
        out["mtp.fc.weight"] = proj.weight.detach().clone()
        out["mtp.norm.weight"] = norms["out"].weight.detach().clone()
    save_file({k: v.contiguous() for k, v in out.items()}, os.path.join(f32, "model.safetensors"), metadata={"format": "pt"})
    conf = json.load(open(os.path.join(f32, "config.json")))
    conf["num_hidden_layers"] = L
    for key in ("layer_types", "mlp_layer_types", "indexer_types"):
        if isinstance(conf.get(key), list):
            conf[key] = conf[key][:L]
    if kind == "deepseek":
        conf["num_nextn_predict_layers"] = 1
    else:
        conf["mtp_num_hidden_layers"] = 1
    with open(os.path.join(f32, "config.json"), "w") as f:
        json.dump(conf, f, indent=2, sort_keys=True)
    # the model proper: the first L layers
    mtp_layer = inner.layers[L]
    inner.layers = torch.nn.ModuleList(list(inner.layers)[:L])
    model.config.num_hidden_layers = L
    inner.config.num_hidden_layers = L
    for key in ("layer_types", "mlp_layer_types", "indexer_types"):
        v = getattr(model.config, key, None)
        if isinstance(v, list):
            setattr(model.config, key, v[:L])
    ids = torch.tensor([prompt])
    # the rotary embeddings the model's own attention layers get (Qwen3.5's
    # multimodal rope builds them from its own position ids)
    seen = {}

    def grab(mod, args, kwargs):
        if "position_embeddings" in kwargs and kwargs["position_embeddings"] is not None:
            seen.setdefault("pe", kwargs["position_embeddings"])

    hooks = [layer.register_forward_pre_hook(grab, with_kwargs=True) for layer in inner.layers]
    h = inner(ids, use_cache=False).last_hidden_state  # final-normed
    for hk in hooks:
        hk.remove()
    logits = model.lm_head(h)[0].float()
    g32 = greedy(torch, model, prompt, GREEDY)
    # the MTP block
    t = len(prompt) - 1
    e = inner.embed_tokens(ids[:, 1:])
    x = proj(torch.cat([norms["e"](e), norms["h"](h[:, :t])], dim=-1))
    pos = torch.arange(t)[None]
    if "pe" in seen:  # positions 0..t-1 are the prompt's first t
        pe = tuple(a[..., :t, :] for a in seen["pe"])
    else:
        pe = inner.rotary_emb(x, pos)
    y = mtp_layer(hidden_states=x, attention_mask=causal_mask(torch, t), position_ids=pos,
                  past_key_values=None, use_cache=False, position_embeddings=pe)
    if isinstance(y, tuple):
        y = y[0]
    mtp_logits = model.lm_head(norms["out"](y))[0].float()
    golden = {
        "variant": name,
        "hf_class": type(model).__name__,
        "transformers": __import__("transformers").__version__,
        "prompt": prompt,
        "logits_f32": [[float(v) for v in row] for row in logits.tolist()],
        "greedy_f32": g32,
        "mtp_logits_f32": [[float(v) for v in row] for row in mtp_logits.tolist()],
        "window": 0,
    }
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(golden, f)
    print("==", name, "L", L, "max|logit|", float(logits.abs().max()), "mtp max|logit|",
          float(mtp_logits.abs().max()), "greedy", g32)
    print(name, "mtp tensors:", sorted(k for k in out if k.startswith(lp) or k.startswith("mtp.")))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    import torch
    import transformers

    torch.set_grad_enabled(False)
    torch.use_deterministic_algorithms(True)
    print("torch", torch.__version__, "transformers", transformers.__version__)
    failed = []
    for i, (name, cls_name, alts) in enumerate(variants()):
        if args.only and name not in args.only.split(","):
            continue
        try:
            build(torch, transformers, args.out, i, name, cls_name, alts)
        except Exception:  # one broken variant should not cost the others
            traceback.print_exc()
            failed.append(name)
    print("failed:", failed)
    return 0


if __name__ == "__main__":
    sys.exit(main())

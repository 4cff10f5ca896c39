#!/usr/bin/env python3
"""Golden fixtures for mlxgo's Gemma 4 assistant drafter, from HF transformers.

Builds tiny random Gemma4AssistantForCausalLM drafters for the gemma4_dense
fixture (model/testdata/gemma4_dense/f32, the target: hidden 64, sliding
layers of head size 16 and full layers of 32, 2 KV heads each), widens
their random init so that logits are far from flat, and writes

    <out>/gemma4_assistant/<variant>/{config.json, model.safetensors}
    <out>/gemma4_assistant/golden.json

Variants: "tied" (the head is the drafter's embedding table) and
"ordered" (use_ordered_embeddings: the centroid-routed masked head over
a random token ordering).

golden.json holds, per variant, what HF computes for one drafting round
the way SinglePositionMultiTokenCandidateGenerator runs it: the target
runs over prompt[:-1] with return_shared_kv_states and
output_hidden_states; the drafter's first input is the target's embedding
of prompt[-1] beside the target's last hidden state, at position
len(prompt)-1, with the target's shared K/V; each step's argmax token and
projected hidden state feed the next step (same position). Recorded: the
drafted tokens, every step's logits and projected hidden state, and
whether hidden_states[-1] is the final-normed state.

Run where torch and transformers (5.17) are installed, from the repo root:

    PYTHONUNBUFFERED=1 python3 tools/oracle/models_gemma4_assistant.py model/testdata

Reruns with the same transformers give the same files (fixed seeds, CPU).
"""

import json
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != _here]

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import Gemma4AssistantConfig, Gemma4AssistantForCausalLM, Gemma4ForCausalLM  # noqa: E402

STEPS = 4

TEXT = dict(
    model_type="gemma4_text",
    vocab_size=256,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    layer_types=["sliding_attention", "full_attention"],
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
    final_logit_softcapping=None,
    hidden_size_per_layer_input=0,
    vocab_size_per_layer_input=0,
    num_kv_shared_layers=2,
    tie_word_embeddings=True,
)

VARIANTS = {
    "tied": dict(use_ordered_embeddings=False),
    "ordered": dict(use_ordered_embeddings=True, num_centroids=16, centroid_intermediate_top_k=4),
}


def widen(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
        for name, b in model.named_buffers():
            if name.endswith("layer_scalar"):
                b.copy_(0.5 + torch.rand(b.shape, generator=gen))


def build(name, spec, target, prompt, out):
    cfg = Gemma4AssistantConfig(text_config=dict(TEXT), backbone_hidden_size=target.config.hidden_size, **spec)
    torch.manual_seed(4321)
    model = Gemma4AssistantForCausalLM(cfg).eval()
    try:
        model.set_attn_implementation("eager")
    except Exception:
        model.config._attn_implementation = "eager"
    gen = torch.Generator().manual_seed(sum(map(ord, name)))
    widen(model, gen)
    if model.masked_embedding is not None:
        perm = torch.randperm(TEXT["vocab_size"], generator=gen)
        model.masked_embedding.token_ordering.copy_(perm)

    with torch.no_grad():
        t = target(input_ids=prompt[:, :-1], use_cache=True, output_hidden_states=True, return_shared_kv_states=True)
    last_normed = t.hidden_states[-1]
    # the final norm's output, as the model returns it before the head
    inner = target.model(input_ids=prompt[:, :-1], use_cache=False)
    hidden_is_normed = bool(torch.allclose(last_normed, inner.last_hidden_state, atol=1e-6))
    shared = {k: (v[0], v[1]) for k, v in t.shared_kv_states.items()}
    h = last_normed[:, -1:]
    tok = prompt[:, -1:]
    pos = torch.tensor([[prompt.shape[1] - 1]], dtype=torch.long)
    embed = target.get_input_embeddings()
    toks, logits, hiddens = [], [], []
    with torch.no_grad():
        for _ in range(STEPS):
            x = torch.cat([embed(tok), h], dim=-1)
            o = model(inputs_embeds=x, position_ids=pos, shared_kv_states=shared, use_cache=False)
            tok = o.logits.argmax(dim=-1)
            h = o.last_hidden_state
            toks.append(int(tok[0, 0]))
            logits.append([round(float(v), 6) for v in o.logits[0, 0]])
            hiddens.append([round(float(v), 6) for v in h[0, 0]])

    d = os.path.join(out, "gemma4_assistant", name)
    model.save_pretrained(d, safe_serialization=True)
    print(f"{name}: drafts {toks} max|logit| {max(abs(v) for r in logits for v in r):.3f} normed {hidden_is_normed}")
    return dict(drafts=toks, logits=logits, hidden=hiddens, hidden_is_normed=hidden_is_normed,
                shared_kv_shapes={k: [list(v[0].shape), list(v[1].shape)] for k, v in shared.items()})


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "model/testdata"
    torch.set_num_threads(4)
    print("transformers", transformers.__version__, "torch", torch.__version__)
    target = Gemma4ForCausalLM.from_pretrained(os.path.join(out, "gemma4_dense", "f32"), torch_dtype=torch.float32).eval()
    try:
        target.set_attn_implementation("eager")
    except Exception:
        target.config._attn_implementation = "eager"
    with open(os.path.join(out, "gemma4_dense", "golden.json")) as f:
        prompt = torch.tensor([json.load(f)["prompt"]], dtype=torch.long)
    golden = dict(transformers_version=transformers.__version__, torch_version=torch.__version__,
                  target="gemma4_dense/f32", prompt=prompt[0].tolist(), steps=STEPS, variants={})
    for name, spec in VARIANTS.items():
        golden["variants"][name] = build(name, spec, target, prompt, out)
    with open(os.path.join(out, "gemma4_assistant", "golden.json"), "w") as f:
        json.dump(golden, f)


if __name__ == "__main__":
    main()

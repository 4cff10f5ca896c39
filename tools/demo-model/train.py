#!/usr/bin/env python3
"""Train mlxgo's embedded demo model: a tiny Gemma 4 text model.

Input: the corpus prepare_data.py wrote (JSON lines of public-domain
English). Output folder OUT:

    OUT/bf16/   config.json, model.safetensors (bfloat16), tokenizer.json,
                tokenizer_config.json, generation_config.json
    OUT/golden.json   HF transformers' greedy continuations (ids, top-2 gaps,
                      text) and last-position logits for a few prompts,
                      computed on the saved bf16 weights
    OUT/samples.txt   sampled text for the README

Steps: train a byte-fallback BPE tokenizer with Gemma-style special
tokens; train Gemma4ForCausalLM (sliding and full attention layers) in
f32 weights with bf16 autocast until a wall-clock budget is spent; save
bf16; reload the folder with transformers as a check; record goldens.

    PYTHONUNBUFFERED=1 python3 tools/demo-model/train.py CORPUS OUT [SECONDS]

Needs a CUDA GPU, torch, transformers 5.x and tokenizers. Fixed seeds;
the time budget makes the step count (and so the weights) vary a little
from run to run, so the golden file is always regenerated with the model.
"""

import copy
import json
import math
import os
import random
import re
import sys
import time

import torch
import torch.nn.functional as F

VOCAB = 4096
SEQ = 256
BATCH = 128
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
PAD, EOS, BOS, UNK, SOT, EOT = range(len(SPECIALS))
CHAT_FRACTION = 0.15

# Gemma's turn format. tokenizer_config.json carries it as the chat template.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)

MODEL_CFG = dict(
    vocab_size=VOCAB,
    hidden_size=256,
    intermediate_size=768,
    num_hidden_layers=6,
    layer_types=[
        "sliding_attention",
        "sliding_attention",
        "full_attention",
        "sliding_attention",
        "sliding_attention",
        "full_attention",
    ],
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    global_head_dim=64,
    hidden_activation="gelu_pytorch_tanh",
    max_position_embeddings=4096,
    rms_norm_eps=1e-6,
    pad_token_id=PAD,
    eos_token_id=EOS,
    bos_token_id=BOS,
    sliding_window=128,
    final_logit_softcapping=30.0,
    hidden_size_per_layer_input=0,
    vocab_size_per_layer_input=VOCAB,
    num_kv_shared_layers=0,
    attention_k_eq_v=False,
    use_double_wide_mlp=False,
    enable_moe_block=False,
    tie_word_embeddings=True,
)

SENT = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'])")


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


def load_docs(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def paragraphs(docs):
    """Paragraph-sized pieces: Moby-Dick has blank-line paragraphs; the
    addresses are single lines, cut at sentence ends every ~800 chars."""
    out = []
    for d in docs:
        for p in d["text"].split("\n\n"):
            p = p.strip()
            if not p:
                continue
            if len(p) <= 1200:
                out.append(p)
                continue
            cur = ""
            for s in SENT.split(p):
                cur = f"{cur} {s}" if cur else s
                if len(cur) >= 800:
                    out.append(cur)
                    cur = ""
            if cur:
                out.append(cur)
    return out


def chat_sample(par, rng):
    """A user turn (the paragraph's opening sentence, sometimes with an
    instruction) and a model turn (what follows), in the chat format."""
    sents = SENT.split(par)
    if len(sents) < 2:
        return None
    first, rest = sents[0], " ".join(sents[1:])[:600]
    ask = rng.choice(["{}", "{}", "Continue: {}", "Go on. {}", "{} What next?"]).format(first)
    return f"<start_of_turn>user\n{ask}<end_of_turn>\n<start_of_turn>model\n{rest}<end_of_turn>\n"


def build_tokenizer(texts):
    """Byte-fallback BPE over Metaspace words, Gemma-style ids 0..5 for the
    special tokens, then the 256 byte tokens, then the learned pieces."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    def fresh(vocab=None, merges=None):
        t = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True))
        t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="never", split=True)
        t.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
        return t

    tok = fresh()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB - 256,
        special_tokens=SPECIALS,
        limit_alphabet=160,
        min_frequency=2,
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    learned = json.loads(tok.to_str())["model"]
    lv = learned["vocab"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in learned["merges"]]
    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for piece, _ in sorted(lv.items(), key=lambda kv: kv[1]):
        if piece not in vocab:
            vocab[piece] = len(vocab)
    assert len(vocab) <= VOCAB, len(vocab)
    tok = fresh(vocab, merges)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A <bos> $B", special_tokens=[("<bos>", BOS)]
    )
    for i, s in enumerate(SPECIALS):
        assert tok.token_to_id(s) == i, (s, tok.token_to_id(s))
    return tok


def tokenizer_config():
    return {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "additional_special_tokens": ["<start_of_turn>", "<end_of_turn>"],
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 4096,
        "padding_side": "left",
        "tokenizer_class": "PreTrainedTokenizerFast",
    }


def generation_config():
    return {
        "bos_token_id": BOS,
        "eos_token_id": [EOS, EOT],
        "pad_token_id": PAD,
        "do_sample": True,
        "temperature": 0.8,
        "top_k": 40,
        "top_p": 0.95,
        "max_new_tokens": 128,
    }


def encode_stream(tok, pars, rng):
    """One token stream: <bos> piece <eos> ... with some pieces as chats."""
    texts, n_chat = [], 0
    for p in pars:
        c = chat_sample(p, rng) if rng.random() < CHAT_FRACTION else None
        if c:
            n_chat += 1
        texts.append(c or p)
    ids = []
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        ids.append(BOS)
        ids.extend(enc.ids)
        ids.append(EOS)
    return torch.tensor(ids, dtype=torch.int32), n_chat


def make_model(dev):
    from transformers import Gemma4ForCausalLM, Gemma4TextConfig

    cfg = Gemma4TextConfig(**MODEL_CFG)
    torch.manual_seed(1234)
    model = Gemma4ForCausalLM(cfg)
    try:
        model.set_attn_implementation("sdpa")
    except Exception as e:  # eager still trains, slower
        log("sdpa unavailable:", e)
    return model.to(dev)


def train(model, data, val, seconds, dev):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    other = [p for n, p in model.named_parameters() if p.dim() < 2]
    peak = 3e-3
    opt = torch.optim.AdamW(
        [dict(params=decay, weight_decay=0.1), dict(params=other, weight_decay=0.0)],
        lr=peak, betas=(0.9, 0.95), eps=1e-8, fused=True,
    )
    data = data.to(dev).long()
    val = val.to(dev).long()
    g = torch.Generator(device=dev).manual_seed(0)
    span = torch.arange(SEQ + 1, device=dev)

    def batch(src, n, gen):
        off = torch.randint(0, src.numel() - SEQ - 1, (n, 1), device=dev, generator=gen)
        return src[off + span]

    def loss_of(x):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=x[:, :-1], use_cache=False).logits
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))

    vg = torch.Generator(device=dev).manual_seed(1)
    vbatches = [batch(val, 64, vg) for _ in range(4)]

    def evaluate():
        model.eval()
        with torch.no_grad():
            v = sum(float(loss_of(b)) for b in vbatches) / len(vbatches)
        model.train()
        return v

    model.train()
    t0 = time.time()
    step, hist = 0, []
    warm = 0.03
    while True:
        frac = (time.time() - t0) / seconds
        if frac >= 1:
            break
        lr = peak * frac / warm if frac < warm else peak * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * (frac - warm) / (1 - warm))))
        for grp in opt.param_groups:
            grp["lr"] = lr
        loss = loss_of(batch(data, BATCH, g))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 200 == 0 or step == 1:
            l = float(loss)
            hist.append((step, round(time.time() - t0, 1), l))
            tps = step * BATCH * SEQ / (time.time() - t0)
            log(f"step {step} t={time.time()-t0:.0f}s lr={lr:.2e} loss={l:.3f} tok/s={tps:,.0f}")
        if step % 2000 == 0:
            log(f"  val loss {evaluate():.3f}")
    v = evaluate()
    log(f"done: {step} steps in {time.time()-t0:.0f}s, final val loss {v:.3f}")
    return dict(steps=step, seconds=round(time.time() - t0, 1), val_loss=v, history=hist,
                tokens_seen=step * BATCH * SEQ)


def save_checkpoint(model, folder):
    """config.json and a bf16 model.safetensors in the names transformers
    writes (tied head left out), as tools/oracle/models_gemma4.py does."""
    from safetensors.torch import save_file
    import transformers

    os.makedirs(folder, exist_ok=True)
    cfg = model.config.to_dict()
    tensors = {}
    for k, v in model.state_dict().items():
        if model.config.tie_word_embeddings and k == "lm_head.weight":
            continue
        tensors[k] = v.detach().to("cpu").contiguous().clone()
    save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    cfg["torch_dtype"] = "bfloat16"
    cfg["architectures"] = ["Gemma4ForCausalLM"]
    cfg["transformers_version"] = transformers.__version__
    cfg.pop("_attn_implementation_autoset", None)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True, default=str)


def greedy(model, ids, n):
    """Greedy decoding through HF's cache; ids and top-2 gaps per step."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    x = torch.tensor([ids], dtype=torch.long)
    out, gaps = [], []
    with torch.no_grad():
        first = model(input_ids=x, past_key_values=cache, use_cache=True).logits[0, -1].float()
        logits = first
        for _ in range(n):
            top = torch.topk(logits, 2)
            nxt = int(top.indices[0])
            gaps.append(round(float(top.values[0] - top.values[1]), 5))
            out.append(nxt)
            logits = model(input_ids=torch.tensor([[nxt]]), past_key_values=cache, use_cache=True).logits[0, -1].float()
    return out, gaps, first


def greedy_nocache(model, ids, n):
    x = torch.tensor([ids], dtype=torch.long)
    out = []
    with torch.no_grad():
        for _ in range(n):
            nxt = int(torch.argmax(model(input_ids=x, use_cache=False).logits[0, -1]))
            out.append(nxt)
            x = torch.cat([x, torch.tensor([[nxt]])], dim=1)
    return out


PROMPTS = [
    ("Call me Ishmael.", True),
    ("The state of the Union", True),
    ("The whale", True),
    ("It was a dark and stormy night, and the ship", True),
    (None, False),  # chat, rendered from the template below
    (None, True),  # long: a passage over the sliding window
]
CHAT = [{"role": "user", "content": "Tell me about the sea."}]
NEW_TOKENS = 40


def goldens(folder, tok, corpus_pars, out_path):
    """HF greedy on the saved bf16 folder (CPU, eager attention)."""
    import transformers
    from transformers import AutoTokenizer, Gemma4ForCausalLM

    model = Gemma4ForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).eval()
    try:
        model.set_attn_implementation("eager")
    except Exception:
        model.config._attn_implementation = "eager"
    f32w = copy.deepcopy(model).float()
    hf_tok = None
    try:
        hf_tok = AutoTokenizer.from_pretrained(folder)
        chat_text = hf_tok.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
    except Exception as e:
        log("AutoTokenizer/apply_chat_template failed:", repr(e))
        chat_text = "<bos><start_of_turn>user\nTell me about the sea.<end_of_turn>\n<start_of_turn>model\n"
    long_text = next(p for p in corpus_pars if 700 < len(p) < 1100)
    rows = []
    for text, special in PROMPTS:
        if text is None:
            text = chat_text if not special else long_text
        ids = tok.encode(text, add_special_tokens=special).ids
        hf_ids = None
        if hf_tok is not None:
            hf_ids = hf_tok(text, add_special_tokens=special)["input_ids"]
        out, gaps, first = greedy(model, ids, NEW_TOKENS)
        nc = greedy_nocache(model, ids, NEW_TOKENS)
        out32, gaps32, first32 = greedy(f32w, ids, NEW_TOKENS)
        rows.append(dict(
            text=text,
            add_special=special,
            ids=ids,
            autotokenizer_ids_match=(hf_ids == ids) if hf_ids is not None else None,
            greedy_bf16=out,
            greedy_bf16_gaps=gaps,
            greedy_bf16_nocache_match=(nc == out),
            greedy_bf16_text=tok.decode(out, skip_special_tokens=False),
            greedy_f32=out32,
            greedy_f32_gaps=gaps32,
            logits_bf16_last=[round(float(x), 4) for x in first],
            logits_f32_last=[round(float(x), 5) for x in first32],
        ))
        log(f"prompt {len(ids)} tokens: {text[:40]!r} -> {tok.decode(out)!r} min gap {min(gaps):.3f} "
            f"cache==nocache {nc == out} bf16==f32 {out == out32}")
    g = dict(
        transformers_version=transformers.__version__,
        torch_version=torch.__version__,
        chat_messages=CHAT,
        chat_text=chat_text,
        new_tokens=NEW_TOKENS,
        prompts=rows,
    )
    with open(out_path, "w") as f:
        json.dump(g, f, indent=1)
    return model


def samples(model, tok, path):
    """Sampled continuations for the README (temperature 0.8, top-k 40)."""
    torch.manual_seed(7)
    lines = []
    for text in ["Call me Ishmael.", "The Congress", "The sea was", "Our country"]:
        ids = torch.tensor([tok.encode(text).ids])
        with torch.no_grad():
            out = model.generate(ids, do_sample=True, temperature=0.8, top_k=40, max_new_tokens=60,
                                 pad_token_id=PAD, eos_token_id=[EOS, EOT])
        s = tok.decode(out[0].tolist(), skip_special_tokens=True)
        lines.append(s)
        log("sample:", repr(s))
    with open(path, "w") as f:
        f.write("\n\n".join(lines) + "\n")


def main():
    corpus, out = sys.argv[1], sys.argv[2]
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 240.0
    os.makedirs(out, exist_ok=True)
    rng = random.Random(0)
    docs = load_docs(corpus)
    pars = paragraphs(docs)
    log(f"{len(docs)} documents, {len(pars)} paragraphs, {sum(map(len, pars))} chars")

    t = time.time()
    tok = build_tokenizer(pars)
    log(f"tokenizer: {tok.get_vocab_size()} tokens in {time.time()-t:.0f}s")
    bf16 = os.path.join(out, "bf16")
    os.makedirs(bf16, exist_ok=True)
    tok.save(os.path.join(bf16, "tokenizer.json"))
    with open(os.path.join(bf16, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config(), f, indent=2, ensure_ascii=False)
    with open(os.path.join(bf16, "special_tokens_map.json"), "w") as f:
        json.dump({"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
                   "additional_special_tokens": ["<start_of_turn>", "<end_of_turn>"]}, f, indent=2)
    with open(os.path.join(bf16, "generation_config.json"), "w") as f:
        json.dump(generation_config(), f, indent=2)

    # hold out every 50th paragraph for validation
    train_p = [p for i, p in enumerate(pars) if i % 50]
    val_p = [p for i, p in enumerate(pars) if i % 50 == 0]
    t = time.time()
    data, n_chat = encode_stream(tok, train_p, rng)
    val, _ = encode_stream(tok, val_p, rng)
    log(f"tokens: train {data.numel():,} ({n_chat} chat samples), val {val.numel():,}, "
        f"{sum(map(len, train_p)) / data.numel():.2f} chars/token, {time.time()-t:.0f}s")

    dev = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    model = make_model(dev)
    n = sum(p.numel() for p in model.parameters())
    log(f"model: {n:,} parameters")
    stats = train(model, data, val, seconds, dev)
    stats["parameters"] = n
    stats["train_tokens"] = int(data.numel())
    model = model.to("cpu").to(torch.bfloat16).eval()
    save_checkpoint(model, bf16)
    with open(os.path.join(out, "train_stats.json"), "w") as f:
        json.dump(stats, f, indent=1)
    log("saved", bf16, sorted(os.listdir(bf16)))

    torch.set_num_threads(8)
    hf = goldens(bf16, tok, val_p, os.path.join(out, "golden.json"))
    try:
        samples(hf, tok, os.path.join(out, "samples.txt"))
    except Exception as e:
        log("sampling failed:", repr(e))


if __name__ == "__main__":
    main()

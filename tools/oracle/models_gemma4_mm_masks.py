#!/usr/bin/env python3
"""Attention-mask goldens for mlxgo's Gemma 4 media input, from HF transformers.

Reads the tiny fixture that models_gemma4_mm.py made (model/testdata/gemma4_mm)
and records two more sets of HF outputs next to it:

  SDPA: the fixture under attn_implementation="sdpa". In transformers 5.17
  eager attention reads the audio tower's mask inverted (see
  models_gemma4_mm.py); sdpa takes it as the boolean it is. Recorded: the
  audio tower and its projection for w1.wav, and the audio, image and both
  prompts' logits (same rows as golden.json) and greedy continuations.

  Bidirectional: the same weights with text_config.use_bidirectional_attention
  = "vision" (what the larger Gemma 4 checkpoints set), so that each image's
  soft tokens attend to one another (mm_token_type_ids, as Gemma4Processor
  returns them: 1 at image placeholders, 3 at audio ones). Recorded: every
  row's logits and the greedy continuation of a prompt with two images and of
  one with an image and an audio clip, and how far the logits move from the
  causal mask.

    <fixture>/golden_masks.json
    <fixture>/golden_masks.safetensors

Run where torch and transformers (5.x) are installed:

    PYTHONUNBUFFERED=1 python3 tools/oracle/models_gemma4_mm_masks.py model/testdata/gemma4_mm
"""

import importlib.util
import json
import os
import sys
import traceback

_here = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != _here]

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from PIL import Image  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

_spec = importlib.util.spec_from_file_location("g4mm", os.path.join(_here, "models_gemma4_mm.py"))
g4mm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(g4mm)
TOK, IMG_KW, NEW = g4mm.TOK, g4mm.IMG_KW, g4mm.NEW

report = {}


def load(fx, attn, bidi=False):
    from transformers import Gemma4Config, Gemma4ForConditionalGeneration

    cfg = Gemma4Config.from_pretrained(os.path.join(fx, "f32"))
    if bidi:
        cfg.text_config.use_bidirectional_attention = "vision"
    m = Gemma4ForConditionalGeneration.from_pretrained(
        os.path.join(fx, "f32"), config=cfg, attn_implementation=attn, dtype=torch.float32
    ).eval()
    return m


def mm_types(ids):
    t = torch.zeros_like(ids)
    t[ids == TOK["image_token_id"]] = 1
    t[ids == TOK["audio_token_id"]] = 3
    return t


def run(model, ids, kw, rows=None, types=False):
    ids = torch.tensor([ids], dtype=torch.long)
    kw = dict(kw)
    if types:
        kw["mm_token_type_ids"] = mm_types(ids)
    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False, **kw).logits[0].float()
        gen = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=NEW,
            do_sample=False,
            output_scores=True,
            return_dict_in_generate=True,
            **kw,
        )
    new = gen.sequences[0, ids.shape[1]:].tolist()
    gaps = [float(torch.topk(s[0].float(), 2).values.diff().abs()) for s in gen.scores]
    if rows is not None:
        logits = logits[rows]
    return logits.contiguous(), new, gaps


def main():
    fx = sys.argv[1] if len(sys.argv) > 1 else "model/testdata/gemma4_mm"
    torch.set_num_threads(4)
    print("transformers", transformers.__version__, "torch", torch.__version__)
    report.update(transformers_version=transformers.__version__, torch_version=torch.__version__)
    J = json.load(open(os.path.join(fx, "golden.json")))
    from safetensors.torch import load_file

    G0 = load_file(os.path.join(fx, "golden.safetensors"))
    G, out = {}, dict(report=report, sdpa={}, bidi={})

    from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor
    from transformers.models.gemma4.image_processing_gemma4 import Gemma4ImageProcessor

    proc = Gemma4ImageProcessor(**IMG_KW)
    fe = Gemma4AudioFeatureExtractor()
    media = os.path.join(fx, "media")
    img = {}
    for k, n in (("a", "a.png"), ("d", "d.png")):
        r = proc(images=[Image.open(os.path.join(media, n))], return_tensors="pt")
        img[k] = (r["pixel_values"], r["image_position_ids"], int(r["num_soft_tokens_per_image"][0]))
    x, rate = g4mm.read_wav_mono(os.path.join(media, "w1.wav"))
    r = fe([x], sampling_rate=16000, return_tensors="np")
    feat = torch.from_numpy(r["input_features"][0][None].astype(np.float32))
    fmask = torch.from_numpy(r["input_features_mask"][0][None])

    def kw_of(pr):
        kw = {}
        if "image" in pr:
            pv, pos, _ = img[pr["image"]]
            kw.update(pixel_values=pv, image_position_ids=pos)
        if "audio" in pr:
            kw.update(input_features=feat, input_features_mask=fmask)
        return kw

    # ---- SDPA
    try:
        m = load(fx, "sdpa")
        report["default_attn_implementation"] = load(fx, None).config._attn_implementation
        with torch.no_grad():
            ao = m.model.audio_tower(feat, fmask)
            emb = m.model.embed_audio(inputs_embeds=ao.last_hidden_state)
        G["sdpa_aud_w1_tower"] = ao.last_hidden_state[0].float().contiguous()
        G["sdpa_aud_w1_embed"] = emb[0].float().contiguous()
        out["sdpa"]["tower_max_abs_diff_vs_eager"] = float((G["sdpa_aud_w1_tower"] - G0["aud_w1_tower"]).abs().max())
        out["sdpa"]["tower_max_abs"] = float(G["sdpa_aud_w1_tower"].abs().max())
        for name, pr in J["prompts"].items():
            logits, new, gaps = run(m, pr["ids"], kw_of(pr), rows=pr["rows"])
            G[f"sdpa_logits_{name}"] = logits
            d = float((logits - G0[f"logits_{name}"]).abs().max())
            out["sdpa"][name] = dict(greedy=new, gaps=gaps, eager_greedy=pr["greedy"], max_abs_diff_vs_eager=d,
                                     max_abs_logit=float(logits.abs().max()))
            print("sdpa", name, out["sdpa"][name])
    except Exception:
        traceback.print_exc()
        report.setdefault("failed", []).append("sdpa")

    # ---- bidirectional image mask
    try:
        m = load(fx, "sdpa", bidi=True)
        report["bidi_text_config"] = m.config.text_config.use_bidirectional_attention
        g = torch.Generator().manual_seed(7)

        def txt(n):
            return torch.randint(3, 240, (n,), generator=g).tolist()

        na, nd = img["a"][2], img["d"][2]
        nw = J["audio"]["w1"]["soft_tokens"]
        B, E, I = TOK["boi_token_id"], TOK["eoi_token_id"], TOK["image_token_id"]
        prompts = {
            "two": dict(ids=[2] + txt(3) + [B] + [I] * na + [E] + txt(2) + [B] + [I] * nd + [E] + txt(2), images=["a", "d"]),
            "image_audio": dict(ids=[2] + txt(1) + [B] + [I] * na + [E] + txt(1) + [TOK["boa_token_id"]]
                                + [TOK["audio_token_id"]] * nw + [TOK["eoa_token_index"]] + txt(1), images=["a"], audio="w1"),
        }
        for name, pr in prompts.items():
            kw = {}
            pv = torch.cat([img[k][0] for k in pr["images"]], 0)
            pos = torch.cat([img[k][1] for k in pr["images"]], 0)
            kw.update(pixel_values=pv, image_position_ids=pos)
            if "audio" in pr:
                kw.update(input_features=feat, input_features_mask=fmask)
            logits, new, gaps = run(m, pr["ids"], kw, types=True)
            causal, cnew, _ = run(m, pr["ids"], kw, types=False)
            G[f"bidi_logits_{name}"] = logits
            out["bidi"][name] = dict(pr, len=len(pr["ids"]), greedy=new, gaps=gaps, causal_greedy=cnew,
                                     max_abs_logit=float(logits.abs().max()),
                                     max_abs_diff_vs_causal=float((logits - causal).abs().max()))
            print("bidi", name, {k: v for k, v in out["bidi"][name].items() if k != "ids"})
    except Exception:
        traceback.print_exc()
        report.setdefault("failed", []).append("bidi")

    save_file(G, os.path.join(fx, "golden_masks.safetensors"))
    with open(os.path.join(fx, "golden_masks.json"), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
    print("report", json.dumps(report))
    if report.get("failed"):
        sys.exit(1)


if __name__ == "__main__":
    main()

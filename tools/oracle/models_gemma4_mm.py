#!/usr/bin/env python3
"""Golden fixture for mlxgo's Gemma 4 image and audio input, from HF transformers.

Builds one tiny random Gemma4ForConditionalGeneration (text decoder with
per-layer inputs, a vision tower with clipped linears and standardisation,
an audio tower), widens its random init so logits are far from flat, makes
a few small test media files, runs HF's image processor (both backends)
and audio feature extractor on them, and records HF's outputs:

    <out>/gemma4_mm/f32/{config.json, model.safetensors, processor_config.json}
    <out>/gemma4_mm/media/{a.png, b.png, c.png, d.png, e.jpg, w1.wav, w2.wav, w3.wav}
    <out>/gemma4_mm/golden.json         metadata, ids, greedy, logits rows
    <out>/gemma4_mm/golden.safetensors  decoded pixels, processor outputs,
                                        mel features, tower outputs

Images: a.png 40x30 RGB (upscaled), b.png 160x120 (downscaled), e.jpg 48x36 (JPEG),
c.png 108x84 grayscale (already at its target size: no resize), d.png 30x120
RGB (tall). Audio: w1.wav 16 kHz int16 mono 0.5 s, w2.wav 16 kHz float32
stereo 0.3 s (mixdown), w3.wav 8 kHz int16 mono 0.25 s (no HF reference:
the feature extractor only takes 16 kHz; it is decoded but not compared).

Prompts (ids built the way Gemma4Processor expands its placeholders: boi,
N image tokens, eoi; boa, N audio tokens, eoa): an image prompt (a.png),
an audio prompt (w1.wav) and one with both (d.png, w1.wav). For each: HF's
float32 logits at a subset of rows (no cache) and HF's greedy continuation
through generate (cache on), with top-2 gaps.

Run where torch and transformers (5.x) are installed:

    PYTHONUNBUFFERED=1 python3 tools/oracle/models_gemma4_mm.py OUTDIR

Reruns with the same transformers give the same files (fixed seeds, CPU).

Note: the model runs with eager attention, and in transformers 5.17 the
audio tower's mask reaches Gemma4AudioAttention as eager's float mask
(0 allowed, min masked), which its masked_fill(mask.logical_not(), ...)
reads inverted: under eager each audio frame attends to the frames the
mask excludes. The audio goldens (aud_*, and the audio and both prompts'
logits and greedy ids) carry that; mlxgo's tower implements the mask as
meant (sdpa's boolean reading), and its tests reproduce the eager reading
only to compare with these goldens (model/gemma4_audio_test.go).
"""

import io
import json
import math
import os
import struct
import sys
import traceback

_here = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != _here]

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from PIL import Image  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

NEW = 10

TOK = dict(
    image_token_id=250,
    audio_token_id=251,
    boi_token_id=252,
    eoi_token_id=253,
    boa_token_id=254,
    eoa_token_index=255,
    video_token_id=249,
)

TEXT = dict(
    vocab_size=256,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=3,
    layer_types=["sliding_attention", "sliding_attention", "full_attention"],
    num_attention_heads=2,
    num_key_value_heads=1,
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
    hidden_size_per_layer_input=8,
    vocab_size_per_layer_input=256,
    tie_word_embeddings=True,
)

VISION = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=2,
    head_dim=16,
    hidden_activation="gelu_pytorch_tanh",
    rms_norm_eps=1e-6,
    pooling_kernel_size=3,
    patch_size=4,
    position_embedding_size=64,
    use_clipped_linears=True,
    standardize=True,
)

AUDIO = dict(
    hidden_size=32,
    num_hidden_layers=1,
    num_attention_heads=2,
    hidden_act="silu",
    subsampling_conv_channels=[128, 4],
    conv_kernel_size=5,
    residual_weight=0.5,
    attention_chunk_size=12,
    attention_context_left=13,
    attention_context_right=0,
    attention_logit_cap=50.0,
    use_clipped_linears=True,
    rms_norm_eps=1e-6,
    output_proj_dims=48,
)

IMG_KW = dict(patch_size=4, max_soft_tokens=70, pooling_kernel_size=3)

report = {}


def step(name):
    """Decorator-ish helper: run f, record failures, keep going."""

    def wrap(f):
        def run(*a, **k):
            try:
                return f(*a, **k)
            except Exception:
                traceback.print_exc()
                report.setdefault("failed", []).append(name)
                return None

        return run

    return wrap


# ---------------------------------------------------------------- media files


def make_images(d):
    rng = np.random.default_rng(11)
    out = {}

    def grad(h, w, c, amp=40):
        y, x = np.mgrid[0:h, 0:w]
        base = np.stack([(x * 255 / max(w - 1, 1)), (y * 255 / max(h - 1, 1)), ((x + y) * 127 / max(w + h - 2, 1))], -1)
        base = base[..., :c]
        noise = rng.integers(-amp, amp + 1, size=base.shape)
        return np.clip(base + noise, 0, 255).astype(np.uint8)

    Image.fromarray(grad(30, 40, 3), "RGB").save(os.path.join(d, "a.png"))
    b = grad(120, 160, 3, 8)
    b[40:80, 50:110] = [200, 30, 60]
    Image.fromarray(b, "RGB").save(os.path.join(d, "b.png"))
    Image.fromarray(grad(84, 108, 1)[..., 0], "L").save(os.path.join(d, "c.png"))
    Image.fromarray(grad(120, 30, 3), "RGB").save(os.path.join(d, "d.png"))
    Image.fromarray(grad(36, 48, 3, 10), "RGB").save(os.path.join(d, "e.jpg"), quality=90)
    for n in ("a.png", "b.png", "c.png", "d.png", "e.jpg"):
        out[n] = os.path.join(d, n)
    return out


def write_wav(path, rate, data, fmt):
    """data: float array [frames, channels] in [-1, 1]."""
    frames, ch = data.shape
    if fmt == "int16":
        pcm = np.clip(np.round(data * 32767), -32768, 32767).astype("<i2").tobytes()
        tag, bits = 1, 16
    else:
        pcm = data.astype("<f4").tobytes()
        tag, bits = 3, 32
    ba = ch * bits // 8
    hdr = b"RIFF" + struct.pack("<I", 36 + len(pcm)) + b"WAVE"
    hdr += b"fmt " + struct.pack("<IHHIIHH", 16, tag, ch, rate, rate * ba, ba, bits)
    hdr += b"data" + struct.pack("<I", len(pcm))
    with open(path, "wb") as f:
        f.write(hdr + pcm)


def read_wav_mono(path):
    """Decodes the WAVs made above: int16 / 32768, float as is; channel mean."""
    raw = open(path, "rb").read()
    tag, ch, rate, _, _, bits = struct.unpack("<HHIIHH", raw[20:36])
    pcm = raw[44:]
    if tag == 1:
        x = np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0
    else:
        x = np.frombuffer(pcm, "<f4").astype(np.float32)
    x = x.reshape(-1, ch)
    return x.mean(axis=1, dtype=np.float32).astype(np.float32), rate


def make_wavs(d):
    rng = np.random.default_rng(5)
    t = np.arange(8000) / 16000.0
    w1 = 0.5 * np.sin(2 * np.pi * (200 + 1500 * t) * t) + 0.05 * rng.standard_normal(t.shape)
    write_wav(os.path.join(d, "w1.wav"), 16000, w1[:, None], "int16")
    t = np.arange(4800) / 16000.0
    l = 0.4 * np.sin(2 * np.pi * 440 * t)
    r = 0.3 * np.sin(2 * np.pi * 660 * t) + 0.05 * rng.standard_normal(t.shape)
    write_wav(os.path.join(d, "w2.wav"), 16000, np.stack([l, r], -1), "float32")
    t = np.arange(2000) / 8000.0
    write_wav(os.path.join(d, "w3.wav"), 8000, (0.5 * np.sin(2 * np.pi * 300 * t))[:, None], "int16")
    return {n: os.path.join(d, n) for n in ("w1.wav", "w2.wav", "w3.wav")}


# --------------------------------------------------------------------- model


def widen(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1 and "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith("per_dim_scale"):
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))
            elif "position_embedding_table" in name:
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))
            elif ".bias" in name:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            else:
                fan_in = p.shape[-1] if p.ndim >= 2 else 1
                if p.ndim == 4:  # conv2d [out, in, kh, kw]
                    fan_in = p.shape[1] * p.shape[2] * p.shape[3]
                if p.ndim == 3:  # depthwise conv1d [ch, 1, k]
                    fan_in = p.shape[-1]
                s = 1.3 / math.sqrt(max(fan_in, 1)) if p.ndim >= 2 else 0.2
                if "embed_tokens" in name:
                    s = 0.2
                p.copy_(s * torch.randn(p.shape, generator=gen))
        for name, b in model.named_buffers():
            if name.endswith("layer_scalar"):
                b.copy_(0.5 + torch.rand(b.shape, generator=gen))
            elif name.endswith("input_min"):
                b.fill_(-1.5)
            elif name.endswith("input_max"):
                b.fill_(1.75)
            elif name.endswith("output_min"):
                b.fill_(-2.0)
            elif name.endswith("output_max"):
                b.fill_(1.9)
            elif name.endswith("std_bias"):
                b.copy_(0.1 * torch.randn(b.shape, generator=gen))
            elif name.endswith("std_scale"):
                b.copy_(1.0 + 0.1 * torch.randn(b.shape, generator=gen))


def build_model():
    from transformers import Gemma4Config, Gemma4ForConditionalGeneration

    cfg = Gemma4Config(text_config=dict(TEXT), vision_config=dict(VISION), audio_config=dict(AUDIO), **TOK)
    torch.manual_seed(1234)
    model = Gemma4ForConditionalGeneration(cfg).eval()
    try:
        model.set_attn_implementation("eager")
    except Exception:
        model.config._attn_implementation = "eager"
    widen(model, torch.Generator().manual_seed(99))
    return model


def save_model(model, folder):
    os.makedirs(folder, exist_ok=True)
    tensors = {}
    for k, v in model.state_dict().items():
        if k == "lm_head.weight" and model.config.tie_word_embeddings:
            continue
        tensors[k] = v.detach().contiguous().clone()
    save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    model.config.save_pretrained(folder)
    report["state_dict_keys"] = sorted(tensors)


# ------------------------------------------------------------------ goldens


def f32(t):
    return torch.as_tensor(np.ascontiguousarray(t)).to(torch.float32).contiguous()


def main():
    out = os.path.join(sys.argv[1] if len(sys.argv) > 1 else "gemma4_mm_fixture", "gemma4_mm")
    torch.set_num_threads(4)
    media = os.path.join(out, "media")
    os.makedirs(media, exist_ok=True)
    print("transformers", transformers.__version__, "torch", torch.__version__, "numpy", np.__version__)
    report.update(transformers_version=transformers.__version__, torch_version=torch.__version__, numpy_version=np.__version__)
    imgs = make_images(media)
    wavs = make_wavs(media)
    G = {}  # golden tensors
    J = dict(report=report, tokens=TOK, image_kwargs=IMG_KW)

    # ---- image processors
    procs = {}
    try:
        from transformers.models.gemma4.image_processing_gemma4 import Gemma4ImageProcessor

        procs["tv"] = Gemma4ImageProcessor(**IMG_KW)
    except Exception:
        traceback.print_exc()
    try:
        from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil

        procs["pil"] = Gemma4ImageProcessorPil(**IMG_KW)
    except Exception:
        traceback.print_exc()
    try:
        from transformers import AutoImageProcessor

        report["auto_image_processor_default"] = type(AutoImageProcessor.for_model("gemma4")).__name__ if hasattr(AutoImageProcessor, "for_model") else None
    except Exception as e:
        report["auto_image_processor_default"] = repr(e)
    J["image_processors"] = {k: type(v).__name__ for k, v in procs.items()}
    if "tv" in procs:
        J["image_processor_config"] = procs["tv"].to_dict()
    elif "pil" in procs:
        J["image_processor_config"] = procs["pil"].to_dict()
    J["images"] = {}
    proc_out = {}
    for n, p in imgs.items():
        key = n.split(".")[0]
        pil = Image.open(p)
        info = dict(mode=pil.mode, size=list(pil.size))
        rgb = np.array(pil.convert("RGB"))
        if n.endswith(".jpg"):  # Go's JPEG decoder is not libjpeg's: keep PIL's pixels
            G[f"img_{key}_decoded"] = torch.from_numpy(rgb.copy())  # uint8 [H, W, 3]
        for pk, proc in procs.items():
            try:
                r = proc(images=[Image.open(p)], return_tensors="pt")
                pv = r["pixel_values"][0].float()
                pos = r["image_position_ids"][0].to(torch.int32)
                nsoft = int(r["num_soft_tokens_per_image"][0])
                q = torch.round(pv * 255)
                exact = bool(torch.equal((q / 255).float(), pv)) or bool(torch.equal(q.float() * np.float32(1 / 255), pv))
                info[f"{pk}_soft_tokens"] = nsoft
                info[f"{pk}_div255_exact"] = bool(torch.equal((q / 255).float(), pv))
                info[f"{pk}_mul_inv255_exact"] = bool(torch.equal(q.float() * torch.tensor(1 / 255, dtype=torch.float32), pv))
                info[f"{pk}_q_recovers"] = exact
                info[f"{pk}_real_patches"] = int((pos[:, 0] >= 0).sum())
                real = int((pos[:, 0] >= 0).sum())
                if pk == "tv":
                    G[f"img_{key}_{pk}_pixels_u8"] = q[:real].to(torch.uint8).contiguous()
                    G[f"img_{key}_{pk}_positions"] = pos.contiguous()
                else:
                    tvq = proc_out.get(key, {}).get("tv")
                    if tvq is not None:
                        d8 = (torch.round(tvq[0][0].float() * 255) - q).abs()
                        info["pil_vs_tv_bytes_differing"] = int((d8 > 0).sum())
                        info["pil_vs_tv_max_diff"] = float(d8.max())
                proc_out.setdefault(key, {})[pk] = (r["pixel_values"], r["image_position_ids"], nsoft)
            except Exception:
                traceback.print_exc()
                info[f"{pk}_error"] = traceback.format_exc()[-400:]
        J["images"][key] = info
        print(key, info)

    # ---- audio feature extractor
    fe = None
    try:
        from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor

        fe = Gemma4AudioFeatureExtractor()
        J["feature_extractor_config"] = fe.to_dict()
        J["feature_extractor_config"].pop("mel_filters", None)
        J["feature_extractor_config"].pop("window", None)
        G["audio_window"] = f32(fe.window)
        J["mel_filters_sum"] = float(fe.mel_filters.sum())
    except Exception:
        traceback.print_exc()
    J["audio"] = {}
    feats = {}
    for n, p in wavs.items():
        key = n.split(".")[0]
        x, rate = read_wav_mono(p)
        info = dict(rate=rate, samples=len(x))
        if fe is not None and rate == 16000:
            try:
                # a list: the feature extractor's single-array path mis-shapes 1-D input
                r = fe([x], sampling_rate=16000, return_tensors="np")
                feat = r["input_features"][0]
                mask = r["input_features_mask"][0]
                G[f"wav_{key}_features"] = f32(feat)
                G[f"wav_{key}_mask"] = torch.from_numpy(mask.astype(np.uint8).copy())
                info.update(frames=int(feat.shape[0]), valid_frames=int(mask.sum()), dtype=str(feat.dtype))
                # soft tokens the way Gemma4Processor.replace_audio_token counts them
                m = mask.copy()
                tt = len(m)
                for _ in range(2):
                    t_out = (tt + 2 - 3) // 2 + 1
                    m = m[::2][:t_out]
                    tt = len(m)
                info["soft_tokens"] = int(m.sum())
                feats[key] = (torch.from_numpy(feat[None].astype(np.float32)), torch.from_numpy(mask[None]), int(m.sum()))
            except Exception:
                traceback.print_exc()
                info["error"] = traceback.format_exc()[-400:]
        J["audio"][key] = info
        print(key, info)

    # ---- model
    model = build_model()
    save_model(model, os.path.join(out, "f32"))
    pcfg = dict(
        processor_class="Gemma4Processor",
        image_seq_length=IMG_KW["max_soft_tokens"],
        audio_seq_length=750,
        audio_ms_per_token=40,
        image_processor=J.get("image_processor_config", {}),
        feature_extractor=J.get("feature_extractor_config", {}),
    )
    with open(os.path.join(out, "f32", "processor_config.json"), "w") as f:
        json.dump(pcfg, f, indent=2, sort_keys=True, default=str)

    pk = "tv" if "tv" in procs else "pil"
    J["model_image_processor"] = pk

    @step("vision")
    def vision():
        for key in ("a", "d"):
            pv, pos, nsoft = proc_out[key][pk]
            with torch.no_grad():
                enc = {}
                hooks = [
                    model.model.vision_tower.encoder.register_forward_hook(lambda m, i, o: enc.__setitem__("h", o.last_hidden_state)),
                    model.model.vision_tower.patch_embedder.register_forward_hook(lambda m, i, o: enc.__setitem__("p", o)),
                ]
                tower = model.model.vision_tower(pixel_values=pv, pixel_position_ids=pos).last_hidden_state
                embed = model.model.embed_vision(inputs_embeds=tower)
                for h in hooks:
                    h.remove()
            G[f"vis_{key}_tower"] = tower.float().contiguous()
            G[f"vis_{key}_embed"] = embed.float().contiguous()
            G[f"vis_{key}_encoder_head"] = enc["h"][0, :16].float().contiguous()
            G[f"vis_{key}_patch_head"] = enc["p"][0, :16].float().contiguous()
            vo = type("V", (), dict(last_hidden_state=tower, pooler_output=embed))
            print("vision", key, tuple(vo.last_hidden_state.shape), tuple(vo.pooler_output.shape), nsoft)

    @step("audio_tower")
    def audio_tower():
        f, m, n = feats["w1"]
        with torch.no_grad():
            enc = {}
            hooks = [
                model.model.audio_tower.subsample_conv_projection.register_forward_hook(lambda m, i, o: enc.__setitem__("s", o[0])),
                model.model.audio_tower.layers[0].register_forward_hook(lambda m, i, o: enc.__setitem__("l0", o[0] if isinstance(o, tuple) else o)),
            ]
            ao = model.model.audio_tower(f, m)
            embed = model.model.embed_audio(inputs_embeds=ao.last_hidden_state)
            for h in hooks:
                h.remove()
        G["aud_w1_tower"] = ao.last_hidden_state[0].float().contiguous()
        G["aud_w1_embed"] = embed[0].float().contiguous()
        G["aud_w1_mask"] = ao.attention_mask[0].to(torch.uint8).contiguous()
        G["aud_w1_subsample"] = enc["s"][0].float().contiguous()
        G["aud_w1_layer0"] = enc["l0"][0].float().contiguous()
        print("audio", tuple(ao.last_hidden_state.shape), int(ao.attention_mask.sum()), n)

    vision()
    audio_tower()

    g = torch.Generator().manual_seed(3)

    def txt(n):
        return torch.randint(3, 240, (n,), generator=g).tolist()

    prompts = {}
    try:
        ni = proc_out["a"][pk][2]
        prompts["image"] = dict(
            ids=[2] + txt(3) + [TOK["boi_token_id"]] + [TOK["image_token_id"]] * ni + [TOK["eoi_token_id"]] + txt(2),
            image="a",
        )
    except Exception:
        traceback.print_exc()
    try:
        na = feats["w1"][2]
        prompts["audio"] = dict(
            ids=[2] + txt(1) + [TOK["boa_token_id"]] + [TOK["audio_token_id"]] * na + [TOK["eoa_token_index"]] + txt(1),
            audio="w1",
        )
        nd = proc_out["d"][pk][2]
        prompts["both"] = dict(
            ids=[2, TOK["boi_token_id"]] + [TOK["image_token_id"]] * nd + [TOK["eoi_token_id"]] + txt(1)
            + [TOK["boa_token_id"]] + [TOK["audio_token_id"]] * na + [TOK["eoa_token_index"]] + txt(1),
            image="d",
            audio="w1",
        )
    except Exception:
        traceback.print_exc()

    J["prompts"] = {}
    for name, pr in prompts.items():

        @step("prompt_" + name)
        def run_prompt():
            ids = torch.tensor([pr["ids"]], dtype=torch.long)
            kw = {}
            if "image" in pr:
                pv, pos, _ = proc_out[pr["image"]][pk]
                kw.update(pixel_values=pv, image_position_ids=pos)
            if "audio" in pr:
                f, m, _ = feats[pr["audio"]]
                kw.update(input_features=f, input_features_mask=m)
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
            gaps = []
            for s in gen.scores:
                top = torch.topk(s[0].float(), 2)
                gaps.append(float(top.values[0] - top.values[1]))
            T = ids.shape[1]
            rows = sorted(set(range(0, T, 6)) | set(range(max(0, T - 8), T)))
            J["prompts"][name] = dict(pr, len=T, rows=rows, greedy=new, gaps=gaps, max_abs_logit=float(logits.abs().max()))
            G[f"logits_{name}"] = logits[rows].contiguous()
            print(name, "T", T, "greedy", new, "min gap", min(gaps) if gaps else None)

        run_prompt()

    save_file(G, os.path.join(out, "golden.safetensors"))
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(J, f, indent=1, sort_keys=True, default=str)
    print("report", json.dumps(report)[:3000])
    if report.get("failed"):
        print("FAILED:", report["failed"])
        sys.exit(1)


if __name__ == "__main__":
    main()

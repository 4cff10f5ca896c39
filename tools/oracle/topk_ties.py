#!/usr/bin/env python3
"""Golden cases for torch.topk's order among tied values on the CPU.

DeepSeek Sparse Attention's indexer picks each query's keys with
torch.topk(index_scores, k).indices, and its scores tie exactly (ReLU
zeros; the causal mask's finfo.min on future keys), so which of the tied
keys make the cut is torch's choice, not the maths'. This script feeds
torch.topk rows shaped like the indexer's (a causal prefix of scores with
repeated values, then finfo.min) and random rows with many duplicates, of
lengths on both sides of torch's partial-sort switch (k*64 <= n), and
writes what it returns:

    <out>/topk_ties.json
        torch        the version
        cases        [{values [n] float32, k, indices [k], cuda_indices [k] or null}]

Run where torch is installed:

    python3 tools/oracle/topk_ties.py --out OUTDIR
"""
import argparse
import json
import os
import random
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch

    lo = float(torch.finfo(torch.float32).min)
    rng = random.Random(5)
    rows = []
    for n in list(range(1, 41)) + [47, 63, 64, 100, 129, 200, 511, 512, 513, 600, 1024, 1500]:
        for _ in range(4 if n <= 40 else 2):
            k = rng.choice([1, 2, 3, 4, 7, 8, 9, 16])
            k = min(k, n)
            kind = rng.random()
            if kind < 0.5:  # the indexer's row: p+1 causal scores then finfo.min
                p = rng.randrange(n)
                pool = [0.0] * 4 + [rng.uniform(-2, 2) for _ in range(3)]
                vals = [rng.choice(pool) for _ in range(p + 1)] + [lo] * (n - p - 1)
            elif kind < 0.8:  # few distinct values
                pool = [rng.choice([0.0, 1.0, -1.0, 0.5, lo]) for _ in range(3)]
                vals = [rng.choice(pool) for _ in range(n)]
            else:  # distinct values
                vals = [rng.uniform(-3, 3) for _ in range(n)]
            rows.append((vals, k))
    cases = []
    for vals, k in rows:
        x = torch.tensor(vals, dtype=torch.float32)
        idx = torch.topk(x, k, dim=-1).indices.tolist()
        # the same row inside a batch of rows, as the indexer calls it
        xb = torch.stack([x, x.flip(0), x])
        idxb = torch.topk(xb, k, dim=-1).indices[2].tolist()
        assert idxb == idx, "batched topk differs"
        cu = None
        if torch.cuda.is_available():
            cu = torch.topk(x.cuda(), k, dim=-1).indices.cpu().tolist()
        cases.append({"values": [float(v) for v in x.tolist()], "k": k, "indices": idx, "cuda_indices": cu})
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "topk_ties.json"), "w") as f:
        json.dump({"torch": torch.__version__, "cases": cases}, f)
    same = sum(c["indices"] == c["cuda_indices"] for c in cases)
    lower = sum(sorted(c["indices"]) == sorted(sorted(range(len(c["values"])), key=lambda j: (-c["values"][j], j))[:c["k"]]) for c in cases)
    print("torch", torch.__version__, "cases", len(cases), "cpu==cuda", same, "cpu set == lowest-index-first set", lower)
    return 0


if __name__ == "__main__":
    sys.exit(main())

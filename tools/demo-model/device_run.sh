#!/usr/bin/env bash
# Runs train.py on a GPU machine and packs its output into $OUT/demo.tar.gz
# (with the log next to it). The corpus must already be at
# .cache/demo-model/corpus.jsonl (prepare_data.py, run where npm is).
#
#   OUT=/some/dir bash tools/demo-model/device_run.sh [SECONDS]
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/demo-out}
mkdir -p "$OUT"
work=$(mktemp -d)
{
  nvidia-smi -L
  python3 -c "import torch, transformers, tokenizers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'tokenizers', tokenizers.__version__)"
  timeout 500 python3 tools/demo-model/train.py .cache/demo-model/corpus.jsonl "$work/demo" "${1:-60}"
  echo "train.py exit $?"
} > "$OUT/train.log" 2>&1
cp .cache/demo-model/corpus.jsonl.sources.json "$work/demo/" 2>/dev/null
tar czf "$OUT/demo.tar.gz" -C "$work" demo
ls -la "$OUT" "$work/demo" "$work/demo/bf16" >> "$OUT/train.log" 2>&1
tail -40 "$OUT/train.log"

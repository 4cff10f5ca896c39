// Package tokenizer implements Hugging Face tokenizer.json encoding and decoding, streaming detokenization and chat templates.
package tokenizer

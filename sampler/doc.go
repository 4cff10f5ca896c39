// Package sampler turns logits into tokens: logits processors, truncation filters and seeded categorical sampling, written as tensor ops.
package sampler

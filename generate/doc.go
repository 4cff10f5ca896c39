// Package generate is the generation loop: chunked prefill, pipelined decode, prompt caching and statistics.
package generate

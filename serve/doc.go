// Package serve is the HTTP server: OpenAI- and Anthropic-compatible endpoints with streaming.
package serve

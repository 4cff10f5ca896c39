// Package kv holds the key/value caches that attention layers read and extend: plain, sliding-window, quantized, TurboQuant and paged, with persistence.
package kv

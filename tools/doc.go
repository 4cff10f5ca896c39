// Package tools holds developer tools: oracle scripts, benchmarks and converters.
package tools

//go:build !mlxdebug

package mlxffi

const debugThreads = false

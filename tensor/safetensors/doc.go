// Package safetensors reads, validates and writes the safetensors format:
// the checkpoint format of Hugging Face and mlx-community models, and the
// one mlxgo uses for its own converted weights and saved KV caches.
//
// A safetensors file is an 8-byte little-endian header length, a JSON
// header mapping each tensor name to its dtype, shape and byte range, and a
// data section holding the raw little-endian elements. Open maps the file
// read-only so that weights cost no copy and no heap until they are used:
// File.Bytes hands out slices of the mapping and File.Array can either
// borrow them (zero-copy arrays for backends that read host memory) or copy
// them into backend memory. Parse does the same on bytes already in memory,
// which is what the fuzz target exercises.
//
// Checkpoints come from many writers and are downloaded over flaky links,
// so every structural property is checked when a file is opened and every
// failure is an error naming the file, the tensor and the problem, never a
// panic: a truncated download must not turn into a crash deep inside a
// matrix multiplication. The rules follow the reference Rust
// implementation, including its requirement that the tensors cover the
// data section exactly, without holes, overlaps or trailing bytes.
// Tensors whose dtype the tensor package lacks (F64, I8, F8_E4M3, ...) do
// not make a file unreadable: Info reports them and Bytes returns their
// data; only converting them to an Array fails.
//
// OpenDir opens a sharded checkpoint folder (model.safetensors.index.json
// and its shards) behind the same lookup API. Write and WriteArrays produce
// files atomically (temporary file and rename), in a deterministic layout
// that keeps every tensor aligned to its element size so that the data can
// be borrowed in place when read back.
package safetensors

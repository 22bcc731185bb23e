// Package safetensors reads and writes tensors in Hugging Face's
// safetensors format (https://huggingface.co/docs/safetensors), the format
// of pretrained checkpoints and of troupe's own.
//
// # Format
//
// A file is an 8-byte little-endian header length N, N bytes of UTF-8 JSON,
// then the data section. The JSON object maps each tensor name to
//
//	{"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}
//
// with offsets relative to the start of the data section and the tensor's
// elements stored row-major and little-endian between them; an optional
// "__metadata__" member holds string pairs. Write sorts the tensors by name,
// lays their data out in that order and pads the header with spaces to a
// multiple of 8 bytes, streaming each tensor's bytes to the writer.
//
// # Reading
//
// Read takes a whole file from a stream into memory; Open maps a file
// read-only (reading it where mapping is unavailable), so the tensors of a
// multi-gigabyte checkpoint are views of the page cache rather than copies.
// A Tensor from either aliases the File's buffer until Close. Float32s and
// Float64s convert the float dtypes (F16 and BF16 through package tensor's
// conversions); Uint16s gives F16 and BF16 bit patterns without a copy, for
// code that keeps weights 16-bit. OpenDir opens a checkpoint directory as
// transformers saves one: model.safetensors, or the shards named by
// model.safetensors.index.json.
//
// Both readers validate the file as Hugging Face's reference implementation
// does before handing out a tensor: the header length is at most 100 MB and
// within the file; the header is one JSON object without duplicate names;
// every tensor has a known dtype, non-negative dimensions whose product does
// not overflow, and data_offsets spanning exactly its elements inside the
// data section; and, taken in offset order, the tensors cover the data
// section from its first byte to its last with no gap or overlap. A
// malformed file is a *FormatError naming the file, the tensor at fault and
// the offending values; nothing in a file can make a reader panic
// (FuzzHeader checks this).
package safetensors

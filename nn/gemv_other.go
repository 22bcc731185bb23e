//go:build !amd64

package nn

const gemvUseAVX2 = false

func gemv64AVX2(x []float32, w *float32, ldw int, y *float32) { panic("unreachable") }

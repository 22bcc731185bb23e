package tensor

import "unsafe"

// kernelGo is the portable micro-kernel: plain Go over the same packed
// panels as the assembly kernels, 4×8 tiles.
var kernelGo = &gemmKernel{name: "go", mr: 4, nr: 8, mc: 128, kc: 256, nc: 1024, fn: sgemmKernelGo}

// sgemmKernelGo computes C[0:4, 0:8] = alpha·Ap·Bp + beta·C where Ap holds
// kc steps of 4 values and Bp kc steps of 8 values. beta == 0 overwrites C
// without reading it.
func sgemmKernelGo(kc int, a, b, c *float32, ldc int, alpha, beta float32) {
	const mr, nr = 4, 8
	var acc [mr][nr]float32
	if kc > 0 {
		ap := unsafe.Slice(a, kc*mr)
		bp := unsafe.Slice(b, kc*nr)
		for p := 0; p < kc; p++ {
			av := (*[mr]float32)(ap[p*mr : p*mr+mr])
			bv := (*[nr]float32)(bp[p*nr : p*nr+nr])
			for r := 0; r < mr; r++ {
				x := av[r]
				row := &acc[r]
				row[0] += x * bv[0]
				row[1] += x * bv[1]
				row[2] += x * bv[2]
				row[3] += x * bv[3]
				row[4] += x * bv[4]
				row[5] += x * bv[5]
				row[6] += x * bv[6]
				row[7] += x * bv[7]
			}
		}
	}
	cs := unsafe.Slice(c, (mr-1)*ldc+nr)
	for r := 0; r < mr; r++ {
		row := cs[r*ldc : r*ldc+nr]
		if beta == 0 {
			for j := range row {
				row[j] = alpha * acc[r][j]
			}
		} else {
			for j := range row {
				row[j] = alpha*acc[r][j] + beta*row[j]
			}
		}
	}
}

package safetensors_test

import (
	"bytes"
	"fmt"
	"log"

	"github.com/troupe-ml/troupe/safetensors"
	"github.com/troupe-ml/troupe/tensor"
)

func Example() {
	w := []float32{0.5, -1, 2, 3.25, 0, 1e-3}
	half := make([]uint16, len(w))
	tensor.Float32sToBF16(half, w)

	var buf bytes.Buffer
	err := safetensors.Write(&buf, []safetensors.Tensor{
		safetensors.FromFloat32("layer.w", []int{2, 3}, w),
		safetensors.FromHalf("layer.w_bf16", safetensors.BF16, []int{2, 3}, half),
	}, map[string]string{"format": "pt"})
	if err != nil {
		log.Fatal(err)
	}

	f, err := safetensors.Read(&buf)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	fmt.Println("metadata:", f.Metadata)
	for _, name := range f.Names() {
		t, _ := f.Tensor(name)
		v, err := t.Float32s()
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(name, t.DType, t.Shape, v)
	}
	// Output:
	// metadata: map[format:pt]
	// layer.w F32 [2 3] [0.5 -1 2 3.25 0 0.001]
	// layer.w_bf16 BF16 [2 3] [0.5 -1 2 3.25 0 0.0009994507]
}

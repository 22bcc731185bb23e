package tensor

import "fmt"

func kCheckEmbedding(op string, a []float32, aName string, table []float32, tName string, ids []int, dim int) {
	if dim <= 0 {
		panic(fmt.Sprintf("tensor: %s: dim %d must be positive", op, dim))
	}
	if len(table)%dim != 0 {
		panic(fmt.Sprintf("tensor: %s: %s length %d is not a multiple of dim %d", op, tName, len(table), dim))
	}
	if len(a) != len(ids)*dim {
		panic(fmt.Sprintf("tensor: %s: %s has length %d, want %d ids × dim %d = %d", op, aName, len(a), len(ids), dim, len(ids)*dim))
	}
	rows := len(table) / dim
	for i, id := range ids {
		if id < 0 || id >= rows {
			panic(fmt.Sprintf("tensor: %s: ids[%d] = %d out of range for a %d×%d table", op, i, id, rows, dim))
		}
	}
}

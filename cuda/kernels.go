package cuda

import (
	"embed"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// The PTX of every kernel source, compiled by `make ptx` (scripts/ptx.sh) and
// committed, so that building troupe needs no nvcc: the CUDA driver
// JIT-compiles the PTX for whatever GPU it finds.
//
//go:embed kernels/*.ptx
var ptxFS embed.FS

// Module describes one compiled kernel source.
type Module struct {
	Name    string   // source base name: kernels/Name.cu
	MinArch int      // lowest compute capability (major*10+minor) it loads on
	Entries []string // kernel entry points, in the order they appear
}

// modules lists the kernel modules and the entry points the Go side launches.
// TestPTXEntries checks it against the embedded PTX.
var modules = []Module{
	{"attention", 70, []string{"attn_fwd_d64", "attn_fwd_d128", "attn_bwd_dot", "attn_bwd_d64", "attn_bwd_d128", "attn_decode"}},
	{"elementwise", 70, []string{"binary_bcast", "binary_same", "unary", "fill", "axpy", "gelu_fwd", "gelu_bwd", "strided_copy"}},
	{"embedding", 70, []string{"embedding_gather", "embedding_scatter_add"}},
	{"gemm", 70, []string{"sgemm_nn", "sgemm_nt", "sgemm_tn", "sgemm_tt"}},
	{"gemm_tf32", 80, []string{"tf32gemm_nn", "tf32gemm_nt", "tf32gemm_tn", "tf32gemm_tt", "tf32gemm_nn_v4"}},
	{"layernorm", 70, []string{"layernorm_fwd", "layernorm_bwd_dx", "layernorm_bwd_dgb"}},
	{"optim", 70, []string{"adamw"}},
	{"reduce", 70, []string{"reduce_rows", "reduce_cols", "reduce_all"}},
	{"softmax", 70, []string{"softmax_rows", "logsoftmax_rows", "softmax_bwd_rows", "logsoftmax_bwd_rows",
		"logsoftmax_gather", "logsoftmax_gather_bwd", "xent_fwd", "xent_bwd"}},
}

// Modules returns the kernel modules troupe embeds.
func Modules() []Module {
	out := make([]Module, len(modules))
	copy(out, modules)
	return out
}

// PTX returns the embedded PTX text of module name.
func PTX(name string) (string, error) {
	b, err := ptxFS.ReadFile("kernels/" + name + ".ptx")
	if err != nil {
		return "", fmt.Errorf("cuda: no embedded PTX for module %q: %w", name, err)
	}
	return string(b), nil
}

var entryRE = regexp.MustCompile(`(?m)^\.visible \.entry ([A-Za-z_][A-Za-z0-9_]*)\(`)

// ptxEntries lists the kernel entry points declared in a PTX text.
func ptxEntries(ptx string) []string {
	var out []string
	for _, m := range entryRE.FindAllStringSubmatch(ptx, -1) {
		out = append(out, m[1])
	}
	sort.Strings(out)
	return out
}

var targetRE = regexp.MustCompile(`(?m)^\.target sm_([0-9]+)`)

// ptxTarget returns the compute capability a PTX text was generated for (e.g. 80).
func ptxTarget(ptx string) int {
	m := targetRE.FindStringSubmatch(ptx)
	if m == nil {
		return 0
	}
	var v int
	fmt.Sscan(m[1], &v)
	return v
}

// ptxToolkit returns the "Cuda compilation tools" line of a PTX header.
func ptxToolkit(ptx string) string {
	for _, l := range strings.Split(ptx, "\n")[:min(12, strings.Count(ptx, "\n"))] {
		if strings.HasPrefix(l, "// Cuda compilation tools") {
			return strings.TrimPrefix(l, "// ")
		}
	}
	return ""
}

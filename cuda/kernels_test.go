package cuda

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestPTXEntries checks that every entry point the Go side launches exists in
// the embedded PTX, that no PTX declares kernels the Go side does not know,
// and that each module's PTX target matches its declared minimum architecture.
func TestPTXEntries(t *testing.T) {
	srcs, _ := filepath.Glob("kernels/*.cu")
	if len(srcs) != len(modules) {
		t.Errorf("%d .cu sources but %d modules listed", len(srcs), len(modules))
	}
	for _, m := range modules {
		ptx, err := PTX(m.Name)
		if err != nil {
			t.Fatal(err)
		}
		want := slices.Clone(m.Entries)
		slices.Sort(want)
		if got := ptxEntries(ptx); !slices.Equal(got, want) {
			t.Errorf("%s.ptx entries = %v, want %v", m.Name, got, want)
		}
		if got := ptxTarget(ptx); got != m.MinArch {
			t.Errorf("%s.ptx targets sm_%d, module says %d", m.Name, got, m.MinArch)
		}
		src, err := os.ReadFile("kernels/" + m.Name + ".cu")
		if err != nil {
			t.Fatal(err)
		}
		first, _, _ := strings.Cut(string(src), "\n")
		if want := "// troupe:arch compute_" + itoa(m.MinArch); first != want {
			t.Errorf("%s.cu first line %q, want %q", m.Name, first, want)
		}
	}
}

func itoa(v int) string { return strconv.Itoa(v) }

// TestPTXFresh recompiles every kernels/*.cu with scripts/ptx.sh (the same
// command `make ptx` runs) and fails when the result differs from the
// committed, embedded PTX. It needs nvcc; without it, with an nvcc of a
// different version than the one that produced the committed PTX (recorded in
// its header), or in -short mode, it skips and says why.
func TestPTXFresh(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short mode (recompiling every kernel takes tens of seconds)")
	}
	nvcc, err := exec.LookPath("nvcc")
	if err != nil {
		t.Skip("skipped: nvcc not found (install the CUDA toolkit: scripts/install-cuda.sh)")
	}
	ver, err := exec.Command(nvcc, "--version").Output()
	if err != nil {
		t.Fatalf("nvcc --version: %v", err)
	}
	committed, _ := PTX(modules[0].Name)
	tk := ptxToolkit(committed)
	if tk == "" || !bytes.Contains(ver, []byte(tk)) {
		t.Skipf("skipped: committed PTX was made by %q but nvcc is:\n%s", tk, ver)
	}
	dir := t.TempDir()
	cmd := exec.Command("bash", "../scripts/ptx.sh", dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/ptx.sh: %v\n%s", err, out)
	}
	for _, m := range modules {
		fresh, err := os.ReadFile(filepath.Join(dir, m.Name+".ptx"))
		if err != nil {
			t.Fatal(err)
		}
		old, _ := PTX(m.Name)
		if string(fresh) != old {
			t.Errorf("kernels/%s.ptx is stale: the PTX nvcc makes from kernels/%s.cu differs; run `make ptx` and commit", m.Name, m.Name)
		}
	}
}

// TestPTXAssembles runs ptxas on the embedded PTX for sm_90 (H100/H200),
// which catches register/shared-memory overflows and invalid PTX without a
// GPU. It takes tens of seconds, so it runs only with TROUPE_PTXAS=1 (as
// `make test-cuda-build` sets it) and needs ptxas.
func TestPTXAssembles(t *testing.T) {
	if os.Getenv("TROUPE_PTXAS") != "1" {
		t.Skip("skipped: set TROUPE_PTXAS=1 to assemble the PTX with ptxas")
	}
	ptxas, err := exec.LookPath("ptxas")
	if err != nil {
		t.Skip("skipped: ptxas not found (install the CUDA toolkit: scripts/install-cuda.sh)")
	}
	for _, m := range modules {
		for _, arch := range []int{90} {
			cmd := exec.Command(ptxas, "-arch=sm_"+itoa(arch), "-o", os.DevNull, "kernels/"+m.Name+".ptx")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("ptxas sm_%d %s.ptx: %v\n%s", arch, m.Name, err, out)
			}
		}
	}
}

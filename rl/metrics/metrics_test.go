package metrics

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoggerFiles(t *testing.T) {
	dir := t.TempDir()
	l, err := New(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Unix(0, 0)
	l.now = func() time.Time { return clock }
	l.start, l.last = clock, clock
	for s := 0; s < 5; s++ {
		clock = clock.Add(500 * time.Millisecond)
		m := map[string]float64{"reward": float64(s), "tokens": 100}
		if s == 2 {
			m["kl"] = math.NaN()
		}
		if err := l.Log(s, m); err != nil {
			t.Fatal(err)
		}
	}
	if l.HasProgressBar() {
		t.Error("progress bar without Total")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// JSON lines: one object per step
	f, _ := os.Open(filepath.Join(dir, "metrics.jsonl"))
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		var obj map[string]any
		if err := json.Unmarshal(sc.Bytes(), &obj); err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		if obj["step"].(float64) != float64(n) || obj["reward"].(float64) != float64(n) || obj["tokens_per_s"].(float64) != 200 {
			t.Fatalf("line %d: %v", n, obj)
		}
		n++
	}
	if n != 5 {
		t.Fatalf("%d json lines", n)
	}
	// CSV: union of keys, empty where missing
	cf, _ := os.Open(filepath.Join(dir, "metrics.csv"))
	defer cf.Close()
	recs, err := csv.NewReader(cf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	want := "step,elapsed_s,kl,reward,tokens,tokens_per_s"
	if got := strings.Join(recs[0], ","); got != want || len(recs) != 6 {
		t.Fatalf("csv header %q (%d rows), want %q", got, len(recs), want)
	}
	if recs[1][2] != "" || recs[3][2] != "NaN" || recs[5][1] != "2.5" {
		t.Fatalf("csv rows %v", recs)
	}
}

func TestPlotPNG(t *testing.T) {
	dir := t.TempDir()
	l, _ := New(Options{Dir: dir})
	for s := 0; s < 20; s++ {
		l.Log(s, map[string]float64{"a": math.Sin(float64(s) / 3), "b": float64(s) / 20})
	}
	if err := l.Plot("curves.png", "test", "a", "b"); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "curves.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() < 300 || b.Dy() < 150 {
		t.Fatalf("image %v", b)
	}
	if err := PlotPNG(filepath.Join(dir, "bad.png"), "", "", "", Series{Name: "x", X: []float64{1}, Y: nil}); err == nil {
		t.Error("mismatched series accepted")
	}
}

func TestProgressBarForced(t *testing.T) {
	var buf bytes.Buffer
	l, _ := New(Options{Total: 3, Description: "train", ProgressTo: &buf})
	if !l.HasProgressBar() {
		t.Fatal("no bar")
	}
	for s := 0; s < 3; s++ {
		l.Log(s, nil)
	}
	l.Close()
	if !strings.Contains(buf.String(), "train") || !strings.Contains(buf.String(), "3/3") {
		t.Errorf("bar output %q", buf.String())
	}
	// without ProgressTo, a bar appears only on a terminal (tests' stderr is not)
	l2, _ := New(Options{Total: 3})
	if l2.HasProgressBar() != IsTerminal(os.Stderr) {
		t.Error("bar drawn on a non-terminal")
	}
}

func TestStartProfile(t *testing.T) {
	dir := t.TempDir()
	stop, err := StartProfile("cpu", dir)
	if err != nil {
		t.Fatal(err)
	}
	x := 0.0
	for i := 0; i < 1e6; i++ {
		x += math.Sqrt(float64(i))
	}
	stop()
	if st, err := os.Stat(filepath.Join(dir, "cpu.pprof")); err != nil || st.Size() == 0 {
		t.Fatalf("cpu profile: %v", err)
	}
	if _, err := StartProfile("bogus", dir); err == nil {
		t.Error("unknown mode accepted")
	}
	_ = fmt.Sprint(x)
}

func ExampleLogger() {
	l, _ := New(Options{})
	for step := 0; step < 3; step++ {
		l.Log(step, map[string]float64{"reward": 0.5 * float64(step)})
	}
	_, r := l.Series("reward")
	fmt.Println(r, l.Keys())
	// Output: [0 0.5 1] [elapsed_s reward]
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// TestWriteCSVError: a failing writer's error is returned, wrapped.
func TestWriteCSVError(t *testing.T) {
	l, _ := New(Options{})
	l.Log(0, map[string]float64{"x": 1})
	err := l.WriteCSV(failWriter{})
	if err == nil || !strings.Contains(err.Error(), "disk full") || !strings.HasPrefix(err.Error(), "metrics: ") {
		t.Fatalf("err = %v", err)
	}
}

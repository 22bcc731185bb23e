package metrics

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/pkg/profile"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Row is the metrics of one step.
type Row struct {
	Step   int
	Values map[string]float64
}

// Options configures a Logger.
type Options struct {
	// Dir receives <Name>.jsonl, <Name>.csv and plots; empty keeps rows in
	// memory only.
	Dir string
	// Name is the file stem (default "metrics").
	Name string
	// Total is the expected number of steps, for the progress bar (0: no
	// bar).
	Total int
	// Description labels the progress bar.
	Description string
	// ProgressTo forces a progress bar onto this writer even when it is not
	// a terminal (tests); by default the bar is drawn on stderr only when
	// stderr is a terminal.
	ProgressTo io.Writer
}

// Logger records metrics per step. Log derives "elapsed_s" and, when the
// row has "tokens" or "samples", "tokens_per_s"/"samples_per_s" over the
// time since the previous row. Not safe for concurrent use.
type Logger struct {
	opt   Options
	rows  []Row
	keys  map[string]bool
	jsonl *os.File
	enc   *json.Encoder
	bar   *progressbar.ProgressBar
	start time.Time
	last  time.Time
	now   func() time.Time
}

// New returns a Logger, creating Dir and the JSON-lines file.
func New(opt Options) (*Logger, error) {
	if opt.Name == "" {
		opt.Name = "metrics"
	}
	l := &Logger{opt: opt, keys: map[string]bool{}, now: time.Now}
	l.start = l.now()
	l.last = l.start
	if opt.Dir != "" {
		if err := os.MkdirAll(opt.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
		f, err := os.Create(filepath.Join(opt.Dir, opt.Name+".jsonl"))
		if err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
		l.jsonl = f
		l.enc = json.NewEncoder(f)
	}
	if opt.Total > 0 {
		w := opt.ProgressTo
		if w == nil && IsTerminal(os.Stderr) {
			w = os.Stderr
		}
		if w != nil {
			l.bar = progressbar.NewOptions(opt.Total,
				progressbar.OptionSetWriter(w),
				progressbar.OptionSetDescription(opt.Description),
				progressbar.OptionShowCount(),
				progressbar.OptionShowIts(),
				progressbar.OptionSetItsString("step"),
				progressbar.OptionThrottle(100*time.Millisecond),
			)
		}
	}
	return l, nil
}

// IsTerminal reports whether f is a terminal.
func IsTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// HasProgressBar reports whether a progress bar is drawn.
func (l *Logger) HasProgressBar() bool { return l.bar != nil }

// Log records the metrics of one step (the map is copied).
func (l *Logger) Log(step int, m map[string]float64) error {
	now := l.now()
	v := make(map[string]float64, len(m)+3)
	for k, x := range m {
		v[k] = x
	}
	dt := now.Sub(l.last).Seconds()
	v["elapsed_s"] = now.Sub(l.start).Seconds()
	if dt > 0 {
		if tok, ok := m["tokens"]; ok {
			v["tokens_per_s"] = tok / dt
		}
		if s, ok := m["samples"]; ok {
			v["samples_per_s"] = s / dt
		}
	}
	l.last = now
	for k := range v {
		l.keys[k] = true
	}
	l.rows = append(l.rows, Row{Step: step, Values: v})
	if l.enc != nil {
		obj := make(map[string]any, len(v)+1)
		for k, x := range v {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				obj[k] = nil // JSON has no NaN
			} else {
				obj[k] = x
			}
		}
		obj["step"] = step
		if err := l.enc.Encode(obj); err != nil {
			return fmt.Errorf("metrics: write jsonl: %w", err)
		}
	}
	if l.bar != nil {
		_ = l.bar.Add(1)
	}
	return nil
}

// Rows returns the rows logged so far (not copies).
func (l *Logger) Rows() []Row { return l.rows }

// Keys returns the metric names seen so far, sorted.
func (l *Logger) Keys() []string {
	k := make([]string, 0, len(l.keys))
	for x := range l.keys {
		k = append(k, x)
	}
	sort.Strings(k)
	return k
}

// Series returns the steps and values of one metric (rows without it are
// skipped).
func (l *Logger) Series(key string) (steps, values []float64) {
	for _, r := range l.rows {
		if x, ok := r.Values[key]; ok {
			steps = append(steps, float64(r.Step))
			values = append(values, x)
		}
	}
	return
}

// WriteCSV writes all rows with one column per metric name (sorted, after
// "step"); missing values are empty.
func (l *Logger) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	keys := l.Keys()
	if err := cw.Write(append([]string{"step"}, keys...)); err != nil {
		return fmt.Errorf("metrics: write csv header: %w", err)
	}
	rec := make([]string, len(keys)+1)
	for _, r := range l.rows {
		rec[0] = strconv.Itoa(r.Step)
		for i, k := range keys {
			if x, ok := r.Values[k]; ok {
				rec[i+1] = strconv.FormatFloat(x, 'g', -1, 64)
			} else {
				rec[i+1] = ""
			}
		}
		if err := cw.Write(rec); err != nil {
			return fmt.Errorf("metrics: write csv step %d: %w", r.Step, err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("metrics: write csv: %w", err)
	}
	return nil
}

// Close writes <Dir>/<Name>.csv, closes the JSON-lines file and finishes the
// progress bar.
func (l *Logger) Close() error {
	if l.bar != nil {
		_ = l.bar.Finish()
	}
	if l.jsonl == nil {
		return nil
	}
	err := l.jsonl.Close()
	l.jsonl = nil
	f, cerr := os.Create(filepath.Join(l.opt.Dir, l.opt.Name+".csv"))
	if cerr != nil {
		return fmt.Errorf("metrics: %w", cerr)
	}
	if werr := l.WriteCSV(f); werr != nil {
		f.Close()
		return fmt.Errorf("metrics: write csv: %w", werr)
	}
	if cerr := f.Close(); cerr != nil {
		return fmt.Errorf("metrics: %w", cerr)
	}
	if err != nil {
		return fmt.Errorf("metrics: close jsonl: %w", err)
	}
	return nil
}

// StartProfile starts a profile of the given mode ("cpu", "mem", "allocs",
// "block", "mutex", "trace"; "" or "off" does nothing) written under dir,
// and returns the function that stops it. Only one profile can run at a
// time in a process (a github.com/pkg/profile rule). Typical use:
//
//	defer metrics.StartProfile(*profileFlag, "out/prof")()
func StartProfile(mode, dir string) (stop func(), err error) {
	opts := []func(*profile.Profile){profile.ProfilePath(dir), profile.NoShutdownHook, profile.Quiet}
	switch mode {
	case "", "off":
		return func() {}, nil
	case "cpu":
		opts = append(opts, profile.CPUProfile)
	case "mem":
		opts = append(opts, profile.MemProfile)
	case "allocs":
		opts = append(opts, profile.MemProfileAllocs)
	case "block":
		opts = append(opts, profile.BlockProfile)
	case "mutex":
		opts = append(opts, profile.MutexProfile)
	case "trace":
		opts = append(opts, profile.TraceProfile)
	default:
		return nil, fmt.Errorf("metrics: unknown profile mode %q", mode)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	p := profile.Start(opts...)
	return p.Stop, nil
}

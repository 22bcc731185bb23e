// Package record encodes the episode records of the swarm journal and
// checks the records a trainer reads back.
//
// Anyone who may publish on a model's episode subject could otherwise
// train it: NATS permissions limit publishing to the rollout credentials,
// and, so that a leaked NATS password alone is not enough, every record
// carries an HMAC-SHA256 (in the NATS header Header) under a key the
// trainer and its front-ends share and NATS never sees. The MAC covers the
// subject and the record's bytes, so a record cannot be moved to another
// model's stream either. Open refuses a record that is unsigned, forged or
// malformed (each a reason the trainer counts), and drops a malformed
// sample inside an otherwise good record alone.
package record

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/rl"
)

// Header is the NATS header that carries a record's MAC.
const Header = "Troupe-Episode-Mac"

// KeyEnv is the environment variable ReadKey falls back to.
const KeyEnv = "TROUPE_EPISODE_KEY"

// KeyFile is the name of the key LoadOrCreateKey keeps in a directory.
const KeyFile = "episode.key"

// MinKeyBytes is the shortest key accepted.
const MinKeyBytes = 16

// Reasons a record or a sample is refused, as the trainer counts them
// (swarm_dropped_episodes_total and dropped.jsonl).
const (
	// Unsigned: the message carries no MAC.
	Unsigned = "unsigned"
	// Forged: the MAC does not match (another key, a changed record, or
	// a record published on another model's subject).
	Forged = "forged"
	// Malformed: the record does not decode, has no id, a reward that is
	// not finite or beyond the bound, or samples that are all malformed.
	Malformed = "malformed"
	// MalformedSample: one sample of a good record was dropped (an empty
	// prompt, a negative token, log-probabilities or step rewards not one
	// per action, a value that is not finite, a negative version).
	MalformedSample = "malformed_sample"
)

// HowTo is the advice given when a key is missing or unusable.
const HowTo = "give the trainer and every front-end the same key: --episode-key-file F or " + KeyEnv +
	" (at least 16 bytes; e.g. `openssl rand -hex 32 > F; chmod 600 F`)"

// maxID bounds the ids a record may carry (the end_episode handler's own bound).
const maxID = 256

// ReadKey reads an episode key from file, or from KeyEnv when file is
// empty. Surrounding blanks are trimmed; a blank or short key is an error.
// Neither given: nil and no error.
func ReadKey(file string) ([]byte, error) {
	src := "--episode-key-file " + file
	var raw string
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("episode key: %w", err)
		}
		raw = string(b)
	} else {
		v, ok := os.LookupEnv(KeyEnv)
		if !ok {
			return nil, nil
		}
		src, raw = KeyEnv, v
	}
	return checkKey(src, raw)
}

func checkKey(src, raw string) ([]byte, error) {
	k := strings.TrimSpace(raw)
	switch {
	case k == "":
		return nil, fmt.Errorf("episode key from %s is blank: %s", src, HowTo)
	case len(k) < MinKeyBytes:
		return nil, fmt.Errorf("episode key from %s has %d bytes, fewer than %d: %s", src, len(k), MinKeyBytes, HowTo)
	}
	return []byte(k), nil
}

// LoadOrCreateKey returns the key kept in dir/KeyFile, creating it (256
// random bits, hex, mode 0600) when there is none, so that a process that
// restarts verifies what it journaled before. A key file others may read
// is refused.
func LoadOrCreateKey(dir string) ([]byte, error) {
	path := filepath.Join(dir, KeyFile)
	k, err := readKeyFile(path)
	if !errors.Is(err, os.ErrNotExist) {
		return k, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("episode key: %w", err)
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("episode key: %w", err)
	}
	tmp, err := os.CreateTemp(dir, KeyFile+".tmp*")
	if err != nil {
		return nil, fmt.Errorf("episode key: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err = tmp.Chmod(0o600); err == nil {
		_, err = tmp.WriteString(hex.EncodeToString(b[:]) + "\n")
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// A link never replaces a key another process created meanwhile.
		if err = os.Link(tmp.Name(), path); errors.Is(err, os.ErrExist) {
			err = nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("episode key: %w", err)
	}
	return readKeyFile(path)
}

func readKeyFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("episode key %s may be read by others (mode %o): chmod 600 it", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("episode key: %w", err)
	}
	return checkKey(path, string(b))
}

// Sign returns the MAC of a record published on subject: HMAC-SHA256
// under key of the subject, a zero byte and body, in unpadded base64url.
func Sign(key []byte, subject string, body []byte) string {
	return base64.RawURLEncoding.EncodeToString(mac(key, subject, body))
}

func mac(key []byte, subject string, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(subject))
	h.Write([]byte{0})
	h.Write(body)
	return h.Sum(nil)
}

// Seal encodes rec and signs it for subject.
func Seal(key []byte, subject string, rec api.EpisodeRecord) (body []byte, sig string, err error) {
	body, err = json.Marshal(rec)
	if err != nil {
		return nil, "", fmt.Errorf("encode episode %s: %w", rec.ID, err)
	}
	return body, Sign(key, subject, body), nil
}

// Error is a refused record: Reason is one of Unsigned, Forged and
// Malformed.
type Error struct {
	Reason string
	Detail string
}

// Error is "reason: detail".
func (e *Error) Error() string { return e.Reason + ": " + e.Detail }

// Reason is the refusal reason of err (an *Error), or "" for nil.
func Reason(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

// Open checks the MAC sig of a record received on subject and decodes
// it. It returns the record with its malformed samples left out (their
// number is dropped), every sample's TaskID and Reward set from the
// record and MinVersion recomputed; or an *Error, with the ids the
// refused record claims when they decode. It never panics, whatever body
// and sig hold; the comparison takes constant time.
func Open(key []byte, subject string, body []byte, sig string, maxAbsReward float64) (rec api.EpisodeRecord, dropped int, err error) {
	if sig == "" {
		return claimed(body), 0, &Error{Unsigned, "no " + Header + " header"}
	}
	got, derr := base64.RawURLEncoding.DecodeString(sig)
	if derr != nil || !hmac.Equal(got, mac(key, subject, body)) {
		return claimed(body), 0, &Error{Forged, "the MAC does not match the record"}
	}
	if err := json.Unmarshal(body, &rec); err != nil {
		return api.EpisodeRecord{}, 0, &Error{Malformed, err.Error()}
	}
	switch {
	case rec.ID == "" || len(rec.ID) > maxID:
		return rec, 0, &Error{Malformed, "the episode id is empty or too long"}
	case len(rec.TaskID) > maxID:
		return rec, 0, &Error{Malformed, "the task id is too long"}
	case !finite(rec.Reward) || math.Abs(rec.Reward) > maxAbsReward:
		return rec, 0, &Error{Malformed, fmt.Sprintf("reward %v is not finite or beyond %g", rec.Reward, maxAbsReward)}
	case len(rec.TeamID) > maxID:
		return rec, 0, &Error{Malformed, "the team id is too long"}
	}
	if err := api.CheckComponents(rec.RewardComponents, maxAbsReward); err != nil {
		return rec, 0, &Error{Malformed, err.Error()}
	}
	kept := rec.Samples[:0]
	for _, s := range rec.Samples {
		if !validSample(&s) {
			dropped++
			continue
		}
		s.TaskID, s.Reward = rec.TaskID, rec.Reward
		kept = append(kept, s)
	}
	if len(kept) == 0 && dropped > 0 {
		return rec, dropped, &Error{Malformed, fmt.Sprintf("all %d samples are malformed", dropped)}
	}
	rec.Samples = kept
	rec.MinVersion = MinVersion(kept)
	return rec, dropped, nil
}

// claimed is the episode and task ids a refused record claims, for its
// drop to name (untrusted, cut to maxID bytes).
func claimed(body []byte) api.EpisodeRecord {
	var ids struct {
		ID     string `json:"id"`
		TaskID string `json:"task_id"`
	}
	json.Unmarshal(body, &ids)
	cut := func(s string) string { return s[:min(len(s), maxID)] }
	return api.EpisodeRecord{ID: cut(ids.ID), TaskID: cut(ids.TaskID)}
}

// MinVersion is the oldest parameter version among samples, or -1 when
// there are none.
func MinVersion(samples []rl.Sample) int64 {
	v := int64(-1)
	for i := range samples {
		if v < 0 || samples[i].Version < v {
			v = samples[i].Version
		}
	}
	return v
}

// maxLogProbMagnitude bounds a behaviour log-probability: float32
// probabilities end near e^-104, so a value far beyond is not one.
const maxLogProbMagnitude = 1e4

// validSample reports whether s can be trained on without failing its
// batch: a prompt, tokens that are not negative, log-probabilities and
// step rewards one per action (or none), finite values, a version that is
// not negative.
func validSample(s *rl.Sample) bool {
	if len(s.Prompt) == 0 && len(s.Obs) == 0 || s.Version < 0 || !finite(s.Temperature) || s.Temperature < 0 {
		return false
	}
	if s.LogProbs != nil && len(s.LogProbs) != len(s.Actions) || s.StepRewards != nil && len(s.StepRewards) != len(s.Actions) {
		return false
	}
	for _, t := range s.Prompt {
		if t < 0 {
			return false
		}
	}
	for _, t := range s.Actions {
		if t < 0 {
			return false
		}
	}
	for _, x := range s.LogProbs {
		if !finite(float64(x)) || x > 0.01 || x < -maxLogProbMagnitude {
			return false
		}
	}
	for _, x := range s.Obs {
		if !finite(float64(x)) {
			return false
		}
	}
	for _, x := range s.StepRewards {
		if !finite(x) {
			return false
		}
	}
	return true
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

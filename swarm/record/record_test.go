package record

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/troupe-ml/troupe/api"
	"github.com/troupe-ml/troupe/rl"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

const subject = "troupe.episodes.tiny"

func good() api.EpisodeRecord {
	return api.EpisodeRecord{ID: "e-1", TaskID: "t", Client: "c", Reward: 0.5, MinVersion: 3, Samples: []rl.Sample{
		{Prompt: []int{1, 2}, Actions: []int{3, 4}, LogProbs: []float32{-0.5, -1}, Version: 4, Temperature: 1},
		{Prompt: []int{5}, Actions: []int{6}, Version: 5},
	}}
}

// TestOpenReasons: a signed record opens; unsigned, forged (another key,
// a changed byte, another model's subject, a MAC that is not base64) and
// malformed ones are refused with their reason; a bad sample goes alone.
func TestOpenReasons(t *testing.T) {
	body, sig, err := Seal(testKey, subject, good())
	if err != nil {
		t.Fatal(err)
	}
	rec, dropped, err := Open(testKey, subject, body, sig, 1e6)
	if err != nil || dropped != 0 || len(rec.Samples) != 2 || rec.MinVersion != 4 {
		t.Fatalf("a good record: %+v, %d dropped, %v", rec, dropped, err)
	}
	for i, s := range rec.Samples {
		if s.TaskID != "t" || s.Reward != 0.5 {
			t.Errorf("sample %d: task %q reward %v, want the record's", i, s.TaskID, s.Reward)
		}
	}
	changed := append([]byte(nil), body...)
	changed[len(changed)/2] ^= 1
	// A log-probability beyond float32, which Marshal cannot write.
	overflow := []byte(strings.Replace(string(mustJSON(good())), "-1]", "1e400]", 1))
	big := good()
	big.Reward = 2e6
	noID := good()
	noID.ID = ""
	allBad := good()
	allBad.Samples = []rl.Sample{{Prompt: nil, Actions: []int{1}}}
	bigBody, noIDBody, allBadBody := mustJSON(big), mustJSON(noID), mustJSON(allBad)
	for _, c := range []struct {
		name       string
		body       []byte
		sig        string
		subject    string
		wantReason string
	}{
		{"unsigned", body, "", subject, Unsigned},
		{"another key", body, Sign([]byte("another key, 16+ bytes"), subject, body), subject, Forged},
		{"a changed byte", changed, sig, subject, Forged},
		{"another model", body, sig, "troupe.episodes.other", Forged},
		{"not base64", body, "!!", subject, Forged},
		{"not JSON", []byte("{"), Sign(testKey, subject, []byte("{")), subject, Malformed},
		{"an overflowing log-prob", overflow, Sign(testKey, subject, overflow), subject, Malformed},
		{"reward beyond the bound", bigBody, Sign(testKey, subject, bigBody), subject, Malformed},
		{"no id", noIDBody, Sign(testKey, subject, noIDBody), subject, Malformed},
		{"every sample malformed", allBadBody, Sign(testKey, subject, allBadBody), subject, Malformed},
	} {
		_, _, err := Open(testKey, c.subject, c.body, c.sig, 1e6)
		if got := Reason(err); got != c.wantReason {
			t.Errorf("%s: reason %q (%v), want %q", c.name, got, err, c.wantReason)
		}
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// TestOpenDropsBadSamplesAlone: each kind of malformed sample is dropped
// and counted; the good sample of the record stays.
func TestOpenDropsBadSamplesAlone(t *testing.T) {
	okSample := rl.Sample{Prompt: []int{1}, Actions: []int{2}, LogProbs: []float32{-1}, Version: 2}
	for name, bad := range map[string]rl.Sample{
		"empty prompt":          {Actions: []int{2}},
		"negative prompt token": {Prompt: []int{-1}, Actions: []int{2}},
		"negative action":       {Prompt: []int{1}, Actions: []int{-2}},
		"log-probs per action":  {Prompt: []int{1}, Actions: []int{2, 3}, LogProbs: []float32{-1}},
		"step rewards":          {Prompt: []int{1}, Actions: []int{2}, StepRewards: []float64{1, 2}},
		"positive log-prob":     {Prompt: []int{1}, Actions: []int{2}, LogProbs: []float32{3}},
		"huge log-prob":         {Prompt: []int{1}, Actions: []int{2}, LogProbs: []float32{-1e30}},
		"negative version":      {Prompt: []int{1}, Actions: []int{2}, Version: -1},
		"negative temperature":  {Prompt: []int{1}, Actions: []int{2}, Temperature: -1},
	} {
		rec := api.EpisodeRecord{ID: "e", TaskID: "t", Reward: 1, Samples: []rl.Sample{bad, okSample}}
		body, sig, err := Seal(testKey, subject, rec)
		if err != nil {
			t.Fatal(err)
		}
		got, dropped, err := Open(testKey, subject, body, sig, 1e6)
		if err != nil || dropped != 1 || len(got.Samples) != 1 || got.Samples[0].Actions[0] != 2 || got.MinVersion != 2 {
			t.Errorf("%s: %+v, %d dropped, %v; want the good sample alone", name, got.Samples, dropped, err)
		}
	}
}

// TestKeys: ReadKey trims and refuses blank or short keys; LoadOrCreateKey
// creates a 0600 key once, returns it again, and refuses one others may
// read.
func TestKeys(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "k")
	os.WriteFile(f, []byte("  0123456789abcdef \n"), 0o600)
	if k, err := ReadKey(f); err != nil || string(k) != "0123456789abcdef" {
		t.Fatalf("ReadKey: %q %v", k, err)
	}
	for _, bad := range []string{" \n", "short"} {
		os.WriteFile(f, []byte(bad), 0o600)
		if _, err := ReadKey(f); err == nil || !strings.Contains(err.Error(), KeyEnv) {
			t.Errorf("key %q: %v, want an error with the how-to", bad, err)
		}
	}
	t.Setenv(KeyEnv, "   ")
	if _, err := ReadKey(""); err == nil {
		t.Error("a blank " + KeyEnv + " was accepted")
	}
	t.Setenv(KeyEnv, "0123456789abcdef0")
	if k, err := ReadKey(""); err != nil || string(k) != "0123456789abcdef0" {
		t.Errorf("ReadKey from the environment: %q %v", k, err)
	}
	os.Unsetenv(KeyEnv)
	if k, err := ReadKey(""); k != nil || err != nil {
		t.Errorf("no key given: %q %v, want nothing", k, err)
	}

	kd := filepath.Join(dir, "run")
	k1, err := LoadOrCreateKey(kd)
	if err != nil || len(k1) != 64 {
		t.Fatalf("LoadOrCreateKey: %q %v", k1, err)
	}
	fi, err := os.Stat(filepath.Join(kd, KeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v, want mode 600", fi.Mode(), err)
	}
	if k2, err := LoadOrCreateKey(kd); err != nil || string(k2) != string(k1) {
		t.Fatalf("the second load: %q %v, want the first key", k2, err)
	}
	os.Chmod(filepath.Join(kd, KeyFile), 0o644)
	if _, err := LoadOrCreateKey(kd); err == nil {
		t.Fatal("a key others may read was accepted")
	}
}

// FuzzOpen opens arbitrary bodies, signed with the key, with another key,
// or not at all: Open never panics, only a correctly signed body gets past
// the MAC, and every record it accepts holds only samples a batch can
// train on, each labelled with the record's task and reward.
func FuzzOpen(f *testing.F) {
	f.Add(mustJSON(good()), uint8(0))
	f.Add(mustJSON(good()), uint8(1))
	f.Add(mustJSON(good()), uint8(2))
	f.Add([]byte(`{"id":"x","reward":1e308,"samples":[{"Prompt":[],"Actions":[1],"LogProbs":[1,2]}]}`), uint8(0))
	f.Add([]byte(`{"id":"x","task_id":"t","reward":-0,"samples":[{"Prompt":[1],"Actions":[],"StepRewards":[]}]}`), uint8(0))
	f.Add([]byte(`{"id":"x","samples":[{"Obs":[1e39],"Actions":[1]}]}`), uint8(0))
	f.Add([]byte(`null`), uint8(0))
	f.Fuzz(func(t *testing.T, body []byte, mode uint8) {
		var sig string
		switch mode % 3 {
		case 0:
			sig = Sign(testKey, subject, body)
		case 1:
			sig = Sign([]byte("the wrong key, long enough"), subject, body)
		}
		rec, dropped, err := Open(testKey, subject, body, sig, 1e6)
		switch mode % 3 {
		case 1:
			if Reason(err) != Forged {
				t.Fatalf("signed with another key: %v", err)
			}
			return
		case 2:
			if Reason(err) != Unsigned {
				t.Fatalf("unsigned: %v", err)
			}
			return
		}
		if err != nil {
			if Reason(err) != Malformed {
				t.Fatalf("a signed body refused as %v", err)
			}
			return
		}
		if dropped < 0 || rec.ID == "" || !finite(rec.Reward) {
			t.Fatalf("accepted %+v with %d dropped", rec, dropped)
		}
		for i := range rec.Samples {
			s := &rec.Samples[i]
			if !validSample(s) || s.TaskID != rec.TaskID || s.Reward != rec.Reward || s.Version < rec.MinVersion {
				t.Fatalf("accepted sample %d: %+v of %+v", i, *s, rec)
			}
		}
	})
}

// TestConversationBudget: a conversation keeps text up to
// MaxConversationBytes, cuts the text that crosses it (at a character
// boundary, with the mark), and counts the completions after it in one
// closing record.
func TestConversationBudget(t *testing.T) {
	var c Conversation
	msgs := []api.Message{{Role: "user", Content: "hi"}}
	c.Add(msgs, []string{"a", "b"}, []string{"stop", "length"})
	if r := c.Records(); len(r) != 2 || r[1].Completion != "b" || r[1].FinishReason != "length" || r[0].Messages[0].Content != "hi" {
		t.Fatalf("records: %+v", r)
	}
	big := strings.Repeat("é", MaxConversationBytes) // two bytes each
	c.Add([]api.Message{{Role: "user", Content: big}}, []string{"lost"}, []string{"stop"})
	c.Add(msgs, []string{"x", "y"}, []string{"stop", "stop"})
	r := c.Records()
	if len(r) != 4 {
		t.Fatalf("%d records, want 2, the cut one and the count", len(r))
	}
	cut := r[2].Messages[0].Content
	if !strings.HasSuffix(cut, TruncatedMark) || !utf8.ValidString(cut) || r[2].Completion != TruncatedMark {
		t.Fatalf("the record past the budget: %.40q… completion %q", cut, r[2].Completion)
	}
	if total := len("hi") + len("a") + len("hi") + len("b") + len(cut) - len(TruncatedMark); total > MaxConversationBytes+4 {
		t.Fatalf("kept %d bytes of text, beyond the budget of %d", total, MaxConversationBytes)
	}
	if !strings.Contains(r[3].Completion, "2 more completions not kept") {
		t.Fatalf("the closing record: %q", r[3].Completion)
	}
}

// TestMessages: string content, text parts and other JSON.
func TestMessages(t *testing.T) {
	m := Messages([]byte(`{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url"}, {"type": "text", "text": "b"}]},
		{"role": "tool", "content": {"x": 1}}, {"role": "assistant", "content": null}]}`))
	if len(m) != 4 || m[0].Content != "s" || m[1].Content != "ab" || m[2].Content != `{"x": 1}` || m[3].Content != "" {
		t.Fatalf("messages: %+v", m)
	}
	if m := Messages([]byte("not json")); m == nil || len(m) != 0 {
		t.Fatalf("a body that is not a chat request: %+v", m)
	}
}

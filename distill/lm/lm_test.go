package lm_test

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/troupe-ml/troupe/distill/lm"
	"github.com/troupe-ml/troupe/nn"
	"github.com/troupe-ml/troupe/nn/hf"
	"github.com/troupe-ml/troupe/nn/tokenizer"
)

// load writes a random model of shape c with the tokenizer spec into a
// temporary directory and loads both.
func load(t testing.TB, c hf.Config, seed uint64, spec tokenizer.HFSpec) (*hf.Model, *hf.Tokenizer) {
	t.Helper()
	dir := t.TempDir()
	// The same largest logit for both shapes: LoRA leaves the tied
	// embedding, whose rows' norm (InitStd·√Hidden) times the final
	// norm's output (√Hidden) bounds how sure a model can become.
	std := 12.8 / float64(c.Hidden)
	if err := hf.WriteRandom(dir, c, seed, hf.WriteOptions{DType: "F32", InitStd: std}); err != nil {
		t.Fatal(err)
	}
	if err := spec.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	m, tok, err := hf.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, tok
}

// teacherShape is a larger model than the student's qwen3-byte (twice as
// wide, three layers instead of two) over the same 259-id vocabulary.
func teacherShape() hf.Config {
	c := hf.Shapes["qwen3-byte"]
	c.Hidden, c.Layers, c.HeadDim, c.Intermediate = 128, 3, 32, 256
	return c
}

var topics = []string{"the sea", "a cat", "bread", "rain", "music", "a map", "snow", "tea", "a door", "the moon",
	"salt", "a bell", "ink", "wind", "a lamp", "stone", "a ship", "milk", "a tree", "the sun"}

func conv(topic string) []hf.Message {
	return []hf.Message{{Role: "user", Content: "Say something about " + topic + "."}}
}

// trainedTeacher is the teacher with an adapter fine-tuned to answer any
// "Say something about X." with one of "YES.", "NO." and "MAYBE.", each a
// third of the time: a distribution the student must match, the same on
// held-out prompts.
func trainedTeacher(t testing.TB, m *hf.Model, tok *hf.Tokenizer) *hf.LoRA {
	t.Helper()
	ad, err := hf.NewLoRA(m, hf.LoRAConfig{Rank: 16, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	var seqs []hf.Seq
	for _, tp := range topics[:16] {
		p, err := tok.ApplyChatTemplate(conv(tp), true)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range []string{"YES.", "NO.", "MAYBE."} {
			seqs = append(seqs, hf.Seq{Prompt: p, Target: append(tok.Encode(a), tok.StopTokens()...)})
		}
	}
	opt := nn.NewAdamW(nn.Constant(3e-3), 0)
	var loss float64
	for s := 0; s < 100; s++ {
		if loss, err = m.ForwardBackward(ad, seqs, hf.CrossEntropy); err != nil {
			t.Fatal(err)
		}
		nn.ClipGradNorm(ad.Params(), 1)
		opt.Update(ad.Params())
		ad.Store.ZeroGrad()
	}
	t.Logf("teacher fine-tuned: cross-entropy %.3f per token", loss)
	return ad
}

// TestDistillLowersKL: a smaller student distilled from a fine-tuned
// teacher comes closer to it on held-out prompts, on-policy and
// off-policy: the exact per-token KL(student‖teacher) on the student's
// own samples falls.
func TestDistillLowersKL(t *testing.T) {
	if testing.Short() {
		t.Skip("fine-tunes a teacher and distils two students")
	}
	teacher, tok := load(t, teacherShape(), 1, tokenizer.ByteChatML())
	tAd := trainedTeacher(t, teacher, tok)
	student, stok := load(t, hf.Shapes["qwen3-byte"], 2, tokenizer.ByteChatML())
	var train, held [][]hf.Message
	for i, tp := range topics {
		if i < 16 {
			train = append(train, conv(tp))
		} else {
			held = append(held, conv(tp))
		}
	}
	t.Logf("teacher %d parameters (hidden %d, %d layers), student %d (hidden %d, %d layers)",
		teacher.Config.NumParams(), teacher.Config.Hidden, teacher.Config.Layers, student.Config.NumParams(), student.Config.Hidden, student.Config.Layers)
	for _, run := range []struct {
		mode  lm.Mode
		steps int
	}{{lm.OnPolicy, 150}, {lm.OffPolicy, 60}} {
		mode := run.mode
		sAd, err := hf.NewLoRA(student, hf.LoRAConfig{Rank: 16, Seed: 4})
		if err != nil {
			t.Fatal(err)
		}
		d, err := lm.New(lm.Config{Mode: mode, Teacher: teacher, TeacherLoRA: tAd, TeacherTokenizer: tok,
			Student: sAd, StudentTokenizer: stok, Prompts: train, Steps: run.steps, PromptsPerStep: 4, SamplesPerPrompt: 4,
			MaxTokens: 24, LR: 1e-2, Seed: 1, Log: io.Discard})
		if err != nil {
			t.Fatal(err)
		}
		before, err := d.TokenKL(context.Background(), held, 4, 99)
		if err != nil {
			t.Fatal(err)
		}
		st, err := d.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		after, err := d.TokenKL(context.Background(), held, 4, 99)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: held-out per-token KL(student‖teacher) %.3f → %.3f; batch KL at step 1 %.3f, step %d %.3f",
			mode, before, after, st[0].KL, len(st), st[len(st)-1].KL)
		if !(after < 0.5*before) {
			t.Errorf("%s: held-out KL %.3f → %.3f, want it halved", mode, before, after)
		}
	}
}

// TestSameTokenizer: tokenizers that differ are refused with the first
// difference; the same tokenizer written twice is accepted.
func TestSameTokenizer(t *testing.T) {
	c := hf.Shapes["qwen3-byte"]
	c.Vocab = 300
	_, a := load(t, c, 1, tokenizer.ByteChatML())
	_, b := load(t, c, 1, tokenizer.ByteChatML())
	if err := lm.SameTokenizer(a, b); err != nil {
		t.Errorf("the same tokenizer: %v", err)
	}
	merged := tokenizer.ByteChatML()
	merged.Tokens = append(merged.Tokens, nil, nil, nil, []byte("ab"))
	merged.Merges = [][2]int{{'a', 'b'}}
	_, m := load(t, c, 1, merged)
	swapped := tokenizer.ByteChatML()
	swapped.Added[1].ID, swapped.Added[2].ID = 258, 257
	swapped.Added[1], swapped.Added[2] = swapped.Added[2], swapped.Added[1]
	_, s := load(t, c, 1, swapped)
	for _, tc := range []struct {
		other *hf.Tokenizer
		want  string
	}{
		{m, "the teacher's has 259 token ids, the student's 260"},
		{s, `token 257 is "<|im_start|>" for the teacher, "<|im_end|>" for the student`},
	} {
		err := lm.SameTokenizer(a, tc.other)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
	teacher, _ := load(t, c, 1, tokenizer.ByteChatML())
	ad, err := hf.NewLoRA(teacher, hf.LoRAConfig{Rank: 2})
	if err != nil {
		t.Fatal(err)
	}
	_, err = lm.New(lm.Config{Teacher: teacher, TeacherTokenizer: a, Student: ad, StudentTokenizer: m, Prompts: [][]hf.Message{conv("x")}})
	if err == nil || !strings.Contains(err.Error(), "token-level distillation needs one tokenizer") {
		t.Errorf("New with different tokenizers: %v", err)
	}
}

package gradshare_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nats-io/nats.go"
	"github.com/troupe-ml/troupe/bus"
	"github.com/troupe-ml/troupe/rl/gradcomp"
	"github.com/troupe-ml/troupe/rl/gradshare"
)

// server starts an embedded NATS server on a loopback port.
func server(t *testing.T) string {
	t.Helper()
	b, err := bus.Open(context.Background(), bus.Config{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b.ClientURL()
}

// agent connects through a Meter and joins group "g".
func agent(t *testing.T, url, name string, s gradshare.Settings) (*gradshare.Group, *nats.Conn, *gradshare.Meter) {
	t.Helper()
	m := &gradshare.Meter{}
	nc, err := nats.Connect(url, nats.SetCustomDialer(m), nats.NoEcho())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	g, err := gradshare.Join(nc, gradshare.Config{Group: "g", Agent: name, Grad: s})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g, nc, m
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func randVec(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

func TestPublishGather(t *testing.T) {
	url := server(t)
	names := []string{"a", "b", "c"}
	groups := map[string]*gradshare.Group{}
	for _, n := range names {
		groups[n], _, _ = agent(t, url, n, gradshare.Settings{})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	sent := map[string][]float32{}
	for _, n := range names {
		sent[n] = randVec(rng, 7)
		if err := groups[n].Publish(0, sent[n]); err != nil {
			t.Fatal(err)
		}
	}
	for _, me := range names {
		got, err := groups[me].Gather(ctx(t), 0, 2)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, n := range names {
			if n != me {
				want = append(want, n)
			}
		}
		if len(got) != 2 || got[0].Agent != want[0] || got[1].Agent != want[1] {
			t.Fatalf("%s gathered %v, want agents %v", me, got, want)
		}
		for _, u := range got {
			if u.Step != 0 || !cmp.Equal(u.Values, sent[u.Agent]) {
				t.Errorf("%s got %s's step %d %v, want step 0 %v", me, u.Agent, u.Step, u.Values, sent[u.Agent])
			}
		}
		mean, err := gradshare.Mean(nil, sent[me], got)
		if err != nil {
			t.Fatal(err)
		}
		for i := range mean {
			want := (float64(sent["a"][i]) + float64(sent["b"][i]) + float64(sent["c"][i])) / 3
			if math.Abs(float64(mean[i])-want) > 1e-6 {
				t.Fatalf("%s mean[%d] = %g, want %g", me, i, mean[i], want)
			}
		}
	}
}

func TestLastValuePerAgent(t *testing.T) {
	url := server(t)
	a, _, _ := agent(t, url, "a", gradshare.Settings{})
	b, _, _ := agent(t, url, "b", gradshare.Settings{})
	for step := range 3 {
		if err := a.Publish(step, []float32{float32(step), 1}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Gather(ctx(t), 2, 1); err != nil {
		t.Fatal(err)
	}
	peers := b.Peers()
	if len(peers) != 1 || peers[0].Agent != "a" || peers[0].Step != 2 || peers[0].Values[0] != 2 {
		t.Fatalf("Peers() = %+v, want a's step 2", peers)
	}
	if age := peers[0].Age(); age < 0 || age > time.Minute {
		t.Errorf("age %v", age)
	}
	// A peer one step ahead: the step being gathered is still held.
	got, err := b.Gather(ctx(t), 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Step != 1 || got[0].Values[0] != 1 {
		t.Errorf("Gather(1) = %+v, want a's step 1", got[0])
	}
	if len(a.Peers()) != 0 {
		t.Errorf("a sees its own messages: %+v", a.Peers())
	}
}

// TestBytesOnTheWire checks the counted sizes against the gradcomp formulas
// and against the bytes the sockets carried.
func TestBytesOnTheWire(t *testing.T) {
	const n = 1000
	cases := []struct {
		s       gradshare.Settings
		payload int // gradcomp message size (see package gradcomp)
	}{
		{gradshare.Settings{Codec: gradcomp.Raw}, 5 + 4*n},
		{gradshare.Settings{Codec: gradcomp.Q8}, 5 + 8 + n},
		{gradshare.Settings{Codec: gradcomp.TopKQ8, Frac: 0.1, ErrorFeedback: true}, 5 + 4 + 5*100 + 8},
		{gradshare.Settings{Codec: gradcomp.TopK, Frac: 0.05}, 5 + 4 + 8*50},
	}
	for _, c := range cases {
		t.Run(c.s.String(), func(t *testing.T) {
			url := server(t)
			a, anc, am := agent(t, url, "alice", c.s)
			b, bnc, bm := agent(t, url, "bob", gradshare.Settings{})
			if err := anc.Flush(); err != nil {
				t.Fatal(err)
			}
			if err := bnc.Flush(); err != nil {
				t.Fatal(err)
			}
			w0, r0 := am.Written(), bm.Read()
			rng := rand.New(rand.NewPCG(3, 4))
			var wantMsg, wantPub, wantRecv int
			const steps = 12 // steps 0..11: one- and two-digit sizes and uvarints all one byte
			for step := range steps {
				if err := a.Publish(step, randVec(rng, n)); err != nil {
					t.Fatal(err)
				}
				size := 1 + 1 + c.payload // kind, uvarint step, gradcomp message
				wantMsg += size
				subj := "troupe.grad.g.alice"
				wantPub += len(fmt.Sprintf("PUB %s %d\r\n", subj, size)) + size + 2
				// b's gradient subscription is its first: sid 1.
				wantRecv += len(fmt.Sprintf("MSG %s 1 %d\r\n", subj, size)) + size + 2
			}
			if _, err := b.Gather(ctx(t), steps-1, 1); err != nil {
				t.Fatal(err)
			}
			if err := anc.Flush(); err != nil { // writes "PING\r\n"
				t.Fatal(err)
			}
			sa, sb := a.Stats(), b.Stats()
			if sa.SentMsgs != steps || sa.SentBytes != int64(wantMsg) || sa.SentWire != int64(wantPub) {
				t.Errorf("sender stats %+v, want %d msgs, %d bytes, %d on the wire", sa, steps, wantMsg, wantPub)
			}
			if got := am.Written() - w0; got != int64(wantPub+len("PING\r\n")) {
				t.Errorf("sender socket wrote %d bytes, want %d frames + 6 for the flush", got, wantPub)
			}
			if sb.RecvMsgs != steps || sb.RecvBytes != int64(wantMsg) || sb.Dropped != 0 {
				t.Errorf("receiver stats %+v, want %d msgs of %d bytes", sb, steps, wantMsg)
			}
			if got := bm.Read() - r0; got != int64(wantRecv) {
				t.Errorf("receiver socket read %d bytes, want %d", got, wantRecv)
			}
		})
	}
}

func TestDPNoise(t *testing.T) {
	const (
		n     = 20000
		sigma = 0.02
		clip  = 1.0
	)
	url := server(t)
	a, _, _ := agent(t, url, "a", gradshare.Settings{Codec: gradcomp.Raw, Noise: sigma, Clip: clip, Seed: 7})
	b, _, _ := agent(t, url, "b", gradshare.Settings{})
	// A gradient of norm 100 along a random direction: clipped to norm 1.
	rng := rand.New(rand.NewPCG(5, 6))
	g := randVec(rng, n)
	var norm float64
	for _, v := range g {
		norm += float64(v) * float64(v)
	}
	norm = math.Sqrt(norm)
	for i := range g {
		g[i] *= float32(100 / norm)
	}
	for step := range 2 {
		if err := a.Publish(step, g); err != nil {
			t.Fatal(err)
		}
	}
	got, err := b.Gather(ctx(t), 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	// decoded = clip·ĝ + noise: the projection on ĝ is clip ± σ·clip, and
	// what remains has standard deviation σ·clip per coordinate.
	d := got[0].Values
	var proj float64
	for i, v := range d {
		proj += float64(v) * float64(g[i]) / 100
	}
	var ss float64
	for i, v := range d {
		r := float64(v) - proj*float64(g[i])/100
		ss += r * r
	}
	sd := math.Sqrt(ss / n)
	if math.Abs(proj-clip) > 4*sigma*clip {
		t.Errorf("projection on the gradient %g, want %g ± %g", proj, clip, 4*sigma*clip)
	}
	// The sample deviation of n normals has relative error about 1/sqrt(2n) = 0.5%.
	if math.Abs(sd/(sigma*clip)-1) > 0.03 {
		t.Errorf("noise sd %g, want %g", sd, sigma*clip)
	}
	// Two DP messages: ε from the closed form.
	delta := 1e-5
	want := 2/(2*sigma*sigma) + math.Sqrt(2*2*math.Log(1/delta))/sigma
	if eps := a.Epsilon(delta); math.Abs(eps-want) > 1e-9*want {
		t.Errorf("ε = %g, want %g", eps, want)
	}
	if eps := b.Epsilon(delta); !math.IsInf(eps, 1) {
		t.Errorf("ε without noise = %g, want +Inf", eps)
	}
	// Same seed and agent, same noise; the no-DP path sends g unchanged.
	c, _, _ := agent(t, url, "c", gradshare.Settings{})
	if err := c.Publish(0, g); err != nil {
		t.Fatal(err)
	}
	got, err = b.Gather(ctx(t), 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(got[1].Values, g) {
		t.Error("a gradient without DP settings was changed")
	}
}

func TestErrorFeedbackCarriesResidual(t *testing.T) {
	url := server(t)
	a, _, _ := agent(t, url, "a", gradshare.Settings{Codec: gradcomp.TopK, Frac: 0.25, ErrorFeedback: true})
	b, _, _ := agent(t, url, "b", gradshare.Settings{})
	g := []float32{0.5, -3, 0.25, 2, -1, 0.125, 4, -0.75}
	zero := make([]float32, len(g))
	sum := make([]float64, len(g))
	for step := range 4 {
		x := zero
		if step == 0 {
			x = g
		}
		if err := a.Publish(step, x); err != nil {
			t.Fatal(err)
		}
		got, err := b.Gather(ctx(t), step, 1)
		if err != nil {
			t.Fatal(err)
		}
		nonzero := 0
		for i, v := range got[0].Values {
			sum[i] += float64(v)
			if v != 0 {
				nonzero++
			}
		}
		if nonzero != 2 {
			t.Errorf("step %d sent %d entries, want k = 2", step, nonzero)
		}
		if step == 0 {
			// The residual is what the message left out.
			want := make([]float32, len(g))
			for i := range g {
				want[i] = g[i] - got[0].Values[i]
			}
			if !cmp.Equal(a.Compressor().Residual(), want) {
				t.Errorf("residual %v, want %v", a.Compressor().Residual(), want)
			}
		}
	}
	// Eight entries, two per message: after four messages everything of g
	// has been delivered, the largest first.
	want := make([]float64, len(g))
	for i, v := range g {
		want[i] = float64(v)
	}
	if !cmp.Equal(sum, want) {
		t.Errorf("delivered %v, want %v", sum, want)
	}
	if r := a.Compressor().Residual(); !cmp.Equal(r, zero) {
		t.Errorf("residual after delivery %v, want zeros", r)
	}
}

func TestParamsFuse(t *testing.T) {
	url := server(t)
	a, _, _ := agent(t, url, "a", gradshare.Settings{})
	b, _, _ := agent(t, url, "b", gradshare.Settings{})
	pa, pb := []float32{1, 2, 3}, []float32{3, 0, -1}
	if err := a.PublishParams(10, pa, 0.7); err != nil {
		t.Fatal(err)
	}
	got, err := b.GatherParams(ctx(t), 10, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Score != 0.7 || got[0].Step != 10 || !cmp.Equal(got[0].Values, pa) {
		t.Fatalf("got %+v", got[0])
	}
	if len(b.Peers()) != 0 {
		t.Error("parameters showed up as gradients")
	}
	const tau = 0.1
	fused, w, err := gradshare.Fuse(nil, append(got, gradshare.Update{Agent: "b", Values: pb, Score: 0.5}), tau)
	if err != nil {
		t.Fatal(err)
	}
	wa := 1 / (1 + math.Exp((0.5-0.7)/tau))
	wantW := []float64{wa, 1 - wa}
	var wantF []float64
	for i := range pa {
		wantF = append(wantF, wa*float64(pa[i])+(1-wa)*float64(pb[i]))
	}
	if !cmp.Equal(w, wantW, cmpopts.EquateApprox(0, 1e-12)) {
		t.Errorf("weights %v, want %v", w, wantW)
	}
	f64 := make([]float64, len(fused))
	for i, v := range fused {
		f64[i] = float64(v)
	}
	if !cmp.Equal(f64, wantF, cmpopts.EquateApprox(1e-6, 0)) {
		t.Errorf("fused %v, want %v", fused, wantF)
	}
}

func TestAttentionWeights(t *testing.T) {
	for _, c := range []struct {
		scores []float64
		tau    float64
		want   []float64
	}{
		{[]float64{0.8, 0.8, 0.8, 0.8}, 0.05, []float64{0.25, 0.25, 0.25, 0.25}},
		{[]float64{0, math.Log(3)}, 1, []float64{0.25, 0.75}},
		{[]float64{1000, 1001}, 1, []float64{1 / (1 + math.E), math.E / (1 + math.E)}}, // no overflow
		{[]float64{0.9, 0.5}, 1e-3, []float64{1, 0}},
	} {
		got := gradshare.AttentionWeights(c.scores, c.tau)
		if !cmp.Equal(got, c.want, cmpopts.EquateApprox(0, 1e-12)) {
			t.Errorf("AttentionWeights(%v, %g) = %v, want %v", c.scores, c.tau, got, c.want)
		}
	}
}

func TestErrors(t *testing.T) {
	if _, _, err := gradshare.Fuse(nil, []gradshare.Update{{Values: []float32{1}}, {Values: []float32{1, 2}}}, 1); err == nil {
		t.Error("Fuse of different lengths: no error")
	}
	if _, _, err := gradshare.Fuse(nil, []gradshare.Update{{Values: []float32{1}}}, 0); err == nil {
		t.Error("Fuse with τ = 0: no error")
	}
	if _, err := gradshare.Mean(nil, []float32{1, 2}, []gradshare.Update{{Values: []float32{1}}}); err == nil {
		t.Error("Mean of different lengths: no error")
	}
	url := server(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for _, c := range []gradshare.Config{
		{Group: "g", Agent: "a.b"},
		{Group: "", Agent: "a"},
		{Group: "g", Agent: "*"},
		{Group: "g", Agent: "a", Grad: gradshare.Settings{Noise: 1}},
		{Group: "g", Agent: "a", Grad: gradshare.Settings{Codec: gradcomp.TopK, Frac: 2}},
		{Group: "g", Agent: "a", Size: -1},
	} {
		if _, err := gradshare.Join(nc, c); err == nil {
			t.Errorf("Join(%+v): no error", c)
		}
	}
	// Malformed messages from a peer are counted and dropped, and so is
	// a well-formed one of the wrong size (a 19-byte top-k message
	// declaring 2^25 values, one kept, that would decode to 128 MiB).
	bnc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer bnc.Close()
	b, err := gradshare.Join(bnc, gradshare.Config{Group: "g", Agent: "b", Size: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	huge := []byte{1, 0, byte(gradcomp.TopK), 0, 0, 0, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 128, 63}
	for i, m := range [][]byte{nil, {1}, {9, 0, 0}, {1, 0, 1, 255, 255, 255, 255}, {2, 0, 1}, huge} {
		if err := nc.Publish("troupe.grad.g.x"+strconv.Itoa(i), m); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for b.Stats().RecvMsgs < 6 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if s := b.Stats(); s.Dropped != 6 || s.LastError == nil || len(b.Peers()) != 0 {
		t.Errorf("stats %+v, %d peers: want 6 dropped and none", s, len(b.Peers()))
	}
	if err := nc.Publish("troupe.grad.g.ok", []byte{1, 0, byte(gradcomp.Raw), 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Gather(ctx(t), 0, 1); err != nil || len(got) != 1 || len(got[0].Values) != 3 {
		t.Errorf("a message of the right size: %d updates, %v", len(got), err)
	}
	c, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := b.Gather(c, 5, 1); err == nil {
		t.Error("Gather of a step no peer reached: no error")
	}
}

// Two agents on an embedded bus average their gradients.
func Example() {
	b, err := bus.Open(context.Background(), bus.Config{})
	if err != nil {
		panic(err)
	}
	defer b.Close()
	s := gradshare.Settings{Codec: gradcomp.Q8, ErrorFeedback: true}
	alice, _ := gradshare.Join(b.Conn(), gradshare.Config{Group: "demo", Agent: "alice", Grad: s})
	bob, _ := gradshare.Join(b.Conn(), gradshare.Config{Group: "demo", Agent: "bob", Grad: s})
	ga, gb := []float32{1, -1, 0.5}, []float32{0, 1, 0.5}
	alice.Publish(0, ga)
	bob.Publish(0, gb)
	ctx := context.Background()
	peers, _ := alice.Gather(ctx, 0, 1)
	mean, _ := gradshare.Mean(nil, ga, peers)
	// bob's 0.5 arrives as 127/255 on the 8-bit grid over [0, 1].
	fmt.Printf("alice applies %.3f from %s (step %d, %d bytes)\n", mean, peers[0].Agent, peers[0].Step, peers[0].Bytes)
	fmt.Println(s)
	// Output:
	// alice applies [0.500 0.000 0.499] from bob (step 0, 18 bytes)
	// q8 +EF
}

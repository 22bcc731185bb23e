package nn

import (
	"fmt"
	"math"

	kern "github.com/troupe-ml/troupe/tensor"
	G "gorgonia.org/gorgonia"
)

// CopyMixOp is the output layer of a pointer-generator language model (See,
// Liu and Manning 2017, "Get To The Point: Summarization with
// Pointer-Generator Networks"; Gu et al. 2016, CopyNet): at every position t
// of a causal sequence the next token is drawn from a mixture of the
// vocabulary softmax and a pointer over the tokens seen so far,
//
//	p_t(v) = g_t·softmax(logits_t)[v] + (1−g_t)·Σ_{j≤t, ids_j=v} a_{t,j},
//	a_{t,·} = softmax_{j≤t}(q_t·k_j/√C),  g_t = σ(gate_t),
//
// so a model can copy a token it has seen (a rare name, a placeholder, a
// span of a text it is asked to edit) exactly, by pointing at it, instead of
// having to learn to reproduce it through its vocabulary projection.
//
// logits is B×T×V, q and k are B×T×C, gate has B×T entries (B×T×1) and ids
// (B×T, float32 token ids, not differentiated) are the tokens at the
// positions the pointer attends to. The result is B×T×V: log p_t(v), a
// normalised log-distribution (its own log-softmax), so it can take the
// place of logits in every loss and sampler. Tokens that were not seen get
// log g_t + log softmax(logits_t)[v] exactly; seen ones are mixed in float64.
// Gradients flow to logits, q, k and gate.
func CopyMixOp(logits, q, k, gate, ids *G.Node) *G.Node {
	zs, qs, ks := logits.Shape(), q.Shape(), k.Shape()
	if zs.Dims() != 3 || qs.Dims() != 3 || !qs.Eq(ks) || qs[0] != zs[0] || qs[1] != zs[1] ||
		gate.Shape().TotalSize() != zs[0]*zs[1] || ids.Shape().TotalSize() != zs[0]*zs[1] {
		panic(fmt.Sprintf("nn: CopyMixOp: logits %v (B×T×V), q %v and k %v (B×T×C), gate %v (B×T×1), ids %v (B×T) do not match",
			zs, qs, ks, gate.Shape(), ids.Shape()))
	}
	B, T, V, C := zs[0], zs[1], zs[2], qs[2]
	scale := 1 / math.Sqrt(float64(C))
	// Saved by the forward pass for the backward pass of the same run.
	ls := make([]float32, B*T*V)  // log-softmax of the logits
	att := make([]float32, B*T*T) // pointer attention, row t over 0…t (zeros after)
	gt := make([]float64, B*T)    // σ(gate)
	// Per-worker scratch (workers take whole sequences b).
	type scratch struct {
		mass   []float64 // pointer mass per token
		rv, pv []float64 // g·P_v/p_v (1 for unseen tokens) and p_v (0: not computed)
		dA     []float64
		dS     []float32 // one sequence's score gradients, T×T
	}
	var scr []scratch
	// overSequences runs fn(worker, b) for every sequence b, sequences split
	// over tensor.ParallelRows' workers (independent: a pointer attends
	// within its own sequence).
	overSequences := func(fn func(w, b int)) {
		for len(scr) < kern.Threads() {
			s := scratch{mass: make([]float64, V), rv: make([]float64, V), pv: make([]float64, V), dA: make([]float64, T), dS: make([]float32, T*T)}
			for v := range s.rv {
				s.rv[v] = 1
			}
			scr = append(scr, s)
		}
		kern.ParallelRows(B, 1, 1, func(w, lo, hi int) {
			for b := lo; b < hi; b++ {
				fn(w, b)
			}
		})
	}
	k2 := &kernel{name: "CopyMix", diff: []bool{true, true, true, true, false}}
	k2.fwd = func(in [][]float32, y []float32) error {
		qv, kv, u, id := in[1], in[2], in[3], in[4]
		for _, t := range id {
			if t < 0 || int(t) >= V || t != float32(int(t)) {
				return fmt.Errorf("token id %v outside vocabulary [0,%d)", t, V)
			}
		}
		kern.LogSoftmaxRows(ls, in[0], B*T, V)
		overSequences(func(w, b int) {
			mass := scr[w].mass
			// Scores of the whole sequence in one product, then the
			// causal softmax row by row.
			ab := att[b*T*T : (b+1)*T*T]
			kern.Gemm(false, true, T, T, C, float32(scale), qv[b*T*C:], C, kv[b*T*C:], C, 0, ab, T)
			for t := 0; t < T; t++ {
				kern.SoftmaxRows(ab[t*T:t*T+t+1], ab[t*T:t*T+t+1], 1, t+1)
				clear(ab[t*T+t+1 : (t+1)*T])
			}
			for t := 0; t < T; t++ {
				row := b*T + t
				lr := ls[row*V : (row+1)*V]
				g, lg := sigmoidLog(float64(u[row]))
				gt[row] = g
				a := ab[t*T : t*T+t+1]
				yr := y[row*V : (row+1)*V]
				flg := float32(lg)
				for v, l := range lr {
					yr[v] = l + flg
				}
				for j := range a {
					mass[int(id[b*T+j])] += float64(a[j])
				}
				gc := 1 - g
				for j := range a {
					v := int(id[b*T+j])
					if c := mass[v]; c != 0 {
						p := g*math.Exp(float64(lr[v])) + gc*c
						yr[v] = float32(math.Log(max(p, math.SmallestNonzeroFloat64)))
						mass[v] = 0
					}
				}
			}
		})
		return nil
	}
	k2.full = true // the backward writes every gradient element
	k2.bwd = func(in [][]float32, _, dy []float32, grads [][]float32) {
		qv, kv, id := in[1], in[2], in[4]
		gz, gq, gk, gu := grads[0], grads[1], grads[2], grads[3]
		kern.SoftmaxRows(gz, in[0], B*T, V) // P, overwritten row by row below
		overSequences(func(w, b int) {
			mass, rv, pv, dA, dS := scr[w].mass, scr[w].rv, scr[w].pv, scr[w].dA, scr[w].dS
			ib := id[b*T : (b+1)*T]
			for t := 0; t < T; t++ {
				row := b*T + t
				lr, dyr, gzr := ls[row*V:(row+1)*V], dy[row*V:(row+1)*V], gz[row*V:(row+1)*V]
				g := gt[row]
				gc := 1 - g
				a := att[row*T : row*T+t+1]
				for j := range a {
					mass[int(ib[j])] += float64(a[j])
				}
				// With r_v = g·P_v/p_v (1 for unseen tokens) and P the
				// vocabulary softmax:
				//   ∂L/∂logits_v = dy_v·r_v − P_v·Σ_w dy_w·r_w,
				//   ∂L/∂gate     = Σ_v dy_v·((1−g)·r_v − g·(1−r_v)),
				//   ∂L/∂a_j      = dy_{ids_j}·(1−g)/p_{ids_j}.
				var S float64
				for _, d := range dyr {
					S += float64(d)
				}
				du := gc * S
				for j := range a {
					v := int(ib[j])
					if pv[v] != 0 {
						continue
					}
					P := math.Exp(float64(lr[v]))
					p := max(g*P+gc*mass[v], math.SmallestNonzeroFloat64)
					r := g * P / p
					pv[v], rv[v] = p, r
					d := float64(dyr[v])
					S += d * (r - 1)
					du += d * (gc*r - g*(1-r) - gc)
				}
				fS := float32(S)
				for v, P := range gzr {
					gzr[v] = dyr[v] - P*fS
				}
				for j := range a {
					if v := int(ib[j]); rv[v] != 1 {
						gzr[v] = float32(float64(dyr[v])*rv[v] - math.Exp(float64(lr[v]))*S)
					}
				}
				gu[row] = float32(du)
				var dot float64
				for j := range a {
					v := int(ib[j])
					dA[j] = float64(dyr[v]) * gc / pv[v]
					dot += float64(a[j]) * dA[j]
				}
				for j := range a {
					v := int(ib[j])
					mass[v], pv[v], rv[v] = 0, 0, 1
				}
				// Softmax backward of the pointer scores.
				ds := dS[t*T : (t+1)*T]
				for j := range a {
					ds[j] = float32(float64(a[j]) * (dA[j] - dot))
				}
				clear(ds[t+1:])
			}
			// q_t·k_j/√C for all t, j: dQ = dS·K/√C, dK = dSᵀ·Q/√C.
			kern.Gemm(false, false, T, C, T, float32(scale), dS, T, kv[b*T*C:], C, 0, gq[b*T*C:(b+1)*T*C], C)
			kern.Gemm(true, false, T, C, T, float32(scale), dS, T, qv[b*T*C:], C, 0, gk[b*T*C:(b+1)*T*C], C)
		})
	}
	return applyFused(k2, zs, logits, q, k, gate, ids)
}

// pointer writes the attention a (length t+1) of query qr over the keys
// kv[j·C:(j+1)·C], j ≤ t, scaled by scale.
func pointer(a []float64, qr, kv []float32, C int, scale float64) {
	mx := math.Inf(-1)
	for j := range a {
		var s float64
		kr := kv[j*C : (j+1)*C]
		for c, x := range qr {
			s += float64(x) * float64(kr[c])
		}
		a[j] = s * scale
		mx = max(mx, a[j])
	}
	var sum float64
	for j := range a {
		a[j] = math.Exp(a[j] - mx)
		sum += a[j]
	}
	for j := range a {
		a[j] /= sum
	}
}

// logSumExp32 is log Σ exp(x) in float64.
func logSumExp32(x []float32) float64 {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = max(mx, float64(v))
	}
	var s float64
	for _, v := range x {
		s += math.Exp(float64(v) - mx)
	}
	return mx + math.Log(s)
}

// sigmoidLog returns σ(u) and log σ(u), stably.
func sigmoidLog(u float64) (g, lg float64) {
	lg = min(u, 0) - math.Log1p(math.Exp(-math.Abs(u)))
	return math.Exp(lg), lg
}

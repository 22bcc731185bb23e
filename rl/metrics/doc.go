// Package metrics records training-loop metrics: one row of named values per
// step, streamed as JSON lines and written as CSV, drawn as PNG curves with
// gonum.org/v1/plot, with a progress bar on long runs when stderr is a
// terminal and CPU or memory profiles on demand through github.com/pkg/profile.
//
// Typical use with a trainer:
//
//	log, _ := metrics.New(metrics.Options{Dir: "out/run1", Total: steps})
//	defer log.Close()
//	for step := range steps {
//		st, _ := trainer.Update(policy, batch)
//		m := st.Map()
//		maps.Copy(m, rewardLog.Map())
//		log.Log(step, m)
//	}
//	log.Plot("reward.png", "reward", "reward_mean", "kl")
//
// Plots share one look, for reports as well: Style sets the fonts and the
// NiceTicks tickers (about six round labels per axis), StyleLine gives
// series i its own Palette colour, and SavePNG puts the legend in a column
// beside the axes, where it cannot hide a curve.
package metrics

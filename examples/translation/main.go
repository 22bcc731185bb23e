package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/troupe-ml/troupe/examples/translation/corpus"
	"github.com/troupe-ml/troupe/examples/translation/grader"
	"github.com/troupe-ml/troupe/nn/tokenizer"
	"github.com/troupe-ml/troupe/rl"
	rlmetrics "github.com/troupe-ml/troupe/rl/metrics"
)

type env struct {
	tok    *tokenizer.Tokenizer
	qg     *grader.TranslationQualityGrader
	maxTok int
	// maxDetTok is agent 2's token budget: one JSON item is 20–39 tokens,
	// two are 50–69 (measured on the warm start's labels). Until stop 14 it
	// had maxTok (40), so a list of two errors was always cut off and
	// scored as invalid JSON.
	maxDetTok int
	// hint writes agent 2's glossary hint.
	hint glossaryHinter
	// maxRough bounds (in runes) the rough translation passed to agents 2
	// and 3 (maxCorrections bounds agent 2's answer in agent 3's prompt).
	maxRough int
	// crossRough holds -rl-crossfit's RL inputs: for each of its train
	// sentences, the greedy rough translation of a small model that never
	// saw it (crossFit). Agents 2 and 3 see it in every repeat of the task.
	crossRough map[string]string
	// crossGroups counts the GRPO groups given crossRough's inputs.
	crossGroups atomic.Int64
	// branchGroups and branchBetter count -branch-large's groups with a
	// branch position and those where a token other than the greedy one
	// valued higher there (branchRollout).
	branchGroups, branchBetter atomic.Int64
	rolloutOptions
}

// rolloutOptions are the command-line choices the RL rollouts read: how
// episodes are laid out and what each agent is rewarded with.
type rolloutOptions struct {
	// sharedReward gives agent 2 the final translation's quality reward
	// instead of its own detection reward (the sweep's second arm).
	sharedReward bool
	// jointSmall puts agents 1 and 3 in one episode on the small model's
	// server (one reward, the final translation's) instead of one each.
	jointSmall bool
	// counterfactual trains agents 2 and 3 on difference rewards: their
	// grader's score minus the score of doing nothing with the same input
	// ("[]" for the detector, the rough translation unchanged for agent 3).
	counterfactual bool
	// rawCorrections passes agent 2's answer to agent 3 as written instead
	// of through clientCorrections (the behaviour until stop 16).
	rawCorrections bool
	// guardFinal makes the workflow deliver agent 1's rough translation
	// instead of agent 3's final one where agent 3 was not asked for an
	// edit, did not apply it or rewrote beyond it (guardFinal).
	guardFinal bool
	// rlTemp is the sampling temperature of the RL rollouts; rlTempLarge
	// that of agent 2's turns (run resolves a negative flag to rlTemp).
	rlTemp, rlTempLarge float64
	// noTrainFinal makes agent 3's episodes evaluation episodes: the
	// small model learns from agent 1's turns only.
	noTrainFinal bool
	// noTrainRough makes agent 1's episodes evaluation episodes: the small
	// model learns from agent 3's turns only.
	noTrainRough bool
	// groupInputs makes each GRPO group of agents 2 and 3 share its
	// prompt: the greedy outputs of the agents before them (groupInputs).
	groupInputs bool
	// scstLarge and scstSmall give agents 2 and 3 self-critical
	// baselines: each sampled turn's reward is its grader's score minus
	// that of the model's greedy answer to the same prompt, and that
	// model's GRPO does not centre the rewards (rl.GRPOConfig.NoCenter).
	scstLarge, scstSmall bool
	// vineLarge adds two branch rollouts of agent 2 to each task's GRPO
	// group (vineRollout): its first answer token forced to "[]" and to
	// the start of a list, each scored by its greedy continuation.
	vineLarge bool
	// vinePrefixes are the two forced first tokens as text ("[]" and the
	// first token of a JSON list), set by run.
	vinePrefixes [2]string
	// vineTemp is the temperature of the first decision whose expected
	// reward the branch rollouts follow (0: every pair counts fully).
	vineTemp float64
	// vineScale multiplies each branch pair's reward difference.
	vineScale float64
	// vineMask leaves agent 2's first answer token out of its sampled
	// episodes' loss, so that only the branch pairs train that decision.
	vineMask bool
	// vineHard keeps the branch pairs of error-prone tasks (-hard-frac);
	// without it only the tasks drawn as the evaluation's credit the
	// first decision, and the others' pairs get no weight.
	vineHard bool
	// vineLogistic weights each pair by 2(1 − q_b), q_b the probability
	// of its better branch at -vine-temp: the gradient of a logistic loss
	// on "which branch is better", weighted by |Q₀ − Q₁|.
	vineLogistic bool
	// branchLarge adds this many branch rollouts of agent 2 to each task's
	// GRPO group (branchRollout): its greedy answer branched at the token
	// that names its first item's term, each branch continued greedily.
	branchLarge int
	// branchScale multiplies each branch's centred value in its reward.
	branchScale float64
}

// largeContext is the larger model's context length (-large-max-len, or
// -max-len).
func (o *options) largeContext() int {
	if o.largeMaxLen > 0 {
		return o.largeMaxLen
	}
	return o.maxLen
}

type options struct {
	quick                           bool
	smallDim, smallLayers, largeDim int
	largeLayers, maxLen, vocab      int
	// largeMaxLen is the larger model's context length (0: maxLen).
	largeMaxLen                    int
	warmSteps, warmBatch           int
	largeWarmSteps                 int
	learnedPos                     bool
	warmLR, rlLR, klSmall, klLarge float64
	rlOpt, rlOptLarge              string
	rlLRLarge                      float64
	steps, batch, repeats          int
	ports, servers, out            string
	evalN, maxEn, maxZh            int
	seed, rlSeed                   uint64
	rolloutOptions
	sweep             bool
	pool              string // comma-separated run directories to pool (-pool)
	cacheDir          string // warm-start cache; default <out>/cache
	finalFrac, pseudo float64
	finalRewrite      float64
	copySteps         int
	roughTasks        int
	// rlHoldout is the fraction of train sentences held out of agent 2's
	// warm start and used as the RL phase's tasks (heldOut).
	rlHoldout float64
	// rlSplit is the fraction of train sentences held out of every warm
	// start (agents 1, 2 and 3) and used as the RL phase's tasks (heldOut).
	rlSplit float64
	// rlCrossfit is the fraction of train sentences (heldOut) that RL draws
	// from while every warm start keeps them; agents 2 and 3 see, in RL,
	// the rough translations of a second small model trained without them.
	rlCrossfit           float64
	smallCopy, largeCopy int
	profile              string
	hardFrac             float64
	evalSplit            string
	hintMarks            bool
	hintQuotes           bool
	noStd                bool
	entropy              float64
	ptxSmall, ptxLarge   int
	selectEvery, selectN int
	anchorSelf           int
	epochsLarge          int
	aggLarge             string
	batchLarge           int
	skipEqualLarge       bool
	positiveLarge        bool
	splitHan             bool
	cosineLarge          bool
	// calibration measures agent 2's first decision against a bias on
	// "[]" before and after RL (calibrate).
	calibration bool
	// tempered scores each RL sample at the temperature it was sampled at
	// (rl/policies.LM.Tempered): agent 2's turns at -rl-temp-large.
	tempered bool
	// settings lists every flag's value after parsing (for the report).
	settings string
}

// parseOptions reads the command line (args without the program name).
func parseOptions(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("translation", flag.ContinueOnError)
	fs.BoolVar(&o.quick, "quick", false, "a run of well under a minute (tiny models, 2 RL steps per server)")
	fs.IntVar(&o.smallDim, "small-dim", 64, "width of the small model (agents 1 and 3)")
	fs.IntVar(&o.smallLayers, "small-layers", 3, "layers of the small model (3: agent 3 must copy, which 2 layers learn far more slowly)")
	fs.BoolVar(&o.learnedPos, "learned-pos", false, "learned position embeddings instead of rotary ones")
	fs.IntVar(&o.smallCopy, "small-copy", 32, "pointer (copy) head width of the small model (0: none)")
	fs.IntVar(&o.largeCopy, "large-copy", 32, "pointer (copy) head width of the larger model (0: none)")
	fs.IntVar(&o.largeDim, "large-dim", 96, "width of the larger model (agent 2)")
	fs.IntVar(&o.largeLayers, "large-layers", 3, "layers of the larger model")
	fs.IntVar(&o.maxLen, "max-len", 128, "context length of the small model, and of the larger one unless -large-max-len")
	fs.IntVar(&o.largeMaxLen, "large-max-len", 0, "context length of the larger model (0: -max-len); agent 2's prompt (sentence, glossary entries, rough translation) is the longest, and what it leaves of the context bounds its JSON answer")
	fs.IntVar(&o.vocab, "vocab", 768, "BPE vocabulary size")
	fs.BoolVar(&o.splitHan, "split-han", false, "BPE merges stay within one Chinese character (each Han character is its own pre-tokenization chunk), so a term such as 长度 is the same tokens in the glossary hint and inside 的长度")
	fs.IntVar(&o.warmSteps, "warm-steps", 4000, "supervised warm-start steps of the small model (agents 1 and 3)")
	fs.IntVar(&o.largeWarmSteps, "large-warm-steps", 1000, "supervised warm-start steps of the larger model (agent 2)")
	fs.IntVar(&o.warmBatch, "warm-batch", 16, "warm-start batch size")
	fs.Float64Var(&o.warmLR, "warm-lr", 3e-3, "warm-start peak learning rate")
	fs.Float64Var(&o.rlLR, "rl-lr", -1, "GRPO learning rate of the small model (negative: the optimizer's default, 0.05 for sgd, 1e-4 for adamw)")
	fs.StringVar(&o.rlOpt, "rl-opt", "sgd", "optimizer of the GRPO steps: sgd (plain SGD: steps in proportion to the gradient), or adamw")
	fs.StringVar(&o.rlOptLarge, "rl-opt-large", "", "optimizer of the larger model's GRPO steps (empty: -rl-opt)")
	fs.Float64Var(&o.rlLRLarge, "rl-lr-large", -1, "GRPO learning rate of the larger model (negative: the optimizer's default, 0.1 for sgd, 1e-4 for adamw)")
	fs.Float64Var(&o.klSmall, "kl-small", 0.2, "GRPO KL penalty (β, k3 estimator) of the small model to its warm start")
	fs.Float64Var(&o.klLarge, "kl-large", 0.1, "GRPO KL penalty (β, k3 estimator) of the larger model to its warm start")
	fs.IntVar(&o.steps, "steps", 100, "GRPO steps per server")
	fs.IntVar(&o.batch, "batch", 4, "tasks per GRPO step")
	fs.IntVar(&o.repeats, "repeats", 8, "episodes per task (GRPO group size)")
	fs.StringVar(&o.ports, "ports", "10086,10087", "ports of the small and larger model's servers")
	fs.StringVar(&o.servers, "servers", "", "host:port,host:port of servers already running elsewhere (no local servers, no local evaluation)")
	fs.StringVar(&o.out, "out", "out/translation", "output folder (report, plots, checkpoint cache)")
	fs.IntVar(&o.evalN, "eval", 0, "test sentences to evaluate (0 = all)")
	fs.IntVar(&o.maxEn, "max-en", 48, "longest English source used (bytes)")
	fs.IntVar(&o.maxZh, "max-zh", 24, "longest Chinese reference used (characters)")
	fs.Uint64Var(&o.seed, "seed", 1, "random seed")
	fs.Uint64Var(&o.rlSeed, "rl-seed", 0, "random seed of the RL phase alone (0: -seed), to repeat RL from one cached warm start")
	fs.BoolVar(&o.sharedReward, "shared-reward", false, "reward agent 2 with the final translation's quality instead of its own detection grader")
	fs.BoolVar(&o.jointSmall, "joint-small", false, "one episode (rewarded by the final translation) for agents 1 and 3 on the small model's server instead of one per agent")
	fs.StringVar(&o.pool, "pool", "", "pool finished runs instead of running: comma-separated -out directories of one configuration with different -rl-seed; writes pooled.md to -out, each headline difference pooled over runs and sentences with intervals that also cover the RL phase's randomness")
	fs.BoolVar(&o.sweep, "sweep", false, "research sweep: independent vs shared reward, same warm start and seed; writes sweep.md and sweep.png to -out")
	fs.Float64Var(&o.finalFrac, "final-frac", 0.4, "fraction of agent-3 examples in the small model's warm start")
	fs.Float64Var(&o.finalRewrite, "final-rewrite", 0, "probability that agent 3's warm-start target for a true terminology error is the reference (a post-edit) instead of the rough translation with the term written in")
	fs.IntVar(&o.copySteps, "copy-steps", 1500, "first warm-start steps of the small model spent on agent 3's copy task alone (part of -warm-steps)")
	fs.Float64Var(&o.pseudo, "pseudo", 0.5, "fraction of agent 3's second-phase warm-start examples made on pseudo-rough texts (copy training) instead of agent 1's real outputs")
	fs.Float64Var(&o.rlHoldout, "rl-holdout", 0, "fraction of the train sentences (by a stable hash of the English, independent of the split's) held out of agent 2's warm start and drawn as the RL phase's tasks, so that the detector's RL prompts are not ones it was supervised on (0: RL draws from all train sentences); agents 1 and 3's warm start is unchanged")
	fs.Float64Var(&o.rlSplit, "rl-split", 0, "fraction of the train sentences (the -rl-holdout hash) held out of every warm start, agents 1 and 3's as well as agent 2's, and drawn as the RL phase's tasks: agent 1 has never seen them, so its rough translations there, agent 2's RL inputs, are as error-prone as on the evaluation split (on the sentences it was trained on they are not: notes/translation.md R24); the tokenizer still learns from every train sentence (0: no RL split)")
	fs.Float64Var(&o.rlCrossfit, "rl-crossfit", 0, "fraction of the train sentences (the -rl-holdout hash) the RL phase draws from, with held-out-like inputs and no warm start weakened: every warm start keeps them, but a second small model, trained as -rl-split's without them, translates them greedily, and in RL agents 2 and 3 of every repeat see that rough translation (cross-fitting: agent 2's RL inputs are as error-prone as on the evaluation split, where -rl-split paid for that with weaker warm starts) and agent 2's greedy detection of it (as -group-inputs); agent 1 still samples its own (0: off)")
	fs.IntVar(&o.roughTasks, "rough-tasks", 0, "train sentences agent 1 translates for the warm start of agents 2 and 3 (0: all)")
	fs.Float64Var(&o.hardFrac, "hard-frac", 0.5, "fraction of each GRPO batch drawn from error-prone train sentences (the warm-start rough translation misses a glossary term)")
	fs.BoolVar(&o.rawCorrections, "raw-corrections", false, "pass agent 2's answer to agent 3 as written, without the client's validation (invalid JSON becomes [], items that ask for nothing are dropped)")
	fs.BoolVar(&o.hintQuotes, "hint-quotes", true, "quote the English of each glossary entry in agent 2's prompt (\"already\"=已经), so that its tokens are those of the answer's \"original_word\":\"already\" (after a space the pre-tokenizer makes \" already\" other tokens) and the pointer head can copy the term whole")
	fs.BoolVar(&o.hintMarks, "hint-marks", true, "mark each glossary entry of agent 2's prompt (found) or (missing) in the rough translation, the string-matching checker's verdict")
	fs.StringVar(&o.evalSplit, "eval-split", "test", "split the report evaluates: test, val (for choosing settings without looking at the test split), or train (a diagnostic: every 8th train sentence, ones the warm starts learned from, to compare the RL phase's inputs with held-out ones)")
	fs.BoolVar(&o.noStd, "no-std", false, "GRPO advantages r − mean without the group-std division (Dr. GRPO, Liu et al. 2025)")
	fs.Float64Var(&o.entropy, "entropy", 0, "GRPO entropy bonus coefficient of both models")
	fs.BoolVar(&o.guardFinal, "guard-final", true, "the client guards agent 3's answer: the workflow delivers agent 3's final translation only where agent 2's validated answer asked for corrections, the translation contains every correction's rendering and its edit distance to the rough translation is at most twice the corrections' size, else agent 1's rough translation (agent 3's own reward is its output as written either way; the report gives both)")
	fs.BoolVar(&o.counterfactual, "counterfactual", true, "train agents 2 and 3 on difference rewards: grader score minus that of doing nothing with the same input (\"[]\"; the rough translation unchanged)")
	fs.Float64Var(&o.rlTemp, "rl-temp", 1, "sampling temperature of the RL rollouts")
	fs.Float64Var(&o.rlTempLarge, "rl-temp-large", 0.5, "sampling temperature of agent 2's turns in the RL rollouts (negative: -rl-temp)")
	fs.BoolVar(&o.noTrainFinal, "no-train-final", false, "agent 3's turns are not trained on (evaluation episodes): the small model learns from agent 1's turns alone")
	fs.BoolVar(&o.noTrainRough, "no-train-rough", true, "agent 1's turns are not trained on (evaluation episodes): the small model learns from agent 3's turns alone (-no-train-rough=false: from both)")
	fs.IntVar(&o.ptxSmall, "ptx-small", 0, "after each GRPO update of the small model, one supervised step on this many warm-start examples (PPO-ptx; 0: none)")
	fs.IntVar(&o.ptxLarge, "ptx-large", 0, "after each GRPO update of the larger model, one supervised step on this many warm-start examples (PPO-ptx; 0: none)")
	fs.BoolVar(&o.groupInputs, "group-inputs", false, "the repeats of a task give agents 2 and 3 the same input, agents 1 and 2's greedy outputs, so each GRPO group shares its prompt (agent 1 still samples its own)")
	fs.IntVar(&o.selectEvery, "select-every", 0, "every this many GRPO steps (and before the first) evaluate both models on -select-n validation sentences and keep, per model, the checkpoint with the best own validation reward (0: keep the last)")
	fs.IntVar(&o.selectN, "select-n", 200, "validation sentences of the checkpoint selection")
	fs.IntVar(&o.anchorSelf, "anchor-self", 0, "after each GRPO update of the small model, one supervised step on this many agent-3 prompts with the warm start's own greedy replies as targets (0: none; replaces -ptx-small)")
	fs.IntVar(&o.epochsLarge, "epochs-large", 1, "GRPO passes over each batch of the larger model (PPO's epochs, μ of Shao et al. 2024; later passes are importance-weighted and clipped)")
	fs.StringVar(&o.aggLarge, "agg-large", "seq", "how the larger model's GRPO loss aggregates token terms: seq (mean per sequence, then over sequences: the GRPO paper's), token (mean over all tokens of the batch: DAPO's token-level loss, Yu et al. 2025, where long answers weigh more than \"[]\")")
	fs.IntVar(&o.batchLarge, "batch-large", 0, "tasks per GRPO step of the larger model (0: -batch); the tasks beyond -batch train the larger model alone (the small model's turns in them are evaluation episodes)")
	fs.BoolVar(&o.positiveLarge, "positive-large", false, "train the larger model on its above-group-mean answers only: the others are left out of its GRPO loss instead of pushed down (RAFT-style reward-ranked fine-tuning, Dong et al. 2023; rl.GRPOConfig.PositiveOnly)")
	fs.BoolVar(&o.scstLarge, "scst-large", false, "self-critical baseline for agent 2 (Rennie et al. 2017): each sampled detection's reward is its score minus that of the larger model's greedy detection of the same prompt (an extra evaluation episode), and the larger model's GRPO does not centre its groups (rl.GRPOConfig.NoCenter): it learns toward answers that beat its own test-time output. Replaces -counterfactual's \"[]\" baseline; with -servers, the larger model's server must train with NoCenter")
	fs.BoolVar(&o.scstSmall, "scst-small", false, "self-critical baseline for agent 3, as -scst-large: the final translation's reward is its quality minus that of the small model's greedy final translation of the same prompt, not group-centred (needs agent 1's turns untrained, -no-train-rough, the default)")
	fs.BoolVar(&o.vineLarge, "vine-large", false, "credit agent 2's first decision directly (\"vine\" rollouts, Schulman et al. 2015): each task's GRPO group of agent 2 gets two more episodes on agent 1's greedy rough translation, agent 2's answer forced to start with \"[]\" and with a list's first token (the swarm server's assistant_prefix) and continued greedily; each is rewarded by its continuation's detection reward and trains the forced token alone. With -servers, the larger model's server needs num_repeat = -repeats + 2")
	fs.Float64Var(&o.vineScale, "vine-scale", 1, "with -vine-large, multiply each branch pair's reward difference by this (the pair's rewards m ± scale·w·(Q0-Q1)/2)")
	fs.BoolVar(&o.vineMask, "vine-mask", true, "leave agent 2's first answer token out of the loss of its sampled episodes: the token becomes part of the sample's prompt, so that only the branch pairs of -vine-large train the first decision, or, without -vine-large, nothing does and RL trains the answers given their first token (the sampled episodes, drawn at -rl-temp-large, follow that temperature's objective, which for this decision points away from greedy decoding's: notes/translation.md R22/R23). It is the larger model's server that drops the token: with -servers, run that server's model with the same rewrite (firstAsContext)")
	fs.BoolVar(&o.vineHard, "vine-hard", true, "with -vine-large, let the branch pairs of error-prone tasks (-hard-frac) count too; false: only the tasks drawn at random from the train split (as the evaluation's are) credit the first decision, whose best answer depends on how often inputs have an error, and the error-prone tasks' pairs get no weight")
	fs.BoolVar(&o.vineLogistic, "vine-logistic", false, "with -vine-large, weight each branch pair by 2(1-q), q the probability of its better branch among the two first tokens at -vine-temp: the gradient of a logistic loss on which branch is better, weighted by how much better, whose optimum answers \"[]\" where the expected difference favours it (instead of 4q(1-q), the expected reward's)")
	fs.Float64Var(&o.vineTemp, "vine-temp", 0.1, "with -vine-large, weight each task's branch pair by 4q(1-q), q the probability of \"[]\" among the two first tokens at this temperature, so that the pair follows the expected reward of that decision made at this temperature (close to greedy decoding's for small values); 0: every pair counts fully")
	fs.IntVar(&o.branchLarge, "branch-large", 0, "add this many branch rollouts of agent 2 to each task's GRPO group (0: none): its greedy answer to agent 1's greedy rough translation is branched at the first token after its first \"original_word\":\" (the token that picks the glossary term an item is about), each of that position's most likely tokens forced there (the swarm server's assistant_context and assistant_prefix) and continued greedily; each branch trains its one token, rewarded by how much better its continuation's detection reward is than the branches' mean (VinePPO-style rollouts from an intermediate state). With -servers, the larger model's server needs num_repeat = -repeats + this (+ 2 with -vine-large)")
	fs.Float64Var(&o.branchScale, "branch-scale", 1, "with -branch-large, multiply each branch's centred value by this in its reward")
	fs.BoolVar(&o.skipEqualLarge, "skip-equal-large", false, "drop the larger model's GRPO groups whose rewards are all equal (zero advantage) from its loss, so they do not dilute the informative ones (DAPO's dynamic sampling without the resampling, Yu et al. 2025)")
	fs.BoolVar(&o.tempered, "tempered", false, "score each RL sample's tokens at the temperature it was sampled at (log softmax(logits/τ)), the policy that drew it, not at temperature 1: with agent 2 sampled at -rl-temp-large 0.5, its near-certain tokens then carry no advantage noise (rl/policies.LM.Tempered); greedy evaluation is unchanged by τ")
	fs.BoolVar(&o.calibration, "calibration", false, "measure agent 2's first decision (answer [] or open a list) before and after RL: the greedy reward and the expected sampled reward at temperatures 1, 0.5, 0.25 and 0.1 against a bias added to log p(\"[]\") at the first answer token, on the warm start's inputs; a section of report.md and calibration.png (60–80 s per detector at full size)")
	fs.BoolVar(&o.cosineLarge, "cosine-large", false, "the larger model's GRPO learning rate falls from -rl-lr-large to 0 along a half cosine over the RL phase (a decaying step size, against the random walk of its validation reward)")
	fs.StringVar(&o.cacheDir, "cache", "", "warm-start checkpoint cache (default <out>/cache)")
	fs.StringVar(&o.profile, "profile", "", "write a profile (cpu, mem, allocs, block, mutex, trace) of the run to <out>/profile")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var kv []string
	fs.VisitAll(func(f *flag.Flag) { kv = append(kv, "-"+f.Name+"="+f.Value.String()) })
	o.settings = strings.Join(kv, " ")
	return o, nil
}

func main() {
	o, err := parseOptions(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		os.Exit(2) // the flag package has printed the error and the usage
	}
	stop, err := rlmetrics.StartProfile(o.profile, filepath.Join(o.out, "profile"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "translation:", err)
		os.Exit(2)
	}
	defer stop()
	if o.quick {
		o.applyQuick()
	}
	if o.pool != "" {
		if err := pool(strings.Split(o.pool, ","), o.out, o.seed); err != nil {
			stop()
			fmt.Fprintln(os.Stderr, "translation:", err)
			os.Exit(1)
		}
		return
	}
	if o.sweep {
		if err := sweep(o); err != nil {
			stop()
			fmt.Fprintln(os.Stderr, "translation:", err)
			os.Exit(1)
		}
		return
	}
	if _, err := run(o); err != nil {
		stop()
		fmt.Fprintln(os.Stderr, "translation:", err)
		os.Exit(1)
	}
}

// grpo is the GRPO configuration both servers train with.
func (o *options) grpo() rl.GRPOConfig {
	return rl.GRPOConfig{ClipEps: 0.2, NoStdScale: o.noStd, EntropyCoef: o.entropy}
}

// applyQuick sets the -quick configuration: tiny models, a few warm-start
// steps and two GRPO steps per server.
func (o *options) applyQuick() {
	o.smallDim, o.smallLayers, o.largeDim, o.largeLayers = 16, 1, 24, 1
	o.maxLen, o.vocab, o.warmSteps, o.warmBatch = 96, 320, 6, 8
	o.roughTasks, o.largeWarmSteps, o.copySteps = 32, 6, 2
	o.steps, o.batch, o.repeats, o.evalN = 2, 2, 2, 16
	o.maxEn, o.maxZh = 32, 16
	o.smallCopy, o.largeCopy = min(o.smallCopy, 8), min(o.largeCopy, 8)
}

// defaultRLLR is lr, or where it is negative the default GRPO learning rate
// of optimizer opt: sgd for plain SGD (chosen on the validation split,
// notes/translation.md R13), 1e-4 for AdamW (R11).
func defaultRLLR(lr float64, opt string, sgd float64) float64 {
	switch {
	case lr >= 0:
		return lr
	case opt == "sgd":
		return sgd
	default:
		return 1e-4
	}
}

var t0 = time.Now()

func logf(f string, a ...any) {
	fmt.Fprintf(os.Stderr, "[%6.1fs] "+f+"\n", append([]any{time.Since(t0).Seconds()}, a...)...)
}

// check refuses contradictory or out-of-range options and resolves the
// defaults that depend on others (-batch-large, -rl-opt-large, the learning
// rates, -rl-temp-large).
func (o *options) check() error {
	if o.largeMaxLen < 0 || (o.largeMaxLen > 0 && o.largeMaxLen < 32) {
		return fmt.Errorf("-large-max-len %d: want 0 (-max-len) or at least 32", o.largeMaxLen)
	}
	if o.noTrainFinal && o.noTrainRough {
		return errors.New("-no-train-final and -no-train-rough (on by default) together leave the small model nothing to train on: add -no-train-rough=false")
	}
	if o.groupInputs && o.jointSmall {
		return errors.New("-group-inputs needs an episode per agent (not -joint-small)")
	}
	if o.scstSmall && (o.jointSmall || !o.noTrainRough) {
		return errors.New("-scst-small needs agent 1's turns untrained (-no-train-rough, not -joint-small): the small model's GRPO would not centre agent 1's rewards either")
	}
	if o.scstLarge && o.sharedReward {
		return errors.New("-scst-large baselines agent 2's own detection reward; with -shared-reward agent 2 is rewarded by the final translation")
	}
	if o.vineLarge && (o.sharedReward || o.scstLarge || o.jointSmall) {
		return errors.New("-vine-large rewards agent 2's branches by its own detection grader in its group-centred GRPO: not with -shared-reward, -scst-large or -joint-small")
	}
	if o.branchLarge < 0 || o.branchLarge > 20 {
		return errors.New("-branch-large wants 0 to 20 branches (the alternatives come from the top 20 log-probabilities)")
	}
	if o.branchLarge > 0 && (o.sharedReward || o.scstLarge || o.jointSmall) {
		return errors.New("-branch-large rewards agent 2's branches by its own detection grader in its group-centred GRPO: not with -shared-reward, -scst-large or -joint-small")
	}
	if o.branchScale != 1 && o.branchLarge == 0 {
		return errors.New("-branch-scale needs -branch-large")
	}
	if (o.vineScale != 1 || !o.vineHard || o.vineLogistic) && !o.vineLarge {
		return errors.New("-vine-scale, -vine-hard and -vine-logistic need -vine-large")
	}
	if o.vineLogistic && o.vineTemp == 0 {
		return errors.New("-vine-logistic needs -vine-temp > 0")
	}
	chosen := 0 // options that choose the RL phase's tasks
	for _, f := range []struct {
		flag string
		v    float64
	}{{"-rl-holdout", o.rlHoldout}, {"-rl-split", o.rlSplit}, {"-rl-crossfit", o.rlCrossfit}} {
		if f.v < 0 || f.v >= 1 {
			return fmt.Errorf("%s is a fraction in [0, 1), got %g", f.flag, f.v)
		}
		if f.v > 0 {
			chosen++
		}
	}
	if chosen > 1 {
		return errors.New("-rl-split, -rl-holdout and -rl-crossfit each choose the RL phase's tasks: give one")
	}
	if o.rlCrossfit > 0 && o.jointSmall {
		return errors.New("-rl-crossfit gives agents 2 and 3 shared inputs and needs an episode per agent (not -joint-small)")
	}
	if o.vineScale <= 0 {
		return fmt.Errorf("-vine-scale must be positive, got %g", o.vineScale)
	}
	if o.vineTemp < 0 {
		return fmt.Errorf("-vine-temp must be at least 0, got %g", o.vineTemp)
	}
	if o.epochsLarge < 1 {
		return fmt.Errorf("-epochs-large wants at least 1 pass, got %d", o.epochsLarge)
	}
	if o.batchLarge == 0 {
		o.batchLarge = o.batch
	}
	if o.batchLarge < o.batch {
		return fmt.Errorf("-batch-large (%d) must be at least -batch (%d)", o.batchLarge, o.batch)
	}
	if o.batchLarge > o.batch && o.jointSmall {
		return errors.New("-batch-large needs an episode per agent (not -joint-small)")
	}
	if o.aggLarge != "seq" && o.aggLarge != "token" {
		return fmt.Errorf("-agg-large wants seq or token, got %q", o.aggLarge)
	}
	if o.finalRewrite < 0 || o.finalRewrite > 1 {
		return fmt.Errorf("-final-rewrite is a probability, got %g", o.finalRewrite)
	}
	if o.rlOptLarge == "" {
		o.rlOptLarge = o.rlOpt
	}
	for _, v := range []string{o.rlOpt, o.rlOptLarge} {
		if v != "adamw" && v != "sgd" {
			return fmt.Errorf("-rl-opt and -rl-opt-large want adamw or sgd, got %q", v)
		}
	}
	o.rlLR = defaultRLLR(o.rlLR, o.rlOpt, 0.05)
	o.rlLRLarge = defaultRLLR(o.rlLRLarge, o.rlOptLarge, 0.1)
	if o.rlTempLarge < 0 {
		o.rlTempLarge = o.rlTemp
	}
	switch o.evalSplit {
	case "test", "val", "train", "":
	default:
		return fmt.Errorf("-eval-split wants test, val or train, got %q", o.evalSplit)
	}
	return nil
}

// tasks are the train split's tasks, the ones the report evaluates
// (-eval-split, -eval) and the validation sentences of the checkpoint
// selection (-select-every, -select-n; none without it).
func (o *options) tasks(d *corpus.Dataset) (train, test, sel []task) {
	train = makeTasks(d.Train, d.Glossary, o.maxEn, o.maxZh)
	evalPairs := d.Test
	switch o.evalSplit {
	case "val":
		evalPairs = d.Val
	case "train":
		evalPairs = d.Train
	}
	test = makeTasks(evalPairs, d.Glossary, o.maxEn, o.maxZh)
	if o.evalSplit == "train" {
		test = everyNth(test, 8, 3)
	}
	if o.evalN > 0 && len(test) > o.evalN {
		test = test[:o.evalN]
	}
	if o.selectEvery > 0 {
		sel = makeTasks(d.Val, d.Glossary, o.maxEn, o.maxZh)
		if o.selectN > 0 && len(sel) > o.selectN {
			sel = sel[:o.selectN]
		}
	}
	return train, test, sel
}

func run(o options) (*report, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	d, err := corpus.Load()
	if err != nil {
		return nil, err
	}
	train, test, selTasks := o.tasks(d)
	logf("data: %d train / %d test tasks (of %d/%d pairs), glossary %d terms, %d acronyms",
		len(train), len(test), len(d.Train), len(d.Test), len(d.Glossary.Terms), len(d.Acronyms))
	tok, err := trainTokenizer(train, d.Glossary, o.vocab, o.splitHan)
	if err != nil {
		return nil, err
	}
	e := &env{tok: tok, qg: &grader.TranslationQualityGrader{Glossary: d.Glossary, Acronyms: d.Acronyms}, maxTok: 40, maxDetTok: 80, hint: glossaryHinter{G: d.Glossary, Marks: o.hintMarks, Quotes: o.hintQuotes}, maxRough: 2 * o.maxZh, rolloutOptions: o.rolloutOptions}
	if o.vineLarge {
		if e.vinePrefixes, err = firstTokens(tok); err != nil {
			return nil, err
		}
	}
	w, err := o.warmStarts(e, d, train)
	if err != nil {
		return nil, err
	}
	small, large := w.small, w.large
	rep := &report{opts: o, lossSmall: w.lossSmall, lossLarge: w.lossLarge, nTrain: len(train), nTest: len(test)}
	if o.rlHoldout > 0 || o.rlSplit > 0 || o.rlCrossfit > 0 {
		rep.nHeldOut = len(w.rlTrain)
	}
	local := o.servers == ""
	if local {
		logf("evaluating warm start on %d %s sentences", len(test), o.evalSplit)
		if rep.aloneBefore, rep.flowBefore, err = e.evaluate(small, large, test); err != nil {
			return nil, err
		}
		for _, t := range test {
			rep.sentences = append(rep.sentences, t.En)
		}
		if o.calibration {
			logf("calibrating the warm-start detector's first decision")
			if rep.calBefore, err = e.calibrate(large, test, rep.flowBefore.seen, calBiases, calTemps, calSamples, o.seed); err != nil {
				return nil, err
			}
		}
	}

	rlSeed := o.seed
	if o.rlSeed != 0 {
		rlSeed = o.rlSeed
	}
	servers, clients, perRound, closeAll, err := o.startServers(e, w, d, rlSeed)
	if err != nil {
		return nil, err
	}
	defer closeAll()

	sel := newSelector(e, small, large, selTasks)
	if err := o.rlPhase(e, w, servers, clients, perRound, sel, rep, rlSeed); err != nil {
		return nil, err
	}
	if local {
		logf("evaluating after RL")
		if rep.aloneAfter, rep.flowAfter, err = e.evaluate(small, large, test); err != nil {
			return nil, err
		}
		if rep.detFixed, err = e.detectOn(large, test, rep.flowBefore.seen); err != nil {
			return nil, err
		}
		if o.calibration {
			logf("calibrating the detector's first decision after RL")
			if rep.calAfter, err = e.calibrate(large, test, rep.flowBefore.seen, calBiases, calTemps, calSamples, o.seed); err != nil {
				return nil, err
			}
		}
	}
	rep.crossGroups = e.crossGroups.Load()
	rep.branchGroups, rep.branchBetter = e.branchGroups.Load(), e.branchBetter.Load()
	rep.seconds = time.Since(t0).Seconds()
	if err := rep.write(o.out); err != nil {
		return nil, err
	}
	logf("report: %s", filepath.Join(o.out, "report.md"))
	return rep, nil
}

// Command ensemble-fusion is a notebook-style research script: it sweeps
// one design choice of the finance-risk ensemble — how the members'
// outputs are fused — over the same cross-validation folds and the same
// trained members, and writes a Markdown report with two plots: AUC and
// cost per applicant on every test fold, one line per method (auc.png,
// cost.png).
//
// Fusion methods compared:
//   - attention (vote): package ensemble's attention, fused logit = attention-weighted vote of member logits
//   - attention (vote + context): the same plus a learned correction from the attended context
//   - mean: the plain mean of the members' logits (credit members: transformer, MLP, rules)
//   - stacking: logistic regression on the members' out-of-fold logits (Wolpert 1992)
//
// Every method is trained on the cross-fitted out-of-fold member outputs of
// the training fold and evaluated on the test fold; cost uses the Bayes
// threshold after Platt scaling fitted on the same out-of-fold outputs.
//
//	go run ./examples/notebooks/ensemble-fusion [-quick] [-seed N] [-out DIR]
package main

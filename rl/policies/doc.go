// Package policies provides rl.Policy implementations: Softmax, a classic
// linear or one-hidden-layer softmax policy over an observation vector with an
// optional value head, exact analytic gradients and its own Adam optimizer,
// for bandits, contextual bandits and small control tasks; and LM, an adapter
// of package nn's transformer language models (nn.LM and nn.LMTrainer) whose
// actions are generated tokens; with LM.Tempered it scores each sample under
// the tempered distribution it was drawn from (rl.Sample.Temperature).
package policies

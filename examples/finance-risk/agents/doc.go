// Package agents holds the differentiable members of the finance-risk
// ensemble, built from package nn's layers and trained with nn.Trainer: a
// transformer encoder over the applicant's feature tokens (credit-risk
// agent, nn.TokenSetEncoder), an MLP over the same features, and an LSTM
// over past market returns (market-volatility agent, nn.LSTM). Each gives
// an output (a logit, or the volatility forecast) and an embedding per
// example, which the attention fusion of package ensemble reads.
package agents

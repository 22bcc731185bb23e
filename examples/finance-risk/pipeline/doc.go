// Package pipeline is the shared training pipeline of examples/finance-risk
// and the ensemble-fusion notebook: it loads the credit and market data,
// gives every applicant a simulated application date, trains the market
// LSTM once and the credit members per cross-validation fold (with
// cross-fitted out-of-fold outputs for the fusion), and trains the attention
// fusion of package ensemble over the members.
package pipeline

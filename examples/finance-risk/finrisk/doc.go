// Package finrisk holds the data side of examples/finance-risk: an ARFF
// reader, the Statlog German Credit data and its encodings (one-hot,
// standardised numerics, feature tokens), the S&P 500 series and its
// volatility regimes, stratified cross-validation, the credit metrics
// (accuracy, AUC, cost per applicant under the German cost matrix,
// misjudgment and fairness-flip rates), a logistic-regression baseline and
// the compliance rule engine (affordability limits and a counterfactual
// fairness rule over sex and age group).
//
// The data files are fetched by examples/finance-risk/fetch-data.sh (see
// Fetch) into data/finance-risk at the repository root.
package finrisk

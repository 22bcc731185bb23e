// Command finance-risk trains a heterogeneous ensemble of credit and market
// agents on real data (Statlog German Credit, S&P 500 2000-2020), fuses them
// with learned attention, trains a loan-approval policy over the fusion with
// a multi-objective dynamic reward, distils the ensemble into a small MLP
// and evaluates everything with stratified 5-fold cross-validation. It
// writes a Markdown report with plots to -out.
//
//	go run ./examples/finance-risk [-quick] [-seed N] [-out DIR] [-data DIR]
//
// The data is fetched (pinned, checksummed) by fetch-data.sh on first use.
package main

// Package corpus loads the real data of the translation example: English→
// Chinese message pairs from R's zh_CN gettext catalogues, a technical
// glossary from CC-CEDICT plus term pairs mined from those catalogues, and an
// acronym list from V.E.R.A. (Debian dict-vera). Fetch the data first with
// examples/translation/fetch-data.sh (`make data`); Ensure runs it.
//
// Splits are fixed by a stable hash of the English source (FNV-1a 64): 80%
// train, 10% validation, 10% test. The test split is never trained on.
package corpus

// Package corpus loads the translation example's data (fetch-data.sh, which
// Ensure runs): English→Chinese pairs from R's zh_CN gettext catalogues, a
// glossary mined from them with CC-CEDICT, and V.E.R.A.'s acronyms. A hash
// of the English fixes the splits: 80% train, 10% validation, 10% test.
package corpus

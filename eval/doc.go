// Package eval holds the evaluation statistics the examples share: the
// chrF score of machine translation (ChrF, ChrFN), bootstrap confidence
// intervals for a difference between two systems scored on the same items
// (PairedBootstrap) and for a difference pooled over repeated runs
// (TwoLevelBootstrap), the mean with its sample standard deviation
// (MeanSD), and the Levenshtein edit distance (EditDistance).
//
// Every resampling takes a seed, so a report that prints an interval is
// reproducible. Intervals are 95 % percentile intervals (Efron and
// Tibshirani, "An Introduction to the Bootstrap", 1993).
package eval

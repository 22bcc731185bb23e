// Package grader holds the deterministic graders of the translation example:
// chrF, TranslationQualityGrader (rewards the small model: final translation)
// and ProperNounDetectionGrader (rewards the larger model: terminology-error
// JSON). Each returns a score plus the list of issues it found.
package grader

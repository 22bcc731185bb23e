// Package grader holds the translation example's deterministic graders:
// TranslationQualityGrader (the small model's reward) and
// ProperNounDetectionGrader (the larger model's), with the issues they find.
package grader

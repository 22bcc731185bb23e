package grader_test

import (
	"fmt"

	"examples/translation/corpus"
	"examples/translation/grader"
)

func ExampleTranslationQualityGrader() {
	g := &grader.TranslationQualityGrader{
		Glossary: corpus.NewGlossary([]corpus.Term{{En: "degrees of freedom", Zh: "自由度"}}),
	}
	res := g.Grade("%d degrees of freedom", "%d个自由度", "<final_result>%s个自由程度</final_result>")
	for _, is := range res.Issues {
		fmt.Println(is.Rule+":", is.Detail)
	}
	// Output:
	// placeholder: placeholders [%s], want [%d]
	// terminology: term "degrees of freedom" should be 自由度
}

func ExampleProperNounDetectionGrader() {
	truth := []grader.TermError{{OriginalWord: "degrees of freedom", CorrectTranslation: "自由度"}}
	res := grader.ProperNounDetectionGrader{}.Grade(`[{"original_word":"degrees of freedom","wrong_translation":"自由程度","wrong_reason":"glossary","correct_translation":"自由度"}]`, truth)
	fmt.Println(res.Score, res.Normalised)
	res = grader.ProperNounDetectionGrader{}.Grade(`not json`, truth)
	fmt.Println(res.Score, res.Issues[0].Rule)
	// Output:
	// 2 1
	// 0 invalid_json
}

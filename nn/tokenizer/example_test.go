package tokenizer_test

import (
	"fmt"

	"github.com/troupe-ml/troupe/nn/tokenizer"
)

func ExampleTrain() {
	corpus := []string{
		"the principal component analysis",
		"the principal components",
		"主成分分析 主成分",
	}
	tok, err := tokenizer.Train(corpus, tokenizer.TrainOptions{VocabSize: 300})
	if err != nil {
		panic(err)
	}
	ids := tok.Encode("the principal component")
	fmt.Println(len(ids), "tokens:", tok.Decode(ids))
	for _, id := range ids {
		fmt.Printf("%q ", tok.TokenBytes(id))
	}
	fmt.Println()
	// Output:
	// 3 tokens: the principal component
	// "the" " principal" " component"
}

func ExampleTokenizer_ApplyChat() {
	tok, err := tokenizer.Train([]string{"Translate into Chinese."}, tokenizer.TrainOptions{VocabSize: 300})
	if err != nil {
		panic(err)
	}
	ids, err := tok.ApplyChat([]tokenizer.Message{
		{Role: tokenizer.RoleSystem, Content: "Translate into Chinese."},
		{Role: tokenizer.RoleUser, Content: "matrix"},
	}, true)
	if err != nil {
		panic(err)
	}
	fmt.Println(tok.Decode(ids))
	end, _ := tok.EndID()
	fmt.Println("stop generation at", tok.Decode([]int{end}))
	// Output:
	// <|bos|><|system|>Translate into Chinese.<|end|><|user|>matrix<|end|><|assistant|>
	// stop generation at <|end|>
}

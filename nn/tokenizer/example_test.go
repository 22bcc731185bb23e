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

// ExampleLoadHF loads a pretrained model's tokenizer (the directory holds
// tokenizer.json and tokenizer_config.json, as on the Hugging Face Hub) and
// encodes a chat turn whose special tokens are written in the text. It is
// not run: the files come from scripts/fetch-hf-refs.sh.
func ExampleLoadHF() {
	tok, err := tokenizer.LoadHF("data/hf/tokenizer-qwen3/models")
	if err != nil {
		fmt.Println(err)
		return
	}
	ids := tok.Encode("<|im_start|>user\nHello world<|im_end|>")
	fmt.Println(ids) // [151644 872 198 9707 1879 151645]
	fmt.Println(tok.Decode(ids, true))
	eos, _ := tok.TokenID(tok.Config().EOSToken)
	fmt.Println(eos, tok.IsSpecial(eos)) // 151645 true
}

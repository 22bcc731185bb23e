package tokenizer

import "fmt"

// Roles of chat messages.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// Message is one role-tagged chat message.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ApplyChat renders messages with the chat template
//
//	<|bos|> <|system|> content <|end|> <|user|> content <|end|> <|assistant|> content <|end|> …
//
// where each role marker and <|end|> is a single special token and the
// contents are encoded with Encode (so text inside a message can never forge
// a special token). With addGenerationPrompt the result ends with an open
// <|assistant|> marker, ready for the model to generate the reply; generation
// should stop at <|end|> (EndID). It returns an error for an unknown role or
// when the tokenizer lacks the template's special tokens.
func (t *Tokenizer) ApplyChat(msgs []Message, addGenerationPrompt bool) ([]int, error) {
	need := func(s string) (int, error) {
		id, ok := t.specialID[s]
		if !ok {
			return 0, fmt.Errorf("tokenizer: chat template needs special token %q", s)
		}
		return id, nil
	}
	bos, err := need(BOS)
	if err != nil {
		return nil, err
	}
	end, err := need(End)
	if err != nil {
		return nil, err
	}
	ids := []int{bos}
	for i, m := range msgs {
		var marker string
		switch m.Role {
		case RoleSystem:
			marker = System
		case RoleUser:
			marker = User
		case RoleAssistant:
			marker = Assistant
		default:
			return nil, fmt.Errorf("tokenizer: message %d has unknown role %q (want system, user or assistant)", i, m.Role)
		}
		id, err := need(marker)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
		ids = t.AppendEncode(ids, m.Content)
		ids = append(ids, end)
	}
	if addGenerationPrompt {
		id, err := need(Assistant)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// EndID is the id of <|end|>, which closes every chat turn (the stop token
// for generation); ok is false when the tokenizer has no such token.
func (t *Tokenizer) EndID() (id int, ok bool) { return t.SpecialID(End) }

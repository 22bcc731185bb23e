package record

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/troupe-ml/troupe/api"
)

// MaxConversationBytes bounds the text an episode's Conversation keeps:
// messages and completions beyond it are cut with TruncatedMark, and
// completions after it are counted, not kept.
const MaxConversationBytes = 64 << 10

// TruncatedMark ends a text cut by the budget.
const TruncatedMark = "…[truncated: the episode's sample text budget is spent]"

// Conversation collects an episode's completions, with the messages each
// was asked with, for the run directory's sample files
// (EpisodeRecord.Completions), within MaxConversationBytes.
type Conversation struct {
	records []api.CompletionRecord
	used    int // bytes of text kept
	skipped int // completions not kept once the budget was spent
}

// Add keeps one completion: the request's messages, the sampled text and
// its finish reason. Completions of one request share their messages.
func (c *Conversation) Add(msgs []api.Message, texts, finish []string) {
	if c.used >= MaxConversationBytes {
		c.skipped += len(texts)
		return
	}
	kept := make([]api.Message, len(msgs))
	for i, m := range msgs {
		kept[i] = api.Message{Role: m.Role, Content: c.budget(m.Content)}
	}
	for i, t := range texts {
		c.records = append(c.records, api.CompletionRecord{Messages: kept, Completion: c.budget(t), FinishReason: finish[i]})
	}
}

// budget is text cut to what remains of the budget, which it spends.
func (c *Conversation) budget(text string) string {
	left := max(MaxConversationBytes-c.used, 0)
	if len(text) > left {
		cut := left
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text = text[:cut] + TruncatedMark
	}
	c.used += min(len(text), left)
	return text
}

// Records are the completions kept, and one more saying how many were
// not kept, if any.
func (c *Conversation) Records() []api.CompletionRecord {
	if c.skipped == 0 {
		return c.records
	}
	return append(c.records[:len(c.records):len(c.records)], api.CompletionRecord{Messages: []api.Message{},
		Completion: fmt.Sprintf("[%d more completions not kept: the episode's %d-byte sample text budget was spent]", c.skipped, MaxConversationBytes)})
}

// Messages reads the messages of a chat-completions request body, their
// content a string, the text of its parts, or other JSON as its text. A
// body that is not a chat request has none.
func Messages(body []byte) []api.Message {
	var req struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if json.Unmarshal(body, &req) != nil {
		return []api.Message{}
	}
	msgs := make([]api.Message, len(req.Messages))
	for i, m := range req.Messages {
		msgs[i].Role = m.Role
		if json.Unmarshal(m.Content, &msgs[i].Content) == nil {
			continue
		}
		var parts []struct {
			Text string `json:"text"`
		}
		if json.Unmarshal(m.Content, &parts) == nil {
			for _, p := range parts {
				msgs[i].Content += p.Text
			}
		} else if len(m.Content) > 0 && string(m.Content) != "null" {
			msgs[i].Content = string(m.Content)
		}
	}
	return msgs
}

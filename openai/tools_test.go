package openai

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/troupe-ml/troupe/api"
)

func TestParseToolCalls(t *testing.T) {
	tools := []api.Tool{{Type: "function", Function: api.Function{Name: "f"}}, {Type: "function", Function: api.Function{Name: "g"}}}
	for _, tt := range []struct {
		text, content string
		calls         []api.FunctionCall
	}{
		{"plain answer", "plain answer", nil},
		{"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>", "", []api.FunctionCall{{Name: "f", Arguments: `{"a":1}`}}},
		{"Sure.\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, 2]}}\n</tool_call>\n<tool_call>{\"name\": \"g\"}</tool_call>\n",
			"Sure.", []api.FunctionCall{{Name: "f", Arguments: `{"a":[1,2]}`}, {Name: "g", Arguments: `{}`}}},
		// anything that does not fit stays text
		{"x <tool_call>{\"name\": \"f\", \"arguments\": {}}", "x <tool_call>{\"name\": \"f\", \"arguments\": {}}", nil},                   // unterminated
		{"<tool_call>{\"name\": \"h\"}</tool_call>", "<tool_call>{\"name\": \"h\"}</tool_call>", nil},                                     // undeclared
		{"<tool_call>{\"name\": \"f\", \"arguments\": 3}</tool_call>", "<tool_call>{\"name\": \"f\", \"arguments\": 3}</tool_call>", nil}, // not an object
		{"<tool_call>not json</tool_call>", "<tool_call>not json</tool_call>", nil},
		{"<tool_call>{\"name\": \"f\"}</tool_call> and more", "<tool_call>{\"name\": \"f\"}</tool_call> and more", nil}, // trailing text
		{"<tool_call>{\"name\": \"f\"} {}</tool_call>", "<tool_call>{\"name\": \"f\"} {}</tool_call>", nil},
	} {
		content, calls, ok := parseToolCalls(tt.text, tools)
		if ok != (tt.calls != nil) || content != tt.content {
			t.Errorf("%q: content %q ok %v, want %q ok %v", tt.text, content, ok, tt.content, tt.calls != nil)
		}
		var got []api.FunctionCall
		for _, c := range calls {
			if c.Type != "function" || !strings.HasPrefix(c.ID, "call_") {
				t.Errorf("%q: call %+v", tt.text, c)
			}
			got = append(got, c.Function)
		}
		if diff := cmp.Diff(tt.calls, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%q: calls (-want +got):\n%s", tt.text, diff)
		}
	}
}

// TestToolCallsOverHTTP: tools reach the model's tool template, calls come
// back as tool_calls with finish_reason "tool_calls", streamed the same
// way; tool messages are accepted; what cannot be honoured gets 400.

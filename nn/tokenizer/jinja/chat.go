package jinja

import "context"

// ChatInput is what transformers' apply_chat_template passes to a chat
// template.
type ChatInput struct {
	// Messages are the conversation: role, content, and optional
	// tool_calls, name, tool_call_id, reasoning_content. Nested values may
	// be *Map (from ParseJSON) to keep their key order, which matters where
	// a template prints them with tojson (a tool call's arguments).
	Messages []map[string]any
	// Tools are OpenAI-style {"type": "function", "function": {...}}
	// definitions; nil when there are none (the template then sees
	// tools = none). The keys of these plain maps are ordered as
	// transformers' get_json_schema writes them ("type" before "function";
	// "name", "description", "parameters"; "type", "properties",
	// "required"), the rest sorted; use *Map values, or pass ParseJSON's
	// result as Extra["tools"], to keep any other order.
	Tools               []map[string]any
	AddGenerationPrompt bool
	// BOSToken and EOSToken are the tokenizer's special tokens; an empty
	// one is left undefined, as transformers leaves a token the tokenizer
	// does not have.
	BOSToken, EOSToken string
	// Extra holds further template variables (enable_thinking,
	// date_string, tools_in_user_message, …). Its entries are set last and
	// so replace the ones above.
	Extra map[string]any
}

// toolKeyOrder is the key order of get_json_schema's tool definitions, by
// depth: the tool, its function, the function's parameters.
var toolKeyOrder = [][]string{{"type", "function"}, {"name", "description", "parameters"}, {"type", "properties", "required"}}

// context builds the template variables transformers passes: messages,
// tools, documents, add_generation_prompt and the special tokens, then
// Extra.
func (in ChatInput) context() (map[string]any, map[string][][]string) {
	ctx := map[string]any{
		"messages":              in.Messages,
		"tools":                 nil,
		"documents":             nil,
		"add_generation_prompt": in.AddGenerationPrompt,
	}
	if in.Messages == nil {
		ctx["messages"] = []any{}
	}
	if in.Tools != nil {
		ctx["tools"] = in.Tools
	}
	if in.BOSToken != "" {
		ctx["bos_token"] = in.BOSToken
	}
	if in.EOSToken != "" {
		ctx["eos_token"] = in.EOSToken
	}
	for k, v := range in.Extra {
		ctx[k] = v
	}
	return ctx, map[string][][]string{"tools": toolKeyOrder}
}

// RenderChat parses a chat template (tokenizer_config.json's
// chat_template) and renders a conversation with it.
func RenderChat(src string, in ChatInput) (string, error) {
	t, err := Parse(src)
	if err != nil {
		return "", err
	}
	return t.RenderChat(in)
}

// RenderChat renders a conversation with a parsed chat template, within
// the default Limits.
func (t *Template) RenderChat(in ChatInput) (string, error) {
	return t.RenderChatContext(context.Background(), in, Limits{})
}

// RenderChatContext renders a conversation within the given limits (zero
// fields take the defaults), stopping when ctx is done; its errors are
// RenderContext's. A server passes the request's context and answers a
// *BudgetError as a template or request too large to render.
func (t *Template) RenderChatContext(ctx context.Context, in ChatInput, lim Limits) (string, error) {
	vars, order := in.context()
	return t.render(ctx, vars, order, lim)
}

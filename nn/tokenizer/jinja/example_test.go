package jinja_test

import (
	"fmt"

	"github.com/troupe-ml/troupe/nn/tokenizer/jinja"
)

// A ChatML template in the style of Qwen's, rendered for a two-message
// conversation with the generation prompt.
func ExampleRenderChat() {
	const tpl = `{%- for message in messages %}
    {{- '<|im_start|>' + message.role + '\n' + message.content | trim + '<|im_end|>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}`
	out, err := jinja.RenderChat(tpl, jinja.ChatInput{
		Messages: []map[string]any{
			{"role": "system", "content": "You are helpful."},
			{"role": "user", "content": " 你好! "},
		},
		AddGenerationPrompt: true,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(out)
	// Output:
	// <|im_start|>system
	// You are helpful.<|im_end|>
	// <|im_start|>user
	// 你好!<|im_end|>
	// <|im_start|>assistant
}

// ParseJSON keeps the key order of JSON objects, which tojson reproduces.
func ExampleParseJSON() {
	args, err := jinja.ParseJSON([]byte(`{"location": "Paris", "unit": "celsius", "days": 3}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	t, err := jinja.Parse(`{{ name }}({{ args | tojson }})`)
	if err != nil {
		fmt.Println(err)
		return
	}
	out, err := t.Render(map[string]any{"name": "get_weather", "args": args})
	fmt.Println(out, err)
	// Output:
	// get_weather({"location": "Paris", "unit": "celsius", "days": 3}) <nil>
}

// raise_exception in a template becomes an *Exception error.
func ExampleTemplate_Render_raiseException() {
	t, _ := jinja.Parse(`{% if role not in ['user', 'assistant'] %}{{ raise_exception('unsupported role: ' + role) }}{% endif %}ok`)
	_, err := t.Render(map[string]any{"role": "robot"})
	fmt.Println(err)
	// Output:
	// jinja: template raised an exception: unsupported role: robot
}

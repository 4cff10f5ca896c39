package tokenizer_test

import (
	"fmt"
	"log"

	"github.com/mlxgo/mlxgo/tokenizer"
)

// A tiny byte-level BPE tokenizer.json, as HF tokenizers writes it.
const tinyTokenizerJSON = `{
  "added_tokens": [{"id": 7, "content": "<s>", "special": true, "normalized": false, "lstrip": false, "rstrip": false, "single_word": false}],
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
  "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "special_tokens": {"<s>": {"id": "<s>", "ids": [7], "tokens": ["<s>"]}}},
  "decoder": {"type": "ByteLevel"},
  "model": {"type": "BPE", "vocab": {"h": 0, "i": 1, "Ġ": 2, "hi": 3, "Ġhi": 4, "!": 5}, "merges": ["h i", "Ġ hi"]}
}`

func ExampleTokenizer_Encode() {
	tk, err := tokenizer.New([]byte(tinyTokenizerJSON))
	if err != nil {
		log.Fatal(err)
	}
	ids := tk.Encode("hi hi!", true)
	fmt.Println(ids)
	fmt.Printf("%q\n", tk.Decode(ids, true))
	// Output:
	// [7 3 4 5]
	// "hi hi!"
}

func ExampleDetokenizer() {
	tk, err := tokenizer.New([]byte(tinyTokenizerJSON))
	if err != nil {
		log.Fatal(err)
	}
	d := tk.NewDetokenizer(true)
	for _, id := range []int{7, 3, 4, 5} {
		fmt.Printf("%q ", d.Add(id))
	}
	fmt.Printf("%q\n", d.Flush())
	// Output: "" "hi" " hi" "!" ""
}

func ExampleChatTemplate_Render() {
	ct, err := tokenizer.CompileChatTemplate(
		"{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"+
			"{% if add_generation_prompt %}<|assistant|>{% endif %}",
		map[string]string{"bos_token": "<s>"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	out, err := ct.Render(tokenizer.ChatRequest{
		Messages:            []map[string]string{{"role": "user", "content": "Hello!"}},
		AddGenerationPrompt: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%q\n", out)
	// Output: "<s><|user|>Hello!\n<|assistant|>"
}

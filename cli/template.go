package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/mlxgo/mlxgo/tokenizer"
)

func init() {
	register(&command{
		name:    "template",
		summary: "render a model's chat template for a conversation",
		run:     runTemplate,
	})
}

// runTemplate prints the rendered prompt exactly, with nothing added.
func runTemplate(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("template", stderr)
	modelDir := fs.String("model", "", "model folder with tokenizer_config.json or chat_template.jinja (required)")
	messagesFile := fs.String("messages", "", "JSON file with the messages array, or - for stdin (required)")
	toolsFile := fs.String("tools", "", "JSON file with the tools array")
	noGen := fs.Bool("no-generation-prompt", false, "do not append the assistant generation prompt")
	kwargsJSON := fs.String("kwargs", "", `extra template variables as a JSON object, e.g. '{"enable_thinking": false}'`)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: mlxgo template --model DIR --messages FILE [--tools FILE] [--no-generation-prompt] [--kwargs JSON]")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if *modelDir == "" || *messagesFile == "" {
		return fmt.Errorf("%w: --model and --messages are required", errUsage)
	}
	req := tokenizer.ChatRequest{AddGenerationPrompt: !*noGen}
	if *kwargsJSON != "" {
		if err := json.Unmarshal([]byte(*kwargsJSON), &req.Kwargs); err != nil || req.Kwargs == nil {
			return fmt.Errorf("%w: --kwargs: want a JSON object: %v", errUsage, err)
		}
	}
	msgs, err := readJSONFile(*messagesFile, stdin)
	if err != nil {
		return fmt.Errorf("--messages: %w", err)
	}
	if t := firstByte(msgs); t != '[' {
		return fmt.Errorf("--messages %s: want a JSON array of messages", *messagesFile)
	}
	req.Messages = msgs
	if *toolsFile != "" {
		tools, err := readJSONFile(*toolsFile, stdin)
		if err != nil {
			return fmt.Errorf("--tools: %w", err)
		}
		if t := firstByte(tools); t != '[' {
			return fmt.Errorf("--tools %s: want a JSON array of tools", *toolsFile)
		}
		req.Tools = tools
	}
	tk, err := tokenizer.Load(*modelDir)
	if err != nil {
		return err
	}
	ct, err := tk.ChatTemplate("")
	if err != nil {
		return err
	}
	out, err := ct.Render(req)
	if err != nil {
		return err
	}
	_, err = io.WriteString(stdout, out)
	return err
}

// readJSONFile reads and validates a JSON file ("-" reads stdin).
func readJSONFile(name string, stdin io.Reader) (json.RawMessage, error) {
	var data []byte
	var err error
	if name == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(name)
	}
	if err != nil {
		return nil, err
	}
	if !json.Valid(data) {
		var v any
		err := json.Unmarshal(data, &v)
		return nil, fmt.Errorf("%s: invalid JSON: %v", name, err)
	}
	return json.RawMessage(data), nil
}

func firstByte(b []byte) byte {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return 0
	}
	return b[0]
}

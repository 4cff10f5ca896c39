package tokenizer

import (
	"encoding/json"
	"fmt"
)

// postProcessor adds special tokens around an encoded sequence (HF
// "post_processor"). It runs only when special tokens are requested.
type postProcessor interface {
	process(ids []int) []int
}

type templatePiece struct {
	special []int // the ids of a SpecialToken piece; nil for the sequence
	isSeq   bool
}

type templateProcessing []templatePiece

func (t templateProcessing) process(ids []int) []int {
	n := len(ids)
	for _, p := range t {
		n += len(p.special)
	}
	out := make([]int, 0, n)
	for _, p := range t {
		if p.isSeq {
			out = append(out, ids...)
		} else {
			out = append(out, p.special...)
		}
	}
	return out
}

type identityProcessor struct{}

func (identityProcessor) process(ids []int) []int { return ids }

type procSequence []postProcessor

func (q procSequence) process(ids []int) []int {
	for _, p := range q {
		ids = p.process(ids)
	}
	return ids
}

var postProcessorTypes = map[string]bool{
	"TemplateProcessing": true, "ByteLevel": true, "BertProcessing": true, "RobertaProcessing": true, "Sequence": true,
}

func parsePostProcessor(raw json.RawMessage, path string) (postProcessor, error) {
	var c struct {
		Type   string            `json:"type"`
		Single []json.RawMessage `json:"single"`
		// special_tokens: name → {id, ids, tokens}
		SpecialTokens map[string]struct {
			IDs []int `json:"ids"`
		} `json:"special_tokens"`
		Sep        []json.RawMessage `json:"sep"`
		Cls        []json.RawMessage `json:"cls"`
		Processors []json.RawMessage `json:"processors"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fieldErr(path, err)
	}
	switch c.Type {
	case "ByteLevel":
		return identityProcessor{}, nil
	case "TemplateProcessing":
		var t templateProcessing
		for i, r := range c.Single {
			p := fmt.Sprintf("%s.single[%d]", path, i)
			var it struct {
				SpecialToken *struct {
					ID string `json:"id"`
				} `json:"SpecialToken"`
				Sequence *struct {
					ID string `json:"id"`
				} `json:"Sequence"`
			}
			if err := json.Unmarshal(r, &it); err != nil {
				return nil, fieldErr(p, err)
			}
			switch {
			case it.Sequence != nil:
				t = append(t, templatePiece{isSeq: true})
			case it.SpecialToken != nil:
				st, ok := c.SpecialTokens[it.SpecialToken.ID]
				if !ok {
					return nil, fieldErr(p, fmt.Errorf("special token %q is not in special_tokens", it.SpecialToken.ID))
				}
				t = append(t, templatePiece{special: st.IDs})
			default:
				return nil, fieldErr(p, fmt.Errorf("want SpecialToken or Sequence"))
			}
		}
		return t, nil
	case "BertProcessing", "RobertaProcessing":
		get := func(name string, v []json.RawMessage) (int, error) {
			// Serialized as ["[CLS]", 101].
			if len(v) != 2 {
				return 0, fieldErr(path+"."+name, fmt.Errorf("want [token, id]"))
			}
			var id int
			if err := json.Unmarshal(v[1], &id); err != nil {
				return 0, fieldErr(path+"."+name, err)
			}
			return id, nil
		}
		cls, err := get("cls", c.Cls)
		if err != nil {
			return nil, err
		}
		sep, err := get("sep", c.Sep)
		if err != nil {
			return nil, err
		}
		return templateProcessing{{special: []int{cls}}, {isSeq: true}, {special: []int{sep}}}, nil
	case "Sequence":
		q, err := parseSequence(c.Processors, path+".processors", parsePostProcessor)
		if err != nil {
			return nil, err
		}
		return procSequence(q), nil
	}
	return nil, typeErr(path, "post_processor", c.Type, postProcessorTypes)
}

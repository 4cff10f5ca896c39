package grammar

import (
	"fmt"
)

func (c *schemaCompiler) array(m map[string]any, path string, depth int) (*expr, error) {
	minI, _, err := intArg(m, "minItems", path)
	if err != nil {
		return nil, err
	}
	maxI, hasMax, err := intArg(m, "maxItems", path)
	if err != nil {
		return nil, err
	}
	if hasMax && maxI > 10000 || minI > 10000 {
		return nil, serr(path+"/maxItems", "maxItems", "item counts above 10000 are not supported")
	}
	var prefix []*expr
	if pv, ok := m["prefixItems"]; ok {
		list, ok := pv.([]any)
		if !ok {
			return nil, serr(path+"/prefixItems", "prefixItems", "must be an array")
		}
		for i, s := range list {
			e, err := c.compile(s, fmt.Sprintf("%s/prefixItems/%d", path, i), depth+1)
			if err != nil {
				return nil, err
			}
			prefix = append(prefix, e)
		}
	}
	var item *expr
	itemsKey := "items"
	if il, ok := m["items"].([]any); ok { // draft-07 tuple form
		if len(prefix) > 0 {
			return nil, serr(path+"/items", "items", "array form together with prefixItems")
		}
		for i, s := range il {
			e, err := c.compile(s, fmt.Sprintf("%s/items/%d", path, i), depth+1)
			if err != nil {
				return nil, err
			}
			prefix = append(prefix, e)
		}
		itemsKey = "additionalItems"
	}
	if iv, ok := m[itemsKey]; ok {
		e, err := c.compile(iv, path+"/"+itemsKey, depth+1)
		if err != nil {
			return nil, err
		}
		if e.op != opNone {
			r := c.b.rule(path + "/" + itemsKey)
			c.b.set(r, e)
			item = eRef(r)
		}
	} else {
		item = c.anyValue(depth + 1)
	}
	k := len(prefix)
	// Graph states: number of elements so far, capped where nothing changes.
	limit := k
	if minI > limit {
		limit = minI
	}
	if hasMax && maxI < limit {
		limit = maxI
	}
	if hasMax && item != nil && maxI > limit {
		limit = maxI
	}
	if !hasMax && item != nil && limit < 1 {
		limit = 1 // the looping state must come after the first element
	}
	first, between, last := c.seps(depth)
	g := &expr{op: opGraph, gn: limit + 2, gstart: 0}
	end := limit + 1
	for i := 0; i <= limit; i++ {
		var el *expr
		if i < k {
			el = prefix[i]
		} else {
			el = item
		}
		sep := between
		if i == 0 {
			sep = first
		}
		if el != nil && (!hasMax || i < maxI) {
			to := i + 1
			if i == limit {
				to = i // unbounded tail loops
			}
			g.gedges = append(g.gedges, gedge{i, to, eSeq(sep, el)})
		}
		if i >= minI {
			if i == 0 {
				g.gedges = append(g.gedges, gedge{0, end, eSeq(c.wsEmpty(), eLit("]"))})
			} else {
				g.gedges = append(g.gedges, gedge{i, end, eSeq(last, eLit("]"))})
			}
		}
	}
	g.gfinal = []int{end}
	return eSeq(eLit("["), g), nil
}

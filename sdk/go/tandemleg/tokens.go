package tandemleg

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"sort"
	"strings"
)

// Encoded is one record rendered and tokenized per docs/spec.md §Supervision.
type Encoded struct {
	Index           int64
	ID              string
	IDs             []int32 // after truncation
	Supervised      []bool  // same length as IDs
	FullLength      int64
	Boundary        int64
	SupervisedCount int64
	Text            string
}

// L3 is the record as the l3 event carries it.
func (e *Encoded) L3() L3Record {
	r := L3Record{Index: e.Index, ID: e.ID, IDs: e.IDs, Boundary: e.Boundary, SupervisedCount: e.SupervisedCount,
		FullLength: e.FullLength, Text: e.Text}
	if e.FullLength > int64(len(e.IDs)) {
		k := int64(len(e.IDs))
		r.TruncatedAt = &k
	}
	return r
}

// TandemText renders and tokenizes with tandem's template and tokenizer through the tandem CLI.
type TandemText struct {
	Tandem, TokenizerDir, Template string
}

func (t *TandemText) jsonl(args []string, requests []interface{}, what string) ([]json.RawMessage, error) {
	var in bytes.Buffer
	for _, r := range requests {
		b, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		in.Write(b)
		in.WriteByte('\n')
	}
	cmd := exec.Command(t.Tandem, append(args, "--tokenizer", t.TokenizerDir)...)
	cmd.Stdin = &in
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
		return nil, fmt.Errorf("`tandem %s` failed (%s): %s", strings.Join(args, " "), what, lines[len(lines)-1])
	}
	var res []json.RawMessage
	sc := bufio.NewScanner(&out)
	sc.Buffer(make([]byte, 1<<20), 1<<28)
	for sc.Scan() {
		res = append(res, append(json.RawMessage(nil), sc.Bytes()...))
	}
	if len(res) != len(requests) {
		return nil, fmt.Errorf("`tandem %s` answered %d lines for %d %s", strings.Join(args, " "), len(res), len(requests), what)
	}
	return res, nil
}

type renderRequest struct {
	Messages            json.RawMessage `json:"messages"`
	AddGenerationPrompt bool            `json:"add_generation_prompt"`
	EnableThinking      *bool           `json:"enable_thinking"`
}

// Encode tokenizes texts: ids and byte offsets.
func (t *TandemText) Encode(texts []string) ([][]int32, [][][2]int, error) {
	req := make([]interface{}, len(texts))
	for i, s := range texts {
		req[i] = map[string]string{"text": s}
	}
	res, err := t.jsonl([]string{"tokens", "encode", "--offsets"}, req, "texts")
	if err != nil {
		return nil, nil, err
	}
	ids := make([][]int32, len(res))
	offs := make([][][2]int, len(res))
	for i, r := range res {
		var o struct {
			IDs     []int32  `json:"ids"`
			Offsets [][2]int `json:"offsets"`
		}
		if err := json.Unmarshal(r, &o); err != nil {
			return nil, nil, err
		}
		ids[i], offs[i] = o.IDs, o.Offsets
	}
	return ids, offs, nil
}

// TokenID is the id of a single-token text.
func (t *TandemText) TokenID(token string) (int32, error) {
	ids, _, err := t.Encode([]string{token})
	if err != nil {
		return 0, err
	}
	if len(ids[0]) != 1 {
		return 0, fmt.Errorf("%q is not one token of this tokenizer", token)
	}
	return ids[0][0], nil
}

// EncodeRecords renders (prompt and full conversation) and tokenizes records[i] for every i in
// indices; supervision from the byte offsets (docs/spec.md §Supervision), truncation to maxLen.
func EncodeRecords(t *TandemText, records []Record, indices []int, maxLen int) (map[int]*Encoded, error) {
	seen := map[int]bool{}
	var idx []int
	for _, i := range indices {
		if !seen[i] {
			seen[i] = true
			idx = append(idx, i)
		}
	}
	sort.Ints(idx)
	f := false
	var req []interface{}
	for _, i := range idx {
		if i < 0 || i >= len(records) {
			return nil, fmt.Errorf("record index %d outside records.jsonl (%d records)", i, len(records))
		}
		var msgs []map[string]interface{}
		if err := json.Unmarshal(records[i].Messages, &msgs); err != nil || len(msgs) == 0 || msgs[len(msgs)-1]["role"] != "assistant" {
			return nil, fmt.Errorf("record %s: last message is not an assistant turn", records[i].ID)
		}
		prompt, _ := json.Marshal(msgs[:len(msgs)-1])
		req = append(req, renderRequest{Messages: prompt, AddGenerationPrompt: true, EnableThinking: &f})
		req = append(req, renderRequest{Messages: records[i].Messages, AddGenerationPrompt: false})
	}
	res, err := t.jsonl([]string{"template", "render", "--template", t.Template}, req, "renderings")
	if err != nil {
		return nil, err
	}
	texts := make([]string, len(res))
	for i, r := range res {
		var o struct {
			Text string `json:"text"`
		}
		if err := json.Unmarshal(r, &o); err != nil {
			return nil, err
		}
		texts[i] = o.Text
	}
	fulls := make([]string, len(idx))
	for k := range idx {
		fulls[k] = texts[2*k+1]
	}
	ids, offs, err := t.Encode(fulls)
	if err != nil {
		return nil, err
	}
	imEnd, err := t.TokenID("<|im_end|>")
	if err != nil {
		return nil, err
	}
	out := map[int]*Encoded{}
	for k, i := range idx {
		prompt, full := texts[2*k], fulls[k]
		if !strings.HasPrefix(full, prompt) {
			return nil, fmt.Errorf("record %s: the rendered conversation does not start with its prompt", records[i].ID)
		}
		boundaryByte := len(prompt) // Go strings are UTF-8 bytes, as tandem's offsets
		sup := make([]bool, len(ids[k]))
		boundary := int64(-1)
		for p, o := range offs[k] {
			if o[0] >= boundaryByte {
				if boundary < 0 {
					boundary = int64(p)
				}
				sup[p] = true
				if ids[k][p] == imEnd {
					break
				}
			}
		}
		n := len(ids[k])
		keep := n
		if keep > maxLen {
			keep = maxLen
		}
		e := &Encoded{Index: records[i].Index, ID: records[i].ID, IDs: ids[k][:keep], Supervised: sup[:keep],
			FullLength: int64(n), Boundary: boundary, Text: full}
		for _, s := range e.Supervised {
			if s {
				e.SupervisedCount++
			}
		}
		out[i] = e
	}
	return out, nil
}

// Batch right-pads sequences to the longest one (pad never a label; token 0 never a label): flat
// ids and supervised (0/1) [batch*seq], lengths [batch], and the labels and real tokens it holds.
func Batch(seqs []*Encoded, pad int32) (batch, seq int, ids, supervised, lengths []int32, labels, tokens int64) {
	batch = len(seqs)
	for _, s := range seqs {
		if len(s.IDs) > seq {
			seq = len(s.IDs)
		}
	}
	ids = make([]int32, batch*seq)
	supervised = make([]int32, batch*seq)
	for b, s := range seqs {
		for t := 0; t < seq; t++ {
			ids[b*seq+t] = pad
		}
		copy(ids[b*seq:], s.IDs)
		for t := 1; t < len(s.Supervised); t++ {
			if s.Supervised[t] {
				supervised[b*seq+t] = 1
				labels++
			}
		}
		lengths = append(lengths, int32(len(s.IDs)))
		tokens += int64(len(s.IDs))
	}
	return
}

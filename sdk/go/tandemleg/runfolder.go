// Package tandemleg reads a tandem run folder (docs/run-folder.md), writes the leg protocol
// (docs/leg-protocol.md) with every event checked before it is written, keeps checkpoints in the
// runner's format and renders/tokenizes records with tandem's command line — the Go counterpart
// of the Python package tandem_leg (sdk/python). Standard library only.
package tandemleg

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Record is one line of corpus/records.jsonl. Messages are kept as raw JSON: they go to the
// template renderer unchanged.
type Record struct {
	Index    int64           `json:"index"`
	ID       string          `json:"id"`
	Source   string          `json:"source"`
	Split    string          `json:"split"`
	Messages json.RawMessage `json:"messages"`
}

// Spec is the part of the resolved experiment (experiment.json "spec") a training loop needs.
type Spec struct {
	Name string `json:"name"`
	Seed uint64 `json:"seed"`
	Lora struct {
		Rank      int64    `json:"rank"`
		Alpha     float64  `json:"alpha"`
		UseRSLoRA bool     `json:"use_rslora"`
		Dropout   float64  `json:"dropout"`
		Targets   []string `json:"targets"`
	} `json:"lora"`
	Optimizer struct {
		Name        string     `json:"name"`
		LR          float64    `json:"lr"`
		Betas       [2]float64 `json:"betas"`
		Eps         float64    `json:"eps"`
		WeightDecay float64    `json:"weight_decay"`
	} `json:"optimizer"`
	Schedule struct {
		WarmupFraction float64 `json:"warmup_fraction"`
	} `json:"schedule"`
	Clip  float64 `json:"clip"`
	Batch struct {
		MicroBatch int `json:"micro_batch"`
	} `json:"batch"`
	Sequence struct {
		MaxLen int `json:"max_len"`
	} `json:"sequence"`
	Eval struct {
		Interval int64 `json:"interval"`
	} `json:"eval"`
	Checkpoint struct {
		Interval int64 `json:"interval"`
	} `json:"checkpoint"`
	DropoutMasks string                       `json:"dropout_masks"`
	Plan         string                       `json:"plan"`
	Template     string                       `json:"template"`
	L3Records    int                          `json:"l3_records"`
	Overrides    map[string]map[string]string `json:"overrides"`
}

// RunFolder is a prepared run folder.
type RunFolder struct {
	Path       string
	Spec       Spec
	SpecSHA256 string
	records    []Record
}

func readJSON(path string, v interface{}) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%s: %v (is this a run folder prepared by `tandem run`?)", path, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: not valid JSON for tandem (%v)", path, err)
	}
	return nil
}

// OpenRunFolder reads experiment.json.
func OpenRunFolder(path string) (*RunFolder, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Spec       Spec   `json:"spec"`
		SpecSHA256 string `json:"spec_sha256"`
	}
	if err := readJSON(filepath.Join(abs, "experiment.json"), &doc); err != nil {
		return nil, err
	}
	if doc.SpecSHA256 == "" {
		return nil, fmt.Errorf("%s: no spec_sha256", filepath.Join(abs, "experiment.json"))
	}
	return &RunFolder{Path: abs, Spec: doc.Spec, SpecSHA256: doc.SpecSHA256}, nil
}

// File joins parts under the run folder.
func (r *RunFolder) File(parts ...string) string {
	return filepath.Join(append([]string{r.Path}, parts...)...)
}

// BaseDir, InitDir and TokenizerDir are the shared inputs every leg reads.
func (r *RunFolder) BaseDir() string      { return r.File("base") }
func (r *RunFolder) InitDir() string      { return r.File("init") }
func (r *RunFolder) TokenizerDir() string { return r.File("tokenizer") }

// LegDir is legs/<leg>/ (created).
func (r *RunFolder) LegDir(leg string) (string, error) {
	d := r.File("legs", leg)
	return d, os.MkdirAll(d, 0o755)
}

// LegSetting is a spec field (dropout_masks, plan, template) with the leg's override applied.
func (r *RunFolder) LegSetting(leg, key string) string {
	if o, ok := r.Spec.Overrides[leg]; ok {
		if v, ok := o[key]; ok {
			return v
		}
	}
	switch key {
	case "dropout_masks":
		return r.Spec.DropoutMasks
	case "plan":
		return r.Spec.Plan
	case "template":
		return r.Spec.Template
	}
	return ""
}

// Records reads corpus/records.jsonl (once).
func (r *RunFolder) Records() ([]Record, error) {
	if r.records != nil {
		return r.records, nil
	}
	path := r.File("corpus", "records.jsonl")
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<28)
	var out []Record
	for n := 1; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var rec Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return nil, fmt.Errorf("%s: line %d: %v", path, n, err)
		}
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	r.records = out
	return out, nil
}

// EvalPrefix is corpus/eval_prefix.json's indices.
func (r *RunFolder) EvalPrefix() ([]int, error) {
	var doc struct {
		Indices []int `json:"indices"`
	}
	err := readJSON(r.File("corpus", "eval_prefix.json"), &doc)
	return doc.Indices, err
}

// PlanUpdates is plan.json's updates[u][m] = record indices.
func (r *RunFolder) PlanUpdates() ([][][]int, error) {
	var doc struct {
		Updates [][][]int `json:"updates"`
	}
	err := readJSON(r.File("plan.json"), &doc)
	return doc.Updates, err
}

// L3Count is K, the number of leading records the l3 event reports.
func (r *RunFolder) L3Count() (int, error) {
	recs, err := r.Records()
	if err != nil {
		return 0, err
	}
	k := r.Spec.L3Records
	if k > len(recs) {
		k = len(recs)
	}
	return k, nil
}

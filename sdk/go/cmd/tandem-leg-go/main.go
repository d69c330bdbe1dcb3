// tandem-leg-go is the sdk-go leg: the experiment's training loop written in Go over tandem's
// engine C ABI (cgo).
//
//	tandem-leg-go --run RUN_DIR --leg NAME --device cpu [--threads N] [--resume]
//
// The engine computes one micro-batch's forward and backward pass (tandem_model_*); everything else
// is here: the adapter built from init/adapter_model.safetensors by this program's own reader, laid
// out in the engine's flat order by name; gradient accumulation with docs/spec.md §Recipe's per-update token
// normalisation; the global norm and torch's clipping; AdamW (torch semantics, float32 state) and
// transformers' cosine-with-warmup schedule; checkpoints of its own (adapter, moments, cursor)
// committed by manifest. Text: tandem's template and tokenizer via the tandem command line, docs/spec.md §Supervision's
// supervision, truncation and padding in package tandemleg. Events are checked before they are written.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"tandem/sdk/engine"
	"tandem/sdk/tandemleg"
)

const implementation = "sdk-go"

func logf(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "sdk-go leg: "+format+"\n", a...)
}

// tandemCLI finds the tandem binary: $TANDEM_BIN, the tandem next to this program's build folder
// (<build>/sdk/go/ -> <build>/app/tandem), or PATH.
func tandemCLI() (string, error) {
	if p := os.Getenv("TANDEM_BIN"); p != "" {
		return p, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "..", "..", "app", "tandem")
		if _, err := os.Stat(p); err == nil {
			return filepath.Clean(p), nil
		}
	}
	p, err := exec.LookPath("tandem")
	if err != nil {
		return "", errors.New("the tandem command line was not found: set TANDEM_BIN or put tandem on PATH")
	}
	return p, nil
}

type adamW struct {
	b1, b2, eps, wd float64
	m, v            []float32
	step            int64
}

// update is torch.optim.AdamW (single-tensor) in float32 with the scalars cast to float32, as torch
// applies Python-float scalars to float32 tensors.
func (o *adamW) update(p, g []float32, lr float64) {
	o.step++
	decay := float32(1 - lr*o.wd)
	w1 := float32(1 - o.b1)
	b2 := float32(o.b2)
	w2 := float32(1 - o.b2)
	stepSize := float32(-(lr / (1 - math.Pow(o.b1, float64(o.step)))))
	bc2Sqrt := float32(math.Sqrt(1 - math.Pow(o.b2, float64(o.step))))
	eps := float32(o.eps)
	for i := range p {
		if o.wd != 0 {
			p[i] *= decay
		}
		o.m[i] = o.m[i] + w1*(g[i]-o.m[i])
		o.v[i] = o.v[i]*b2 + (w2*g[i])*g[i]
		denom := float32(math.Sqrt(float64(o.v[i])))/bc2Sqrt + eps
		p[i] = p[i] + stepSize*(o.m[i]/denom)
	}
}

func run(w *tandemleg.Writer, runDir, leg, device string, threads int, resume bool) error {
	tStart := time.Now()
	rf, err := tandemleg.OpenRunFolder(runDir)
	if err != nil {
		return err
	}
	spec := &rf.Spec
	host, _ := os.Hostname()
	_ = host
	if err := w.Hello(tandemleg.Hello{Implementation: implementation, Leg: leg, Language: "go",
		Stack:    "tandem engine via its C ABI (cgo); loop, adapter, AdamW, schedule, clipping and checkpoints in Go",
		Versions: map[string]string{"go": runtime.Version(), "tandem_engine": engine.Version()},
		Device:   device, DeviceName: runtime.GOARCH, Threads: threads, PID: os.Getpid(), SpecSHA256: rf.SpecSHA256,
		Resume: resume}); err != nil {
		return err
	}
	if device != "cpu" {
		return fmt.Errorf("--device %s: the sdk-go leg runs on the CPU (the C ABI's model has no device choice)", device)
	}
	if p := rf.LegSetting(leg, "plan"); p != "shared" {
		return fmt.Errorf("experiment field plan: the sdk-go leg follows plan.json (plan 'shared'), not %q", p)
	}
	legDir, err := rf.LegDir(leg)
	if err != nil {
		return err
	}
	var resumePath string
	var resumeManifest *tandemleg.Manifest
	if resume {
		resumePath, resumeManifest = tandemleg.NewestValidCheckpoint(legDir, rf.SpecSHA256, func(s string) { logf("%s", s) })
		if resumePath == "" {
			logf("no valid checkpoint: starting from the beginning (resume requested)")
		}
	}

	// Model: the engine loads the base; the adapter is built here.
	t0 := time.Now()
	mode := engine.DropoutNative
	if rf.LegSetting(leg, "dropout_masks") == "shared" {
		mode = engine.DropoutShared
	}
	model, err := engine.NewModel(rf.BaseDir(), engine.Options{Rank: spec.Lora.Rank, Alpha: spec.Lora.Alpha,
		UseRSLoRA: spec.Lora.UseRSLoRA, Dropout: spec.Lora.Dropout, Targets: spec.Lora.Targets, DropoutMode: mode,
		Threads: threads, Seed: spec.Seed})
	if err != nil {
		return err
	}
	defer model.Close()
	initFile := filepath.Join(rf.InitDir(), "adapter_model.safetensors")
	init, err := tandemleg.ReadSafetensors(initFile)
	if err != nil {
		return err
	}
	params := make([]float32, model.NumParams)
	for _, t := range model.Adapter {
		src, ok := init[t.Name]
		if !ok {
			return fmt.Errorf("%s: tensor %s missing", initFile, t.Name)
		}
		if len(src.Shape) != 2 || src.Shape[0] != t.Shape[0] || src.Shape[1] != t.Shape[1] {
			return fmt.Errorf("%s: tensor %s has shape %v, expected %v", initFile, t.Name, src.Shape, t.Shape)
		}
		copy(params[t.Offset:t.Offset+t.Count()], src.Data)
		delete(init, t.Name)
	}
	for name := range init {
		return fmt.Errorf("%s: unexpected tensor %s (other targets or rank?)", initFile, name)
	}
	modelLoadS := time.Since(t0).Seconds()

	// Data.
	t0 = time.Now()
	cli, err := tandemCLI()
	if err != nil {
		return err
	}
	text := &tandemleg.TandemText{Tandem: cli, TokenizerDir: rf.TokenizerDir(), Template: rf.LegSetting(leg, "template")}
	records, err := rf.Records()
	if err != nil {
		return err
	}
	updates, err := rf.PlanUpdates()
	if err != nil {
		return err
	}
	evalIdx, err := rf.EvalPrefix()
	if err != nil {
		return err
	}
	l3Count, err := rf.L3Count()
	if err != nil {
		return err
	}
	needed := append([]int{}, evalIdx...)
	for i := 0; i < l3Count; i++ {
		needed = append(needed, i)
	}
	for _, u := range updates {
		for _, mb := range u {
			needed = append(needed, mb...)
		}
	}
	encoded, err := tandemleg.EncodeRecords(text, records, needed, spec.Sequence.MaxLen)
	if err != nil {
		return err
	}
	pad, err := text.TokenID("<|endoftext|>")
	if err != nil {
		return err
	}
	tokenizeS := time.Since(t0).Seconds()

	micro := spec.Batch.MicroBatch
	var evalBatches []*engine.MicroBatch
	for k := 0; k < len(evalIdx); k += micro {
		var seqs []*tandemleg.Encoded
		for j := k; j < k+micro && j < len(evalIdx); j++ {
			seqs = append(seqs, encoded[evalIdx[j]])
		}
		b, s, ids, sup, lens, _, _ := tandemleg.Batch(seqs, pad)
		evalBatches = append(evalBatches, engine.NewMicroBatch(b, s, ids, sup, lens))
	}
	defer func() {
		for _, b := range evalBatches {
			b.Free()
		}
	}()
	evaluate := func() (float64, int64, error) {
		if err := model.SetParams(params); err != nil {
			return 0, 0, err
		}
		var total float64
		var tokens int64
		for _, b := range evalBatches {
			s, n, err := model.Loss(b)
			if err != nil {
				return 0, 0, err
			}
			total += s
			tokens += n
		}
		if tokens == 0 {
			return math.NaN(), 0, nil
		}
		return total / float64(tokens), tokens, nil
	}

	total := int64(len(updates))
	warmup := tandemleg.WarmupUpdates(spec.Schedule.WarmupFraction, total)
	opt := &adamW{b1: spec.Optimizer.Betas[0], b2: spec.Optimizer.Betas[1], eps: spec.Optimizer.Eps,
		wd: spec.Optimizer.WeightDecay, m: make([]float32, model.NumParams), v: make([]float32, model.NumParams)}

	start := int64(0)
	if resumePath != "" {
		ad, err := tandemleg.ReadSafetensors(filepath.Join(resumePath, "adapter_model.safetensors"))
		if err != nil {
			return err
		}
		mv, err := tandemleg.ReadSafetensors(filepath.Join(resumePath, "optimizer.safetensors"))
		if err != nil {
			return err
		}
		var state struct {
			Step           int64  `json:"step"`
			DropoutCounter string `json:"dropout_counter"`
		}
		b, err := os.ReadFile(filepath.Join(resumePath, "state.json"))
		if err != nil {
			return err
		}
		if err := json.Unmarshal(b, &state); err != nil {
			return fmt.Errorf("%s/state.json: %v", resumePath, err)
		}
		for _, t := range model.Adapter {
			a, m, v := ad[t.Name], mv["exp_avg."+t.Name], mv["exp_avg_sq."+t.Name]
			if int64(len(a.Data)) != t.Count() || int64(len(m.Data)) != t.Count() || int64(len(v.Data)) != t.Count() {
				return fmt.Errorf("%s: tensor %s missing or misshapen", resumePath, t.Name)
			}
			copy(params[t.Offset:], a.Data)
			copy(opt.m[t.Offset:], m.Data)
			copy(opt.v[t.Offset:], v.Data)
		}
		counter, err := strconv.ParseUint(state.DropoutCounter, 10, 64)
		if err != nil {
			return fmt.Errorf("%s/state.json: dropout_counter: %v", resumePath, err)
		}
		model.SetDropoutCounter(counter)
		opt.step = state.Step
		start = resumeManifest.Update
		if start != opt.step {
			return fmt.Errorf("%s/state.json: step %d but the manifest says update %d", resumePath, opt.step, start)
		}
		rel, _ := filepath.Rel(rf.Path, resumePath)
		if err := w.Resume(start, rel); err != nil {
			return err
		}
	} else {
		digests := []tandemleg.Digest{}
		base, err := model.BaseDigests()
		if err != nil {
			return err
		}
		for _, d := range base {
			digests = append(digests, tandemleg.Digest(d))
		}
		adapter := append([]engine.AdapterTensor{}, model.Adapter...)
		sortByName(adapter)
		for _, t := range adapter {
			digests = append(digests, tandemleg.DigestOf(t.Name, "adapter", []int64{t.Shape[0], t.Shape[1]},
				params[t.Offset:t.Offset+t.Count()]))
		}
		if err := w.L2(digests); err != nil {
			return err
		}
		l3 := make([]tandemleg.L3Record, 0, l3Count)
		for i := 0; i < l3Count; i++ {
			l3 = append(l3, encoded[i].L3())
		}
		if err := w.L3(rf.LegSetting(leg, "template"), spec.Sequence.MaxLen, l3); err != nil {
			return err
		}
		ce, n, err := evaluate()
		if err != nil {
			return err
		}
		if err := w.L1(ce, n, len(evalIdx)); err != nil {
			return err
		}
		if err := w.Eval(0, ce, n); err != nil {
			return err
		}
	}
	if err := w.TimingSetup(modelLoadS, tokenizeS, time.Since(tStart).Seconds()); err != nil {
		return err
	}

	grads := make([]float32, model.NumParams)
	acc := make([]float64, model.NumParams)
	step := make([]float32, model.NumParams)
	trainS := 0.0
	for u := start; u < total; u++ {
		t0 := time.Now()
		var batches []*engine.MicroBatch
		var labels, inputTokens int64
		for _, mb := range updates[u] {
			seqs := make([]*tandemleg.Encoded, len(mb))
			for k, i := range mb {
				seqs[k] = encoded[i]
			}
			b, s, ids, sup, lens, nl, nt := tandemleg.Batch(seqs, pad)
			batches = append(batches, engine.NewMicroBatch(b, s, ids, sup, lens))
			labels += nl
			inputTokens += nt
		}
		if labels == 0 {
			return fmt.Errorf("plan.json: update %d has no supervised token", u)
		}
		if err := model.SetParams(params); err != nil {
			return err
		}
		for i := range acc {
			acc[i] = 0
		}
		lossTotal := 0.0
		for m, b := range batches {
			// grad scale 1/N: each micro-batch backpropagates (sum of its token losses) / (labels of the update).
			s, _, err := model.ForwardBackward(b, u, int64(m), 1/float64(labels), grads)
			if err != nil {
				return err
			}
			lossTotal += s
			for i, g := range grads {
				acc[i] += float64(g)
			}
			b.Free()
		}
		sumsq := 0.0
		for _, g := range acc {
			sumsq += g * g
		}
		gradNorm := math.Sqrt(sumsq)
		// torch.nn.utils.clip_grad_norm_: coef = min(1, max / (norm + 1e-6)) in float32.
		coef := float32(spec.Clip) / (float32(gradNorm) + 1e-6)
		if coef > 1 {
			coef = 1
		}
		for i, g := range acc {
			step[i] = float32(g) * coef
		}
		lr := tandemleg.CosineWithWarmupLR(spec.Optimizer.LR, u, warmup, total)
		opt.update(params, step, lr)
		wall := time.Since(t0).Seconds()
		trainS += wall
		if err := w.Step(tandemleg.Step{Update: u, Loss: tandemleg.Num(lossTotal / float64(labels)),
			GradNorm: tandemleg.Num(gradNorm), LR: lr, Tokens: labels, InputTokens: inputTokens, WallS: wall}); err != nil {
			return err
		}
		done := u + 1
		if done%spec.Eval.Interval == 0 || done == total {
			ce, n, err := evaluate()
			if err != nil {
				return err
			}
			if err := w.Eval(done, ce, n); err != nil {
				return err
			}
		}
		if spec.Checkpoint.Interval > 0 && done%spec.Checkpoint.Interval == 0 && done < total {
			path, err := tandemleg.WriteCheckpoint(legDir, done, rf.SpecSHA256, func(tmp string) error {
				ad := map[string]tandemleg.Tensor{}
				mv := map[string]tandemleg.Tensor{}
				for _, t := range model.Adapter {
					shape := []int64{t.Shape[0], t.Shape[1]}
					ad[t.Name] = tandemleg.Tensor{Shape: shape, Data: params[t.Offset : t.Offset+t.Count()]}
					mv["exp_avg."+t.Name] = tandemleg.Tensor{Shape: shape, Data: opt.m[t.Offset : t.Offset+t.Count()]}
					mv["exp_avg_sq."+t.Name] = tandemleg.Tensor{Shape: shape, Data: opt.v[t.Offset : t.Offset+t.Count()]}
				}
				if err := tandemleg.WriteSafetensors(filepath.Join(tmp, "adapter_model.safetensors"), ad, nil); err != nil {
					return err
				}
				if err := tandemleg.WriteSafetensors(filepath.Join(tmp, "optimizer.safetensors"), mv, nil); err != nil {
					return err
				}
				st, _ := json.Marshal(map[string]interface{}{"step": opt.step, "next_update": done,
					"dropout_counter": strconv.FormatUint(model.DropoutCounter(), 10), "spec_sha256": rf.SpecSHA256,
					"writer": implementation})
				return os.WriteFile(filepath.Join(tmp, "state.json"), st, 0o644)
			})
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(rf.Path, path)
			if err := w.Checkpoint(done, rel); err != nil {
				return err
			}
		}
	}

	final := filepath.Join(legDir, "final")
	if err := os.MkdirAll(final, 0o755); err != nil {
		return err
	}
	ad := map[string]tandemleg.Tensor{}
	for _, t := range model.Adapter {
		ad[t.Name] = tandemleg.Tensor{Shape: []int64{t.Shape[0], t.Shape[1]}, Data: params[t.Offset : t.Offset+t.Count()]}
	}
	if err := tandemleg.WriteSafetensors(filepath.Join(final, "adapter_model.safetensors"), ad, map[string]string{"format": "pt"}); err != nil {
		return err
	}
	cfg, err := os.ReadFile(filepath.Join(rf.InitDir(), "adapter_config.json"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(final, "adapter_config.json"), cfg, 0o644); err != nil {
		return err
	}
	if err := w.TimingTrain(trainS, time.Since(tStart).Seconds()); err != nil {
		return err
	}
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	if err := w.Memory(ru.Maxrss*1024, nil); err != nil { // Linux reports KiB
		return err
	}
	rel, _ := filepath.Rel(rf.Path, final)
	return w.Done(total, rel)
}

func sortByName(t []engine.AdapterTensor) {
	for i := 1; i < len(t); i++ {
		for j := i; j > 0 && t[j].Name < t[j-1].Name; j-- {
			t[j], t[j-1] = t[j-1], t[j]
		}
	}
}

func main() {
	// The C ABI's error text is per OS thread: keep this goroutine on one thread for the whole leg.
	runtime.LockOSThread()
	runDir := flag.String("run", "", "the run folder prepared by `tandem run` (required)")
	leg := flag.String("leg", "", "this leg's name (required)")
	device := flag.String("device", "cpu", "cpu")
	threads := flag.Int("threads", 0, "CPU threads (0: all)")
	resume := flag.Bool("resume", false, "continue from the newest valid checkpoint")
	flag.Parse()
	if *runDir == "" || *leg == "" {
		fmt.Fprintln(os.Stderr, "usage: tandem-leg-go --run RUN_DIR --leg NAME [--device cpu] [--threads N] [--resume]")
		os.Exit(2)
	}
	w := tandemleg.NewWriter(os.Stdout)
	if err := run(w, *runDir, *leg, *device, *threads, *resume); err != nil {
		logf("%v", err)
		_ = w.Error(err.Error())
		os.Exit(1)
	}
}

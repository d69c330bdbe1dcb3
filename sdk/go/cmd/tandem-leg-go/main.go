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

// legRun is one run of this leg: what its named steps (below, in the order run calls them) share.
type legRun struct {
	w                     *tandemleg.Writer
	rf                    *tandemleg.RunFolder
	spec                  *tandemleg.Spec
	leg                   string
	legDir                string
	tStart                time.Time
	model                 *engine.Model
	params                []float32 // the adapter, in the engine's flat order
	opt                   *adamW
	text                  *tandemleg.TandemText
	encoded               map[int]*tandemleg.Encoded
	updates               [][][]int
	evalIdx               []int
	l3Count               int
	pad                   int32
	evalBatches           []*engine.MicroBatch
	modelLoadS, tokenizeS float64
	trainS                float64
}

func run(w *tandemleg.Writer, runDir, leg, device string, threads int, resume bool) error {
	r := &legRun{w: w, leg: leg, tStart: time.Now()}
	if err := r.open(runDir, device, threads, resume); err != nil {
		return err
	}
	resumePath, resumeManifest := r.resumePoint(resume)
	if err := r.loadModel(threads); err != nil {
		return err
	}
	defer r.model.Close()
	if err := r.loadAdapter(); err != nil {
		return err
	}
	if err := r.prepareData(); err != nil {
		return err
	}
	r.buildEvalBatches()
	defer r.freeEvalBatches()
	r.newOptimizer()
	start := int64(0)
	if resumePath != "" {
		var err error
		if start, err = r.restore(resumePath, resumeManifest); err != nil {
			return err
		}
	} else if err := r.writeUpdateZero(); err != nil {
		return err
	}
	if err := w.TimingSetup(r.modelLoadS, r.tokenizeS, time.Since(r.tStart).Seconds()); err != nil {
		return err
	}
	if err := r.train(start); err != nil {
		return err
	}
	return r.finish()
}

// open: the run folder, the hello event, and what this leg cannot do.
func (r *legRun) open(runDir, device string, threads int, resume bool) error {
	rf, err := tandemleg.OpenRunFolder(runDir)
	if err != nil {
		return err
	}
	r.rf, r.spec = rf, &rf.Spec
	if err := r.w.Hello(tandemleg.Hello{Implementation: implementation, Leg: r.leg, Language: "go",
		Stack:    "tandem engine via its C ABI (cgo); loop, adapter, AdamW, schedule, clipping and checkpoints in Go",
		Versions: map[string]string{"go": runtime.Version(), "tandem_engine": engine.Version()},
		Device:   device, DeviceName: runtime.GOARCH, Threads: threads, PID: os.Getpid(), SpecSHA256: rf.SpecSHA256,
		Resume: resume}); err != nil {
		return err
	}
	if device != "cpu" {
		return fmt.Errorf("--device %s: the sdk-go leg runs on the CPU (the C ABI's model has no device choice)", device)
	}
	if p := rf.LegSetting(r.leg, "plan"); p != "shared" {
		return fmt.Errorf("experiment field plan: the sdk-go leg follows plan.json (plan 'shared'), not %q", p)
	}
	r.legDir, err = rf.LegDir(r.leg)
	return err
}

// resumePoint: the newest valid checkpoint when resuming ("" when none, or not resuming).
func (r *legRun) resumePoint(resume bool) (string, *tandemleg.Manifest) {
	if !resume {
		return "", nil
	}
	path, manifest := tandemleg.NewestValidCheckpoint(r.legDir, r.rf.SpecSHA256, func(s string) { logf("%s", s) })
	if path == "" {
		logf("no valid checkpoint: starting from the beginning (resume requested)")
	}
	return path, manifest
}

// loadModel: the engine loads the base; the adapter is built here (loadAdapter).
func (r *legRun) loadModel(threads int) error {
	t0 := time.Now()
	mode := engine.DropoutNative
	if r.rf.LegSetting(r.leg, "dropout_masks") == "shared" {
		mode = engine.DropoutShared
	}
	l := r.spec.Lora
	model, err := engine.NewModel(r.rf.BaseDir(), engine.Options{Rank: l.Rank, Alpha: l.Alpha,
		UseRSLoRA: l.UseRSLoRA, Dropout: l.Dropout, Targets: l.Targets, DropoutMode: mode,
		Threads: threads, Seed: r.spec.Seed})
	if err != nil {
		return err
	}
	r.model = model
	r.modelLoadS = time.Since(t0).Seconds()
	return nil
}

// loadAdapter: init/adapter_model.safetensors laid out in the engine's flat order by name; every
// tensor present, shaped as the engine expects, and none left over.
func (r *legRun) loadAdapter() error {
	t0 := time.Now()
	initFile := filepath.Join(r.rf.InitDir(), "adapter_model.safetensors")
	init, err := tandemleg.ReadSafetensors(initFile)
	if err != nil {
		return err
	}
	r.params = make([]float32, r.model.NumParams)
	for _, t := range r.model.Adapter {
		src, ok := init[t.Name]
		if !ok {
			return fmt.Errorf("%s: tensor %s missing", initFile, t.Name)
		}
		if len(src.Shape) != 2 || src.Shape[0] != t.Shape[0] || src.Shape[1] != t.Shape[1] {
			return fmt.Errorf("%s: tensor %s has shape %v, expected %v", initFile, t.Name, src.Shape, t.Shape)
		}
		copy(r.params[t.Offset:t.Offset+t.Count()], src.Data)
		delete(init, t.Name)
	}
	for name := range init {
		return fmt.Errorf("%s: unexpected tensor %s (other targets or rank?)", initFile, name)
	}
	r.modelLoadS += time.Since(t0).Seconds()
	return nil
}

// prepareData: the corpus, the plan, the evaluation prefix and the L3 records, encoded once by tandem's
// template and tokenizer (the records any of them needs).
func (r *legRun) prepareData() error {
	t0 := time.Now()
	cli, err := tandemCLI()
	if err != nil {
		return err
	}
	r.text = &tandemleg.TandemText{Tandem: cli, TokenizerDir: r.rf.TokenizerDir(), Template: r.rf.LegSetting(r.leg, "template")}
	records, err := r.rf.Records()
	if err != nil {
		return err
	}
	if r.updates, err = r.rf.PlanUpdates(); err != nil {
		return err
	}
	if r.evalIdx, err = r.rf.EvalPrefix(); err != nil {
		return err
	}
	if r.l3Count, err = r.rf.L3Count(); err != nil {
		return err
	}
	needed := append([]int{}, r.evalIdx...)
	for i := 0; i < r.l3Count; i++ {
		needed = append(needed, i)
	}
	for _, u := range r.updates {
		for _, mb := range u {
			needed = append(needed, mb...)
		}
	}
	if r.encoded, err = tandemleg.EncodeRecords(r.text, records, needed, r.spec.Sequence.MaxLen); err != nil {
		return err
	}
	if r.pad, err = r.text.TokenID("<|endoftext|>"); err != nil {
		return err
	}
	r.tokenizeS = time.Since(t0).Seconds()
	return nil
}

// buildEvalBatches: the evaluation prefix in micro-batches, built once and reused at every evaluation.
func (r *legRun) buildEvalBatches() {
	micro := r.spec.Batch.MicroBatch
	for k := 0; k < len(r.evalIdx); k += micro {
		var seqs []*tandemleg.Encoded
		for j := k; j < k+micro && j < len(r.evalIdx); j++ {
			seqs = append(seqs, r.encoded[r.evalIdx[j]])
		}
		b, s, ids, sup, lens, _, _ := tandemleg.Batch(seqs, r.pad)
		r.evalBatches = append(r.evalBatches, engine.NewMicroBatch(b, s, ids, sup, lens))
	}
}

func (r *legRun) freeEvalBatches() {
	for _, b := range r.evalBatches {
		b.Free()
	}
}

// evaluate: the held-out CE (token-weighted mean) of the current adapter and its supervised tokens.
func (r *legRun) evaluate() (float64, int64, error) {
	if err := r.model.SetParams(r.params); err != nil {
		return 0, 0, err
	}
	var total float64
	var tokens int64
	for _, b := range r.evalBatches {
		s, n, err := r.model.Loss(b)
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

func (r *legRun) newOptimizer() {
	o := r.spec.Optimizer
	r.opt = &adamW{b1: o.Betas[0], b2: o.Betas[1], eps: o.Eps, wd: o.WeightDecay,
		m: make([]float32, r.model.NumParams), v: make([]float32, r.model.NumParams)}
}

// restore: the adapter, AdamW's moments and step, and the dropout counter from a checkpoint; returns
// the update to continue from (checked against the checkpoint's manifest).
func (r *legRun) restore(resumePath string, manifest *tandemleg.Manifest) (int64, error) {
	ad, err := tandemleg.ReadSafetensors(filepath.Join(resumePath, "adapter_model.safetensors"))
	if err != nil {
		return 0, err
	}
	mv, err := tandemleg.ReadSafetensors(filepath.Join(resumePath, "optimizer.safetensors"))
	if err != nil {
		return 0, err
	}
	var state struct {
		Step           int64  `json:"step"`
		DropoutCounter string `json:"dropout_counter"`
	}
	b, err := os.ReadFile(filepath.Join(resumePath, "state.json"))
	if err != nil {
		return 0, err
	}
	if err := json.Unmarshal(b, &state); err != nil {
		return 0, fmt.Errorf("%s/state.json: %v", resumePath, err)
	}
	for _, t := range r.model.Adapter {
		a, m, v := ad[t.Name], mv["exp_avg."+t.Name], mv["exp_avg_sq."+t.Name]
		if int64(len(a.Data)) != t.Count() || int64(len(m.Data)) != t.Count() || int64(len(v.Data)) != t.Count() {
			return 0, fmt.Errorf("%s: tensor %s missing or misshapen", resumePath, t.Name)
		}
		copy(r.params[t.Offset:], a.Data)
		copy(r.opt.m[t.Offset:], m.Data)
		copy(r.opt.v[t.Offset:], v.Data)
	}
	counter, err := strconv.ParseUint(state.DropoutCounter, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s/state.json: dropout_counter: %v", resumePath, err)
	}
	r.model.SetDropoutCounter(counter)
	r.opt.step = state.Step
	start := manifest.Update
	if start != r.opt.step {
		return 0, fmt.Errorf("%s/state.json: step %d but the manifest says update %d", resumePath, r.opt.step, start)
	}
	rel, _ := filepath.Rel(r.rf.Path, resumePath)
	return start, r.w.Resume(start, rel)
}

// writeUpdateZero: L2 (the loaded tensors' digests), L3 (the rendered records) and L1 (the untrained
// model's held-out CE, also evaluation 0).
func (r *legRun) writeUpdateZero() error {
	digests := []tandemleg.Digest{}
	base, err := r.model.BaseDigests()
	if err != nil {
		return err
	}
	digests = append(digests, base...)
	adapter := append([]engine.AdapterTensor{}, r.model.Adapter...)
	sortByName(adapter)
	for _, t := range adapter {
		digests = append(digests, tandemleg.DigestOf(t.Name, "adapter", []int64{t.Shape[0], t.Shape[1]},
			r.params[t.Offset:t.Offset+t.Count()]))
	}
	if err := r.w.L2(digests); err != nil {
		return err
	}
	l3 := make([]tandemleg.L3Record, 0, r.l3Count)
	for i := 0; i < r.l3Count; i++ {
		l3 = append(l3, r.encoded[i].L3())
	}
	if err := r.w.L3(r.rf.LegSetting(r.leg, "template"), r.spec.Sequence.MaxLen, l3); err != nil {
		return err
	}
	ce, n, err := r.evaluate()
	if err != nil {
		return err
	}
	if err := r.w.L1(ce, n, len(r.evalIdx)); err != nil {
		return err
	}
	return r.w.Eval(0, ce, n)
}

// train: the updates from `start`, each followed by its evaluation and checkpoint when due.
func (r *legRun) train(start int64) error {
	total := int64(len(r.updates))
	warmup := tandemleg.WarmupUpdates(r.spec.Schedule.WarmupFraction, total)
	buf := &updateBuffers{grads: make([]float32, r.model.NumParams), acc: make([]float64, r.model.NumParams),
		step: make([]float32, r.model.NumParams)}
	for u := start; u < total; u++ {
		if err := r.update(u, warmup, total, buf); err != nil {
			return err
		}
		done := u + 1
		if done%r.spec.Eval.Interval == 0 || done == total {
			ce, n, err := r.evaluate()
			if err != nil {
				return err
			}
			if err := r.w.Eval(done, ce, n); err != nil {
				return err
			}
		}
		if r.spec.Checkpoint.Interval > 0 && done%r.spec.Checkpoint.Interval == 0 && done < total {
			if err := r.checkpoint(done); err != nil {
				return err
			}
		}
	}
	return nil
}

// updateBuffers: one update's gradient buffers, allocated once for the run.
type updateBuffers struct {
	grads []float32 // one micro-batch's gradient
	acc   []float64 // the update's accumulated gradient
	step  []float32 // the clipped gradient AdamW takes
}

// update: one optimizer update — its micro-batches' forward and backward with docs/spec.md §Recipe's
// per-update token normalisation, the global norm, torch's clipping, AdamW at the schedule's lr, and its
// step event.
func (r *legRun) update(u, warmup, total int64, buf *updateBuffers) error {
	t0 := time.Now()
	var batches []*engine.MicroBatch
	var labels, inputTokens int64
	for _, mb := range r.updates[u] {
		seqs := make([]*tandemleg.Encoded, len(mb))
		for k, i := range mb {
			seqs[k] = r.encoded[i]
		}
		b, s, ids, sup, lens, nl, nt := tandemleg.Batch(seqs, r.pad)
		batches = append(batches, engine.NewMicroBatch(b, s, ids, sup, lens))
		labels += nl
		inputTokens += nt
	}
	if labels == 0 {
		return fmt.Errorf("plan.json: update %d has no supervised token", u)
	}
	if err := r.model.SetParams(r.params); err != nil {
		return err
	}
	for i := range buf.acc {
		buf.acc[i] = 0
	}
	lossTotal := 0.0
	for m, b := range batches {
		// grad scale 1/N: each micro-batch backpropagates (sum of its token losses) / (labels of the update).
		s, _, err := r.model.ForwardBackward(b, u, int64(m), 1/float64(labels), buf.grads)
		if err != nil {
			return err
		}
		lossTotal += s
		for i, g := range buf.grads {
			buf.acc[i] += float64(g)
		}
		b.Free()
	}
	sumsq := 0.0
	for _, g := range buf.acc {
		sumsq += g * g
	}
	gradNorm := math.Sqrt(sumsq)
	// torch.nn.utils.clip_grad_norm_: coef = min(1, max / (norm + 1e-6)) in float32.
	coef := float32(r.spec.Clip) / (float32(gradNorm) + 1e-6)
	if coef > 1 {
		coef = 1
	}
	for i, g := range buf.acc {
		buf.step[i] = float32(g) * coef
	}
	lr := tandemleg.CosineWithWarmupLR(r.spec.Optimizer.LR, u, warmup, total)
	r.opt.update(r.params, buf.step, lr)
	wall := time.Since(t0).Seconds()
	r.trainS += wall
	return r.w.Step(tandemleg.Step{Update: u, Loss: tandemleg.Num(lossTotal / float64(labels)),
		GradNorm: tandemleg.Num(gradNorm), LR: lr, Tokens: labels, InputTokens: inputTokens, WallS: wall})
}

// checkpoint: adapter, AdamW moments and the cursor (step, next update, dropout counter), committed by
// manifest, then the checkpoint event.
func (r *legRun) checkpoint(done int64) error {
	path, err := tandemleg.WriteCheckpoint(r.legDir, done, r.rf.SpecSHA256, func(tmp string) error {
		ad := map[string]tandemleg.Tensor{}
		mv := map[string]tandemleg.Tensor{}
		for _, t := range r.model.Adapter {
			shape := []int64{t.Shape[0], t.Shape[1]}
			ad[t.Name] = tandemleg.Tensor{Shape: shape, Data: r.params[t.Offset : t.Offset+t.Count()]}
			mv["exp_avg."+t.Name] = tandemleg.Tensor{Shape: shape, Data: r.opt.m[t.Offset : t.Offset+t.Count()]}
			mv["exp_avg_sq."+t.Name] = tandemleg.Tensor{Shape: shape, Data: r.opt.v[t.Offset : t.Offset+t.Count()]}
		}
		if err := tandemleg.WriteSafetensors(filepath.Join(tmp, "adapter_model.safetensors"), ad, nil); err != nil {
			return err
		}
		if err := tandemleg.WriteSafetensors(filepath.Join(tmp, "optimizer.safetensors"), mv, nil); err != nil {
			return err
		}
		st, _ := json.Marshal(map[string]interface{}{"step": r.opt.step, "next_update": done,
			"dropout_counter": strconv.FormatUint(r.model.DropoutCounter(), 10), "spec_sha256": r.rf.SpecSHA256,
			"writer": implementation})
		return os.WriteFile(filepath.Join(tmp, "state.json"), st, 0o644)
	})
	if err != nil {
		return err
	}
	rel, _ := filepath.Rel(r.rf.Path, path)
	return r.w.Checkpoint(done, rel)
}

// finish: the final adapter (PEFT's layout) beside its config, the timing and memory events, done.
func (r *legRun) finish() error {
	final := filepath.Join(r.legDir, "final")
	if err := os.MkdirAll(final, 0o755); err != nil {
		return err
	}
	ad := map[string]tandemleg.Tensor{}
	for _, t := range r.model.Adapter {
		ad[t.Name] = tandemleg.Tensor{Shape: []int64{t.Shape[0], t.Shape[1]}, Data: r.params[t.Offset : t.Offset+t.Count()]}
	}
	if err := tandemleg.WriteSafetensors(filepath.Join(final, "adapter_model.safetensors"), ad, map[string]string{"format": "pt"}); err != nil {
		return err
	}
	cfg, err := os.ReadFile(filepath.Join(r.rf.InitDir(), "adapter_config.json"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(final, "adapter_config.json"), cfg, 0o644); err != nil {
		return err
	}
	if err := r.w.TimingTrain(r.trainS, time.Since(r.tStart).Seconds()); err != nil {
		return err
	}
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	if err := r.w.Memory(ru.Maxrss*1024, nil); err != nil { // Linux reports KiB
		return err
	}
	rel, _ := filepath.Rel(r.rf.Path, final)
	return r.w.Done(int64(len(r.updates)), rel)
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

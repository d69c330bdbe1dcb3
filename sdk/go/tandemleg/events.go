package tandemleg

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"regexp"
	"strings"
	"time"
)

// ProtocolVersion is the leg protocol's version (docs/leg-protocol.md).
const ProtocolVersion = 1

var hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Num is a number that may be null on the wire (the protocol's NaN): NaN and infinities marshal as null.
type Num float64

// MarshalJSON writes null for a non-finite value.
func (n Num) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(n)) || math.IsInf(float64(n), 0) {
		return []byte("null"), nil
	}
	return json.Marshal(float64(n))
}

// Hello is the first event.
type Hello struct {
	Implementation string            `json:"implementation"`
	Leg            string            `json:"leg"`
	Language       string            `json:"language"`
	Stack          string            `json:"stack"`
	Versions       map[string]string `json:"versions"`
	Device         string            `json:"device"`
	DeviceName     string            `json:"device_name"`
	Threads        int               `json:"threads"`
	PID            int               `json:"pid"`
	SpecSHA256     string            `json:"spec_sha256"`
	Resume         bool              `json:"resume"`
}

// L3Record is one record of the l3 event.
type L3Record struct {
	Index           int64   `json:"index"`
	ID              string  `json:"id"`
	IDs             []int32 `json:"ids"`
	Boundary        int64   `json:"boundary"`
	SupervisedCount int64   `json:"supervised_count"`
	FullLength      int64   `json:"full_length"`
	TruncatedAt     *int64  `json:"truncated_at"`
	Text            string  `json:"text"`
}

// Step is one optimizer update.
type Step struct {
	Update      int64   `json:"update"`
	Loss        Num     `json:"loss"`
	GradNorm    Num     `json:"grad_norm"`
	LR          float64 `json:"lr"`
	Tokens      int64   `json:"tokens"`
	InputTokens int64   `json:"input_tokens"`
	WallS       float64 `json:"wall_s"`
}

// Writer writes events, one JSON object per line, each checked first; the order rules of the
// protocol are checked too (hello first, resume right after it, consecutive step updates, eval
// updates not going back, nothing after done or error).
type Writer struct {
	out      io.Writer
	written  []string
	nextStep int64
	lastEval int64
	closed   bool
}

// NewWriter writes to out (os.Stdout for a leg).
func NewWriter(out io.Writer) *Writer { return &Writer{out: out, lastEval: -1} }

// ProtocolError is an event that does not follow the protocol (nothing was written).
type ProtocolError struct{ Msg string }

func (e *ProtocolError) Error() string { return e.Msg }

func perr(format string, a ...interface{}) error { return &ProtocolError{fmt.Sprintf(format, a...)} }

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

func (w *Writer) emit(kind string, fields map[string]interface{}) error {
	if w.closed {
		return perr("event %s after %s: a leg says nothing after done or error", kind, w.written[len(w.written)-1])
	}
	if len(w.written) == 0 && kind != "hello" && kind != "error" {
		return perr("event %s before hello: hello must be the first line", kind)
	}
	rec := map[string]interface{}{"v": ProtocolVersion, "event": kind, "t": math.Round(float64(time.Now().UnixNano())/1e6) / 1e3}
	for k, v := range fields {
		rec[k] = v
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return perr("event %s: %v", kind, err)
	}
	if _, err := w.out.Write(append(b, '\n')); err != nil {
		return err
	}
	if f, ok := w.out.(interface{ Sync() error }); ok {
		_ = f.Sync()
	}
	w.written = append(w.written, kind)
	if kind == "done" || kind == "error" {
		w.closed = true
	}
	return nil
}

func oneLine(field, kind, s string) error {
	if s == "" || strings.Contains(s, "\n") {
		return perr("event %s: field '%s' must be a non-empty single line", kind, field)
	}
	return nil
}

// Hello writes the hello event.
func (w *Writer) Hello(h Hello) error {
	if len(w.written) > 0 {
		return perr("hello written twice")
	}
	for f, v := range map[string]string{"implementation": h.Implementation, "leg": h.Leg, "language": h.Language,
		"stack": h.Stack, "device": h.Device} {
		if err := oneLine(f, "hello", v); err != nil {
			return err
		}
	}
	if !hex64.MatchString(h.SpecSHA256) {
		return perr("event hello: field 'spec_sha256' must be 64 lowercase hex digits")
	}
	if h.Threads < 0 || h.PID < 1 {
		return perr("event hello: fields 'threads' >= 0 and 'pid' >= 1")
	}
	if h.Versions == nil {
		h.Versions = map[string]string{}
	}
	b, _ := json.Marshal(h)
	var m map[string]interface{}
	_ = json.Unmarshal(b, &m)
	return w.emit("hello", m)
}

// Resume says the leg continues from a checkpoint after `update` updates.
func (w *Writer) Resume(update int64, path string) error {
	if len(w.written) != 1 || w.written[0] != "hello" {
		return perr("resume must come right after hello")
	}
	if update < 0 {
		return perr("event resume: field 'update' must be >= 0")
	}
	w.nextStep, w.lastEval = update, update
	return w.emit("resume", map[string]interface{}{"update": update, "path": path})
}

func (w *Writer) resumed() bool {
	for _, k := range w.written {
		if k == "resume" {
			return true
		}
	}
	return false
}

// L2 writes the parameter digests after loading.
func (w *Writer) L2(tensors []Digest) error {
	if w.resumed() {
		return perr("event l2 from a resumed leg")
	}
	for i, d := range tensors {
		if d.Name == "" || (d.Kind != "base" && d.Kind != "adapter") || !hex64.MatchString(d.SHA256) || d.Shape == nil ||
			!finite(d.Sum) || !finite(d.SumSq) || d.SumSq < 0 || !finite(d.MaxAbs) || d.MaxAbs < 0 {
			return perr("event l2: field 'tensors'[%d] (%s) is not a well-formed digest", i, d.Name)
		}
	}
	return w.emit("l2", map[string]interface{}{"tensors": tensors})
}

// L3 writes the first K records as this leg renders and tokenizes them.
func (w *Writer) L3(template string, maxLen int, records []L3Record) error {
	if w.resumed() {
		return perr("event l3 from a resumed leg")
	}
	if err := oneLine("template", "l3", template); err != nil {
		return err
	}
	if maxLen < 1 {
		return perr("event l3: field 'max_len' must be >= 1")
	}
	for i, r := range records {
		if r.IDs == nil || r.Boundary < -1 || r.SupervisedCount < 0 || r.FullLength < int64(len(r.IDs)) {
			return perr("event l3: field 'records'[%d] (%s) is not a well-formed record", i, r.ID)
		}
	}
	return w.emit("l3", map[string]interface{}{"template": template, "max_len": maxLen, "records": records})
}

// L1 writes the initial held-out cross-entropy.
func (w *Writer) L1(ce float64, tokens int64, examples int) error {
	if w.resumed() {
		return perr("event l1 from a resumed leg")
	}
	if tokens < 0 || examples < 0 {
		return perr("event l1: 'tokens' and 'examples' must be >= 0")
	}
	return w.emit("l1", map[string]interface{}{"heldout_ce": Num(ce), "tokens": tokens, "examples": examples})
}

// Eval writes a held-out evaluation after `update` updates.
func (w *Writer) Eval(update int64, ce float64, tokens int64) error {
	if update < w.lastEval {
		return perr("event eval: field 'update' %d goes back (last %d)", update, w.lastEval)
	}
	w.lastEval = update
	return w.emit("eval", map[string]interface{}{"update": update, "heldout_ce": Num(ce), "tokens": tokens})
}

// Step writes one optimizer update.
func (w *Writer) Step(s Step) error {
	if s.Update != w.nextStep {
		return perr("event step: field 'update' is %d, expected %d", s.Update, w.nextStep)
	}
	if !finite(s.LR) || s.Tokens < 0 || s.InputTokens < 0 || !finite(s.WallS) || s.WallS < 0 {
		return perr("event step: lr must be finite, tokens, input_tokens and wall_s >= 0")
	}
	w.nextStep++
	b, _ := json.Marshal(s)
	var m map[string]interface{}
	_ = json.Unmarshal(b, &m)
	return w.emit("step", m)
}

// TimingSetup writes the setup timing.
func (w *Writer) TimingSetup(modelLoadS, tokenizeS, setupS float64) error {
	return w.emit("timing", map[string]interface{}{"phase": "setup", "model_load_s": modelLoadS, "tokenize_s": tokenizeS, "setup_s": setupS})
}

// TimingTrain writes the training timing.
func (w *Writer) TimingTrain(trainS, totalS float64) error {
	return w.emit("timing", map[string]interface{}{"phase": "train", "train_s": trainS, "total_s": totalS})
}

// Memory writes the peak memory (device bytes nil on the CPU).
func (w *Writer) Memory(peakHostBytes int64, peakDeviceBytes *int64) error {
	if peakHostBytes < 0 {
		return perr("event memory: 'peak_host_rss_bytes' must be >= 0")
	}
	return w.emit("memory", map[string]interface{}{"peak_host_rss_bytes": peakHostBytes, "peak_device_bytes": peakDeviceBytes})
}

// Checkpoint says a checkpoint was committed.
func (w *Writer) Checkpoint(update int64, path string) error {
	return w.emit("checkpoint", map[string]interface{}{"update": update, "path": path})
}

// Done is the last line of a successful leg.
func (w *Writer) Done(updates int64, final string) error {
	if updates != w.nextStep {
		return perr("event done: field 'updates' is %d but %d were stepped", updates, w.nextStep)
	}
	return w.emit("done", map[string]interface{}{"updates": updates, "final": final})
}

// Error reports a failure (one line).
func (w *Writer) Error(message string) error {
	message = strings.ReplaceAll(message, "\n", " ")
	if message == "" {
		message = "failed"
	}
	return w.emit("error", map[string]interface{}{"message": message})
}

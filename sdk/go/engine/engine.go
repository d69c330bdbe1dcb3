// Package engine binds tandem's engine C ABI (engine/include/tandem_engine.h, libtandem_engine_c.so)
// with cgo: the tandem_model_* calls, which compute a frozen base + LoRA model's forward and backward
// pass on one micro-batch and leave the training loop (adapter, accumulation, clipping, optimizer,
// schedule, checkpoints) to the caller.
//
// The C ABI's error text is per OS thread (tandem_last_error): a goroutine that calls into it must
// stay on one thread (runtime.LockOSThread), or the message of a failing call may be read from another
// thread. Model methods do the locking for the duration of each call.
package engine

/*
#cgo CFLAGS: -I${SRCDIR}/../../../engine/include
#cgo LDFLAGS: -ltandem_engine_c
#include <stdlib.h>
#include "tandem_engine.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"strings"
	"unsafe"

	"tandem/sdk/tandemleg"
)

// Dropout modes (tandem_dropout_mode).
const (
	DropoutOff    = C.TANDEM_DROPOUT_OFF
	DropoutNative = C.TANDEM_DROPOUT_NATIVE
	DropoutShared = C.TANDEM_DROPOUT_SHARED
)

// Error is a failed C ABI call: the call, its status and the library's one-line message.
type Error struct {
	Call    string
	Status  int
	Message string
}

func (e *Error) Error() string {
	kinds := map[int]string{1: "invalid argument", 2: "I/O", 3: "state", 4: "internal"}
	return fmt.Sprintf("%s: %s (%s)", e.Call, e.Message, kinds[e.Status])
}

func check(call string, status C.tandem_status) error {
	if status == C.TANDEM_OK {
		return nil
	}
	return &Error{Call: call, Status: int(status), Message: C.GoString(C.tandem_last_error())}
}

// Version is the engine's version string.
func Version() string { return C.GoString(C.tandem_engine_version()) }

// Options of a model (tandem_model_options).
type Options struct {
	Rank        int64
	Alpha       float64
	UseRSLoRA   bool
	Dropout     float64
	Targets     []string // empty: all seven projections
	DropoutMode int
	Threads     int
	Seed        uint64
}

// AdapterTensor is one LoRA tensor in the flat parameter layout.
type AdapterTensor struct {
	Name   string
	Shape  [2]int64
	Offset int64
}

// Count is the number of values of the tensor.
func (t AdapterTensor) Count() int64 { return t.Shape[0] * t.Shape[1] }

// Digest is the L2 digest of one tensor (docs/leg-protocol.md): the protocol's own type.
type Digest = tandemleg.Digest

// Model is a tandem_model handle. Not safe for concurrent use.
type Model struct {
	h         *C.tandem_model
	NumParams int64
	VocabSize int64
	Adapter   []AdapterTensor
}

// NewModel loads the base checkpoint folder (HF) and lays out the adapter.
func NewModel(baseDir string, o Options) (*Model, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var opts C.tandem_model_options
	C.tandem_model_options_default(&opts)
	opts.rank = C.int64_t(o.Rank)
	opts.alpha = C.double(o.Alpha)
	if o.UseRSLoRA {
		opts.use_rslora = 1
	} else {
		opts.use_rslora = 0
	}
	opts.dropout = C.double(o.Dropout)
	var targets *C.char
	if len(o.Targets) > 0 {
		targets = C.CString(strings.Join(o.Targets, ","))
		defer C.free(unsafe.Pointer(targets))
	}
	opts.targets = targets
	opts.dropout_mode = C.int32_t(o.DropoutMode)
	opts.threads = C.int32_t(o.Threads)
	opts.seed = C.uint64_t(o.Seed)
	cdir := C.CString(baseDir)
	defer C.free(unsafe.Pointer(cdir))
	var h *C.tandem_model
	if err := check("tandem_model_create", C.tandem_model_create(cdir, &opts, &h)); err != nil {
		return nil, err
	}
	m := &Model{h: h, NumParams: int64(C.tandem_model_num_params(h)), VocabSize: int64(C.tandem_model_vocab_size(h))}
	n := int64(C.tandem_model_num_adapter_tensors(h))
	for i := int64(0); i < n; i++ {
		var name *C.char
		var rows, cols, off C.int64_t
		if err := check("tandem_model_adapter_tensor", C.tandem_model_adapter_tensor(h, C.int64_t(i), &name, &rows, &cols, &off)); err != nil {
			m.Close()
			return nil, err
		}
		m.Adapter = append(m.Adapter, AdapterTensor{Name: C.GoString(name), Shape: [2]int64{int64(rows), int64(cols)}, Offset: int64(off)})
	}
	return m, nil
}

// Close frees the model.
func (m *Model) Close() {
	if m.h != nil {
		C.tandem_model_destroy(m.h)
		m.h = nil
	}
}

// BaseDigests are the L2 digests of the base as the engine loaded it (names sorted).
func (m *Model) BaseDigests() ([]Digest, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	n := int64(C.tandem_model_num_base_tensors(m.h))
	out := make([]Digest, 0, n)
	for i := int64(0); i < n; i++ {
		var name, sha *C.char
		var ndim C.int32_t
		var shape [4]C.int64_t
		var sum, sumsq, maxabs C.double
		if err := check("tandem_model_base_tensor", C.tandem_model_base_tensor(m.h, C.int64_t(i), &name, &ndim,
			&shape[0], &sum, &sumsq, &maxabs, &sha)); err != nil {
			return nil, err
		}
		d := Digest{Name: C.GoString(name), Kind: "base", Sum: float64(sum), SumSq: float64(sumsq), MaxAbs: float64(maxabs),
			SHA256: C.GoString(sha), Shape: []int64{}}
		for k := 0; k < int(ndim); k++ {
			d.Shape = append(d.Shape, int64(shape[k]))
		}
		out = append(out, d)
	}
	return out, nil
}

// SetParams copies the caller's flat adapter parameters into the model.
func (m *Model) SetParams(params []float32) error {
	if int64(len(params)) != m.NumParams {
		return fmt.Errorf("SetParams: %d values, the adapter has %d", len(params), m.NumParams)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return check("tandem_model_set_params", C.tandem_model_set_params(m.h, (*C.float)(unsafe.Pointer(&params[0])), C.int64_t(len(params))))
}

// MicroBatch is a right-padded micro-batch in C memory (the C struct holds pointers, so it cannot
// live in Go memory); Free it when done.
type MicroBatch struct {
	c *C.tandem_micro_batch
}

// NewMicroBatch copies flat ids / supervised (0/1) [batch*seq] and lengths [batch] into C memory.
func NewMicroBatch(batch, seq int, ids, supervised, lengths []int32) *MicroBatch {
	n := batch * seq
	mb := (*C.tandem_micro_batch)(C.malloc(C.size_t(unsafe.Sizeof(C.tandem_micro_batch{}))))
	mb.batch = C.int64_t(batch)
	mb.seq = C.int64_t(seq)
	cIDs := (*C.int32_t)(C.malloc(C.size_t(4 * n)))
	cSup := (*C.int32_t)(C.malloc(C.size_t(4 * n)))
	cLen := (*C.int32_t)(C.malloc(C.size_t(4 * batch)))
	copy(unsafe.Slice((*int32)(unsafe.Pointer(cIDs)), n), ids)
	copy(unsafe.Slice((*int32)(unsafe.Pointer(cSup)), n), supervised)
	copy(unsafe.Slice((*int32)(unsafe.Pointer(cLen)), batch), lengths)
	mb.ids, mb.supervised, mb.lengths = cIDs, cSup, cLen
	return &MicroBatch{c: mb}
}

// Free releases the C memory.
func (b *MicroBatch) Free() {
	if b.c != nil {
		C.free(unsafe.Pointer(b.c.ids))
		C.free(unsafe.Pointer(b.c.supervised))
		C.free(unsafe.Pointer(b.c.lengths))
		C.free(unsafe.Pointer(b.c))
		b.c = nil
	}
}

// ForwardBackward overwrites grads with gradScale * d(sum of token losses)/d(params) for one
// micro-batch of update `update` (dropout masks keyed by update and micro-batch index) and returns
// the sum of token losses and the number of labels.
func (m *Model) ForwardBackward(b *MicroBatch, update, micro int64, gradScale float64, grads []float32) (float64, int64, error) {
	if int64(len(grads)) != m.NumParams {
		return 0, 0, fmt.Errorf("ForwardBackward: room for %d gradients, the adapter has %d", len(grads), m.NumParams)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var loss C.double
	var sup C.int64_t
	err := check("tandem_model_forward_backward", C.tandem_model_forward_backward(m.h, b.c, C.int64_t(update), C.int64_t(micro),
		C.double(gradScale), (*C.float)(unsafe.Pointer(&grads[0])), C.int64_t(len(grads)), &loss, &sup))
	return float64(loss), int64(sup), err
}

// Loss is the sum of token losses over one micro-batch (dropout off) and its labels.
func (m *Model) Loss(b *MicroBatch) (float64, int64, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var loss C.double
	var sup C.int64_t
	err := check("tandem_model_loss", C.tandem_model_loss(m.h, b.c, &loss, &sup))
	return float64(loss), int64(sup), err
}

// DropoutCounter is the native-dropout element counter (for checkpoints).
func (m *Model) DropoutCounter() uint64 { return uint64(C.tandem_model_dropout_counter(m.h)) }

// SetDropoutCounter restores it.
func (m *Model) SetDropoutCounter(c uint64) { C.tandem_model_set_dropout_counter(m.h, C.uint64_t(c)) }

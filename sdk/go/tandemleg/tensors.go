package tandemleg

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
)

// Digest is the L2 digest of one tensor (docs/leg-protocol.md).
type Digest struct {
	Name   string  `json:"name"`
	Kind   string  `json:"kind"`
	Shape  []int64 `json:"shape"`
	Sum    float64 `json:"sum"`
	SumSq  float64 `json:"sumsq"`
	MaxAbs float64 `json:"maxabs"`
	SHA256 string  `json:"sha256"`
}

func float32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// DigestOf computes the digest: sum, sum of squares, max |x| accumulated in float64 in order, sha256
// of the float32 little-endian bytes.
func DigestOf(name, kind string, shape []int64, v []float32) Digest {
	var s, ss, mx float64
	for _, f := range v {
		x := float64(f)
		s += x
		ss += x * x
		if a := math.Abs(x); a > mx {
			mx = a
		}
	}
	h := sha256.Sum256(float32Bytes(v))
	return Digest{Name: name, Kind: kind, Shape: shape, Sum: s, SumSq: ss, MaxAbs: mx, SHA256: hex.EncodeToString(h[:])}
}

// Tensor is a float32 tensor read from or written to a safetensors file.
type Tensor struct {
	Shape []int64
	Data  []float32
}

// ReadSafetensors reads every tensor of a safetensors file as float32 (F32, F16, BF16 exactly; F64
// rounded to nearest).
func ReadSafetensors(path string) (map[string]Tensor, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(raw) < 8 {
		return nil, fmt.Errorf("%s: shorter than the 8-byte header length", path)
	}
	n := binary.LittleEndian.Uint64(raw)
	if n > uint64(len(raw)-8) {
		return nil, fmt.Errorf("%s: header length %d beyond the file", path, n)
	}
	var header map[string]json.RawMessage
	if err := json.Unmarshal(raw[8:8+n], &header); err != nil {
		return nil, fmt.Errorf("%s: header is not JSON (%v)", path, err)
	}
	data := raw[8+n:]
	out := map[string]Tensor{}
	for name, msg := range header {
		if name == "__metadata__" {
			continue
		}
		var info struct {
			Dtype   string   `json:"dtype"`
			Shape   []int64  `json:"shape"`
			Offsets [2]int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(msg, &info); err != nil {
			return nil, fmt.Errorf("%s: tensor %s: %v", path, name, err)
		}
		count := int64(1)
		for _, d := range info.Shape {
			count *= d
		}
		size := map[string]int64{"F32": 4, "F16": 2, "BF16": 2, "F64": 8}[info.Dtype]
		b, e := info.Offsets[0], info.Offsets[1]
		if size == 0 {
			return nil, fmt.Errorf("%s: tensor %s: unsupported dtype %s", path, name, info.Dtype)
		}
		if b < 0 || e < b || e > int64(len(data)) || e-b != count*size {
			return nil, fmt.Errorf("%s: tensor %s: data_offsets do not match its shape and dtype", path, name)
		}
		buf := data[b:e]
		v := make([]float32, count)
		for i := int64(0); i < count; i++ {
			switch info.Dtype {
			case "F32":
				v[i] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:]))
			case "BF16":
				v[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(buf[2*i:])) << 16)
			case "F64":
				v[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(buf[8*i:])))
			case "F16":
				v[i] = halfToFloat(binary.LittleEndian.Uint16(buf[2*i:]))
			}
		}
		out[name] = Tensor{Shape: info.Shape, Data: v}
	}
	return out, nil
}

func halfToFloat(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	}
	e := int32(-1)
	for mant&0x400 == 0 {
		mant <<= 1
		e++
	}
	return math.Float32frombits(sign | uint32(112-e)<<23 | (mant&0x3ff)<<13)
}

// WriteSafetensors writes the tensors as F32 (names sorted, data 8-byte aligned).
func WriteSafetensors(path string, tensors map[string]Tensor, metadata map[string]string) error {
	names := make([]string, 0, len(tensors))
	for n := range tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	header := map[string]interface{}{}
	var body []byte
	for _, n := range names {
		t := tensors[n]
		b := float32Bytes(t.Data)
		header[n] = map[string]interface{}{"dtype": "F32", "shape": t.Shape, "data_offsets": []int{len(body), len(body) + len(b)}}
		body = append(body, b...)
	}
	if len(metadata) > 0 {
		header["__metadata__"] = metadata
	}
	h, err := json.Marshal(header)
	if err != nil {
		return err
	}
	for (8+len(h))%8 != 0 {
		h = append(h, ' ')
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(h)))
	for _, part := range [][]byte{n[:], h, body} {
		if _, err := f.Write(part); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// WarmupUpdates is W = ceil(fraction * T).
func WarmupUpdates(fraction float64, total int64) int64 {
	return int64(math.Ceil(fraction * float64(total)))
}

// CosineWithWarmupLR is transformers.get_cosine_schedule_with_warmup times baseLR, 0-based update t.
func CosineWithWarmupLR(baseLR float64, t, warmup, total int64) float64 {
	if t < warmup {
		return baseLR * (float64(t) / float64(maxInt(1, warmup)))
	}
	progress := float64(t-warmup) / float64(maxInt(1, total-warmup))
	return baseLR * math.Max(0, 0.5*(1+math.Cos(math.Pi*0.5*2*progress)))
}

func maxInt(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

package tandemleg

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
)

var ckptName = regexp.MustCompile(`^ckpt-(\d{6})$`)

func fileSHA256(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	return hex.EncodeToString(h.Sum(nil)), n, err
}

func fsync(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// Manifest is a checkpoint's manifest.json (format 1).
type Manifest struct {
	Format     int                      `json:"format"`
	Update     int64                    `json:"update"`
	SpecSHA256 string                   `json:"spec_sha256"`
	Files      map[string]ManifestEntry `json:"files"`
}

// ManifestEntry is one payload file.
type ManifestEntry struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// WriteCheckpoint writes legs/<leg>/ckpt-<update:06d>/: the payload (write(tmp)) into ckpt-N.tmp/,
// every file fsynced, manifest.json last, then the rename and the parent's fsync.
func WriteCheckpoint(legDir string, update int64, specSHA256 string, write func(tmp string) error) (string, error) {
	final := filepath.Join(legDir, fmt.Sprintf("ckpt-%06d", update))
	tmp := final + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return "", err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", err
	}
	if err := write(tmp); err != nil {
		return "", err
	}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return "", err
	}
	m := Manifest{Format: 1, Update: update, SpecSHA256: specSHA256, Files: map[string]ManifestEntry{}}
	for _, e := range entries {
		p := filepath.Join(tmp, e.Name())
		if err := fsync(p); err != nil {
			return "", err
		}
		sum, size, err := fileSHA256(p)
		if err != nil {
			return "", err
		}
		m.Files[e.Name()] = ManifestEntry{Size: size, SHA256: sum}
	}
	b, _ := json.MarshalIndent(m, "", " ")
	mf, err := os.Create(filepath.Join(tmp, "manifest.json"))
	if err != nil {
		return "", err
	}
	if _, err := mf.Write(b); err != nil {
		mf.Close()
		return "", err
	}
	if err := mf.Sync(); err != nil {
		mf.Close()
		return "", err
	}
	mf.Close()
	if err := fsync(tmp); err != nil {
		return "", err
	}
	if err := os.RemoveAll(final); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", err
	}
	return final, fsync(legDir)
}

// VerifyCheckpoint checks a checkpoint folder against its manifest.
func VerifyCheckpoint(path, specSHA256 string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(path, "manifest.json"))
	if err != nil {
		return nil, fmt.Errorf("no readable manifest.json")
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("manifest.json: %v", err)
	}
	if m.Format != 1 {
		return nil, fmt.Errorf("manifest format %d, expected 1", m.Format)
	}
	if m.SpecSHA256 != specSHA256 {
		return nil, fmt.Errorf("written for a different experiment spec (spec_sha256 differs)")
	}
	if g := ckptName.FindStringSubmatch(filepath.Base(path)); g != nil && fmt.Sprintf("%06d", m.Update) != g[1] {
		return nil, fmt.Errorf("manifest update %d does not match the folder name", m.Update)
	}
	for name, e := range m.Files {
		sum, size, err := fileSHA256(filepath.Join(path, name))
		if err != nil {
			return nil, fmt.Errorf("file %s missing", name)
		}
		if size != e.Size || sum != e.SHA256 {
			return nil, fmt.Errorf("file %s does not match its manifest entry", name)
		}
	}
	return &m, nil
}

// NewestValidCheckpoint is the newest checkpoint folder that verifies ("" when none); skipped ones
// are reported through log.
func NewestValidCheckpoint(legDir, specSHA256 string, log func(string)) (string, *Manifest) {
	entries, err := os.ReadDir(legDir)
	if err != nil {
		return "", nil
	}
	var names []string
	for _, e := range entries {
		if ckptName.MatchString(e.Name()) {
			names = append(names, e.Name())
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(names)))
	for _, n := range names {
		p := filepath.Join(legDir, n)
		m, err := VerifyCheckpoint(p, specSHA256)
		if err == nil {
			return p, m
		}
		if log != nil {
			log(fmt.Sprintf("skipping checkpoint %s: %v", p, err))
		}
	}
	return "", nil
}

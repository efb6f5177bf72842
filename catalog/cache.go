package catalog

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// cacheFile is the last known good catalogue on disk.
type cacheFile struct {
	Version uint64    `json:"version"`  // bucket revision of the last applied change
	SavedAt time.Time `json:"saved_at"` // when this file was written
	Entries []Entry   `json:"entries"`
}

// loadCache reads path. A missing file is (nil, nil).
func loadCache(path string) (*cacheFile, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("catalog: read cache %s: %w", path, err)
	}
	var cf cacheFile
	if err := json.Unmarshal(b, &cf); err != nil {
		return nil, fmt.Errorf("catalog: parse cache %s: %w", path, err)
	}
	for i, e := range cf.Entries {
		if err := e.Validate(); err != nil {
			return nil, fmt.Errorf("catalog: cache %s entry %d: %w", path, i, err)
		}
	}
	return &cf, nil
}

// saveCache writes cf to path atomically: a temporary file in the same
// directory, synced, then renamed over path.
func saveCache(path string, cf *cacheFile) error {
	b, err := json.Marshal(cf)
	if err != nil {
		return fmt.Errorf("catalog: encode cache: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("catalog: cache dir %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".catalog-*.tmp")
	if err != nil {
		return fmt.Errorf("catalog: cache temp file: %w", err)
	}
	tmp := f.Name()
	_, werr := f.Write(b)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("catalog: write cache %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("catalog: rename cache to %s: %w", path, err)
	}
	return nil
}

// Package audit records who changed what through a daemon's API, and who
// was refused: one JSON object a line, in a file rotated by size
// (--audit-log PATH), and in the daemon's log at a level of its own
// (Level). It never records a token's secret: a token is named by its ID
// and name. Read, filtered, reads a log and its rotated files back
// (flotilla audit).
package audit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"
)

// Level is the level of audit records in the daemon's log: between INFO
// and WARN, so --log-level info shows them and warn does not.
const Level = slog.LevelInfo + 2

// Record is one audited request.
type Record struct {
	Time      time.Time `json:"time"`
	TokenID   string    `json:"tokenId,omitempty"`
	TokenName string    `json:"tokenName,omitempty"`
	Cert      string    `json:"cert,omitempty"`      // the client certificate's common name
	Remote    string    `json:"remote"`              // the peer's address
	Forwarded string    `json:"forwarded,omitempty"` // the daemon that forwarded the request
	Method    string    `json:"method"`
	Route     string    `json:"route"`
	Units     []string  `json:"units,omitempty"` // the units named (ranges as written), at most MaxUnits
	More      int       `json:"moreUnits,omitempty"`
	Status    int       `json:"status"`
	Outcome   string    `json:"outcome"` // ok, refused (401, 403, 415, 429) or failed
	Error     string    `json:"error,omitempty"`
}

// MaxUnits bounds the unit names one record lists; More counts the rest.
const MaxUnits = 100

// Defaults of Config.
const (
	DefaultMaxBytes = 64 << 20
	DefaultKeep     = 5
)

// Config configures a Log.
type Config struct {
	// Path is the file records are appended to (required).
	Path string
	// MaxBytes is the size at which the file is rotated to Path.1 (the
	// older ones shifting to Path.2, ...); default DefaultMaxBytes.
	MaxBytes int64
	// Keep is how many rotated files are kept; default DefaultKeep.
	Keep int
	// Logger, when set, also gets every record at Level.
	Logger *slog.Logger
}

// Log appends records to a file, rotating it by size. Its methods may be
// called from many goroutines.
type Log struct {
	cfg Config

	mu   sync.Mutex
	f    *os.File
	size int64
}

// Open opens (or creates, 0600) the audit log at cfg.Path.
func Open(cfg Config) (*Log, error) {
	if cfg.Path == "" {
		return nil, errors.New("audit: no path given")
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.Keep <= 0 {
		cfg.Keep = DefaultKeep
	}
	l := &Log{cfg: cfg}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *Log) open() error {
	f, err := os.OpenFile(l.cfg.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("audit log: %w", err)
	}
	l.f, l.size = f, fi.Size()
	return nil
}

// Record appends r (its Time set if zero) to the file and the logger.
func (l *Log) Record(r Record) error {
	if r.Time.IsZero() {
		r.Time = time.Now().UTC()
	}
	if lg := l.cfg.Logger; lg != nil {
		lg.Log(context.Background(), Level, "audit", "token", r.TokenID, "token_name", r.TokenName, "cert", r.Cert,
			"remote", r.Remote, "method", r.Method, "route", r.Route, "units", r.Units, "status", r.Status, "outcome", r.Outcome)
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return errors.New("audit log: closed")
	}
	if l.size > 0 && l.size+int64(len(b)) > l.cfg.MaxBytes {
		if err := l.rotate(); err != nil {
			return err
		}
	}
	n, err := l.f.Write(b)
	l.size += int64(n)
	return err
}

// rotate shifts Path.N to Path.N+1 (dropping the oldest beyond Keep) and
// Path to Path.1, and opens a new Path. Callers hold mu.
func (l *Log) rotate() error {
	l.f.Close()
	l.f = nil
	os.Remove(rotated(l.cfg.Path, l.cfg.Keep))
	for i := l.cfg.Keep - 1; i >= 1; i-- {
		os.Rename(rotated(l.cfg.Path, i), rotated(l.cfg.Path, i+1))
	}
	if err := os.Rename(l.cfg.Path, rotated(l.cfg.Path, 1)); err != nil {
		return fmt.Errorf("audit log: rotate: %w", err)
	}
	return l.open()
}

func rotated(path string, i int) string { return path + "." + strconv.Itoa(i) }

// Close closes the file.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// Filter selects records: those at or after Since (zero: all), of the
// token whose ID or name is Token ("": any).
type Filter struct {
	Since time.Time
	Token string
}

func (f Filter) match(r Record) bool {
	return !r.Time.Before(f.Since) && (f.Token == "" || r.TokenID == f.Token || r.TokenName == f.Token)
}

// Read calls fn with every record of the log at path and its rotated
// files that f selects, oldest first. A line that is not a record is an
// error naming its file and line.
func Read(path string, f Filter, fn func(Record) error) error {
	files := []string{}
	for i := 1; ; i++ {
		if _, err := os.Stat(rotated(path, i)); err != nil {
			break
		}
		files = append([]string{rotated(path, i)}, files...)
	}
	if _, err := os.Stat(path); err != nil && len(files) == 0 {
		return fmt.Errorf("audit log: %w", err)
	}
	files = append(files, path)
	for _, name := range files {
		if err := readFile(name, f, fn); err != nil {
			return err
		}
	}
	return nil
}

func readFile(name string, f Filter, fn func(Record) error) error {
	fh, err := os.Open(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil // rotated away meanwhile
	}
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return fmt.Errorf("audit log %s line %d: %w", name, n, err)
		}
		if !f.match(r) {
			continue
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("audit log %s: %w", name, err)
	}
	return nil
}

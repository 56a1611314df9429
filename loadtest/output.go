package main

import (
	"bytes"
	"strings"
	"sync"
)

// field returns the value of "key…" in a line of space-separated fields.
func field(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key); ok {
			return v
		}
	}
	return ""
}

// lineWatch is a process's stdout: it sends the first line starting with
// prefix on found and discards the rest.
type lineWatch struct {
	prefix string
	found  chan<- string
	buf    []byte
	done   bool
}

func (w *lineWatch) Write(p []byte) (int, error) {
	if w.done {
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		line := string(w.buf[:i])
		w.buf = w.buf[i+1:]
		if strings.HasPrefix(line, w.prefix) {
			w.found <- line
			w.done, w.buf = true, nil
			break
		}
	}
	if len(w.buf) > maxLine {
		w.buf = nil // a line this long is not the one we wait for
	}
	return len(p), nil
}

const maxLine = 64 << 10

// tail keeps the last tailSize bytes written to it, for error messages.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

const tailSize = 2048

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if n := len(t.buf); n > tailSize {
		t.buf = t.buf[n-tailSize:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.buf) == 0 {
		return "(no output on stderr)"
	}
	return "stderr: " + strings.TrimSpace(string(t.buf))
}

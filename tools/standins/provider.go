package main

import (
	"bufio"
	"bytes"
	"crypto/subtle"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// runProvider stands in for a model server that needs an API key: every
// /v1/ request without "Authorization: Bearer $PROVIDER_KEY" gets 401. It
// serves GET /v1/models (one model) and POST /v1/chat/completions (a fixed
// answer that reports its usage), enough for the operator's probe and for
// a request through the model-key proxy.
func runProvider(addr string) error {
	key := os.Getenv("PROVIDER_KEY")
	if key == "" {
		return fmt.Errorf("PROVIDER_KEY is not set")
	}
	want := []byte("Bearer " + key)
	keyed := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
				writeJSON(w, http.StatusUnauthorized, map[string]any{"error": map[string]string{"message": "missing or wrong API key"}})
				return
			}
			h(w, r)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", keyed(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []map[string]any{
			{"id": "keyed-standin", "object": "model", "max_model_len": 32768},
		}})
	}))
	mux.HandleFunc("POST /v1/chat/completions", keyed(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, 1<<20))
		writeJSON(w, http.StatusOK, map[string]any{
			"id": "standin", "object": "chat.completion", "model": "keyed-standin",
			"choices": []map[string]any{{"index": 0, "message": map[string]string{"role": "assistant", "content": "ok"}, "finish_reason": "stop"}},
			"usage":   map[string]int{"prompt_tokens": 11, "completion_tokens": 13, "total_tokens": 24},
		})
	}))
	return serve(addr, mux)
}

// runFindText looks for needle wherever this container can read: every
// regular file under / (but /proc, /sys and /dev, up to 8 MiB each), and the
// environment and command line of every process it can see (but its own,
// whose command line holds the needle). It prints one
// "found WHERE" line per hit, then "scanned N files, M processes".
func runFindText(needle string) error {
	if needle == "" {
		return fmt.Errorf("usage: standin find-text NEEDLE")
	}
	n := []byte(needle)
	files := 0
	_ = filepath.WalkDir("/", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			switch path {
			case "/proc", "/sys", "/dev":
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil || info.Size() > 8<<20 {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		files++
		if bytes.Contains(data, n) {
			fmt.Printf("found %s\n", path)
		}
		return nil
	})
	procs := 0
	self := strconv.Itoa(os.Getpid())
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if strings.Trim(e.Name(), "0123456789") != "" || e.Name() == self {
			continue
		}
		seen := false
		for _, part := range []string{"environ", "cmdline"} {
			data, err := os.ReadFile(filepath.Join("/proc", e.Name(), part))
			if err != nil {
				continue
			}
			seen = true
			if bytes.Contains(data, n) {
				fmt.Printf("found /proc/%s/%s\n", e.Name(), part)
			}
		}
		if seen {
			procs++
		}
	}
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintf(out, "scanned %d files, %d processes\n", files, procs)
	return out.Flush()
}

package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// The Ollama stand-in: the part of Ollama's CLI and API the chart's
// entrypoint (helm-charts/tinycode/files/ollama-entrypoint.sh) and tinycode
// use, called as `ollama` (the image links it there):
//
//	ollama serve          HTTP on OLLAMA_HOST: GET / ("Ollama is running"),
//	                      GET /api/tags, POST /api/pull, GET /v1/models
//	ollama list           GET /api/tags; exit 1 when the server does not answer
//	ollama pull [--] NAME POST /api/pull; exit 1 on the server's error
//
// A pull takes a few seconds (long enough for a test to see that readiness
// waits for it) and leaves a small file per model under OLLAMA_MODELS, so
// models survive a restart on the models volume. Names starting with
// "missing" do not exist: their pull fails, as a misspelt model's does.

const ollamaPullTime = 4 * time.Second

var modelName = regexp.MustCompile(`^[A-Za-z0-9._:/-]{1,200}$`)

type ollamaModel struct {
	Name       string    `json:"name"`
	Model      string    `json:"model"`
	ModifiedAt time.Time `json:"modified_at"`
	Size       int64     `json:"size"`
	Digest     string    `json:"digest"`
}

func runOllama(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: ollama serve|list|pull [--] NAME")
	}
	switch args[0] {
	case "serve":
		return ollamaServe()
	case "list":
		return ollamaList()
	case "pull":
		rest := args[1:]
		if len(rest) > 0 && rest[0] == "--" {
			rest = rest[1:]
		}
		if len(rest) != 1 {
			return errors.New("usage: ollama pull [--] NAME")
		}
		return ollamaPull(rest[0])
	}
	return fmt.Errorf("unknown command %q (the stand-in knows serve, list and pull)", args[0])
}

// ollamaHost: the address `ollama serve` listens on, and the one the client
// commands dial (0.0.0.0 is reached on loopback).
func ollamaHost() (listen, dial string) {
	listen = envOr("OLLAMA_HOST", "127.0.0.1:11434")
	listen = strings.TrimPrefix(strings.TrimPrefix(listen, "http://"), "https://")
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		host, port = listen, "11434"
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return listen, "http://" + net.JoinHostPort(host, port)
}

func modelsDir() string {
	dir := os.Getenv("OLLAMA_MODELS")
	if dir == "" {
		dir = filepath.Join(envOr("HOME", "/"), ".ollama", "models")
	}
	return filepath.Join(dir, "standin")
}

func modelFile(name string) string {
	return filepath.Join(modelsDir(), strings.NewReplacer("/", "%2F", ":", "%3A").Replace(name)+".json")
}

func canonical(name string) string {
	if !strings.Contains(name, ":") {
		return name + ":latest"
	}
	return name
}

func storedModels() []ollamaModel {
	entries, _ := os.ReadDir(modelsDir())
	models := []ollamaModel{}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(modelsDir(), e.Name()))
		var m ollamaModel
		if err == nil && json.Unmarshal(data, &m) == nil {
			models = append(models, m)
		}
	}
	sort.Slice(models, func(i, j int) bool { return models[i].Name < models[j].Name })
	return models
}

func ollamaServe() error {
	if err := os.MkdirAll(modelsDir(), 0o755); err != nil {
		return err
	}
	listen, _ := ollamaHost()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "Ollama is running")
	})
	mux.HandleFunc("GET /api/tags", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"models": storedModels()})
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		data := []map[string]any{}
		for _, m := range storedModels() {
			data = append(data, map[string]any{"id": m.Name, "object": "model", "created": m.ModifiedAt.Unix(), "owned_by": "library"})
		}
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
	})
	mux.HandleFunc("POST /api/pull", servePull)
	fmt.Fprintf(os.Stderr, "ollama stand-in: listening on %s, models in %s\n", listen, modelsDir())
	return serve(listen, mux)
}

func servePull(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model string `json:"model"`
		Name  string `json:"name"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid request body"})
		return
	}
	name := req.Model
	if name == "" {
		name = req.Name
	}
	if !modelName.MatchString(name) {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid model name"})
		return
	}
	name = canonical(name)
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	enc.Encode(map[string]string{"status": "pulling manifest"})
	flush()
	if strings.HasPrefix(name, "missing") {
		enc.Encode(map[string]string{"error": "pull model manifest: file does not exist"})
		return
	}
	const steps = 4
	for i := 1; i <= steps; i++ {
		select {
		case <-r.Context().Done():
			return
		case <-time.After(ollamaPullTime / steps):
		}
		enc.Encode(map[string]any{"status": "pulling " + name, "total": steps, "completed": i})
		flush()
	}
	m := ollamaModel{Name: name, Model: name, ModifiedAt: time.Now().UTC(), Size: 1 << 20, Digest: "standin"}
	data, _ := json.Marshal(m)
	if err := os.WriteFile(modelFile(name), data, 0o644); err != nil {
		enc.Encode(map[string]string{"error": "writing the model: " + err.Error()})
		return
	}
	enc.Encode(map[string]string{"status": "success"})
}

func ollamaList() error {
	_, base := ollamaHost()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(base + "/api/tags")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var tags struct {
		Models []ollamaModel `json:"models"`
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /api/tags: status %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&tags); err != nil {
		return err
	}
	fmt.Println("NAME\tSIZE\tMODIFIED")
	for _, m := range tags.Models {
		fmt.Printf("%s\t%d\t%s\n", m.Name, m.Size, m.ModifiedAt.Format(time.RFC3339))
	}
	return nil
}

func ollamaPull(name string) error {
	_, base := ollamaHost()
	body, _ := json.Marshal(map[string]string{"model": name})
	resp, err := http.Post(base+"/api/pull", "application/json", strings.NewReader(string(body)))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		var msg struct {
			Status string `json:"status"`
			Error  string `json:"error"`
		}
		if json.Unmarshal(lines.Bytes(), &msg) != nil {
			continue
		}
		if msg.Error != "" {
			return errors.New(msg.Error)
		}
		fmt.Fprintln(os.Stderr, msg.Status)
		if msg.Status == "success" {
			return nil
		}
	}
	return fmt.Errorf("the pull of %s ended without success (status %d)", name, resp.StatusCode)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

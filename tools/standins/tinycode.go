package main

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"
)

// The tinycode container's contract, and no more (CONTAINER.md): the UI port
// behind HTTP Basic with TINYCODE_SERVER_PASSWORD, /global/health open for the
// probes, /activity on TINYCODE_ACTIVITY_PORT, files under TINYCODE_WORKDIR.
// What the stand-in adds for tests, behind the password:
//
//	GET  /                   an HTML page naming the pod and a value only it knows
//	PUT  /files/NAME         write the body to TINYCODE_WORKDIR/NAME
//	GET  /files/NAME         read it back
//	POST /busy?busy=true     what /activity reports as busy
//
// While TINYCODE_WORKDIR/.standin-hold exists at start, the UI port waits
// before it listens (the pod runs, not Ready): a test's "starting" instance
// for as long as it needs one (`standin rm` in the pod releases it).
type tinycode struct {
	password string
	workdir  string
	secret   string // made at start: proves an answer came from this process

	mu           sync.Mutex
	lastActivity time.Time
	busy         bool
}

var fileName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

func runTinycode() error {
	t := &tinycode{
		password:     os.Getenv("TINYCODE_SERVER_PASSWORD"),
		workdir:      envOr("TINYCODE_WORKDIR", "/projects"),
		lastActivity: time.Now().UTC(),
	}
	if t.password == "" {
		return errors.New("TINYCODE_SERVER_PASSWORD is not set (the chart always sets it)")
	}
	buf := make([]byte, 16)
	if _, err := rand.Read(buf); err != nil {
		return err
	}
	t.secret = hex.EncodeToString(buf)
	port := envOr("TINYCODE_PORT", "4096")
	errs := make(chan error, 2)
	if ap := os.Getenv("TINYCODE_ACTIVITY_PORT"); ap != "" {
		go func() { errs <- serve(":"+ap, http.HandlerFunc(t.activity)) }()
	}
	go func() {
		hold := filepath.Join(t.workdir, ".standin-hold")
		for {
			if _, err := os.Stat(hold); err != nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		errs <- serve(":"+port, t.ui())
	}()
	fmt.Fprintf(os.Stderr, "tinycode stand-in listening on :%s (activity on :%s)\n", port, os.Getenv("TINYCODE_ACTIVITY_PORT"))
	return <-errs
}

func serve(addr string, h http.Handler) error {
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	return srv.ListenAndServe()
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func (t *tinycode) ui() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /global/health", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"healthy":true}`)
	})
	mux.Handle("/", t.authenticated(http.HandlerFunc(t.page)))
	mux.Handle("/files/{name}", t.authenticated(http.HandlerFunc(t.file)))
	mux.Handle("POST /busy", t.authenticated(http.HandlerFunc(t.setBusy)))
	return mux
}

func (t *tinycode) authenticated(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pass, ok := r.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(pass), []byte(t.password)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="tinycode"`)
			http.Error(w, "the tinycode password is required", http.StatusUnauthorized)
			return
		}
		t.mu.Lock()
		t.lastActivity = time.Now().UTC()
		t.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

func (t *tinycode) page(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		http.NotFound(w, r)
		return
	}
	host, _ := os.Hostname()
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(w, "<!doctype html><html><head><title>tinycode stand-in</title></head><body>"+
		"<h1>tinycode stand-in</h1><p>pod <span id=\"pod\">%s</span></p>"+
		"<p>process secret <span id=\"secret\">%s</span></p></body></html>\n",
		html.EscapeString(host), t.secret)
}

func (t *tinycode) file(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if !fileName.MatchString(name) {
		http.Error(w, "bad file name", http.StatusBadRequest)
		return
	}
	path := filepath.Join(t.workdir, name)
	switch r.Method {
	case http.MethodPut:
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err == nil {
			err = os.WriteFile(path, body, 0o664)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	case http.MethodGet:
		data, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			http.NotFound(w, r)
			return
		} else if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Write(data)
	default:
		http.Error(w, "PUT or GET", http.StatusMethodNotAllowed)
	}
}

func (t *tinycode) setBusy(w http.ResponseWriter, r *http.Request) {
	t.mu.Lock()
	t.busy = r.URL.Query().Get("busy") == "true"
	t.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// activity answers the operator's idle checks (CONTAINER.md, "Activity").
func (t *tinycode) activity(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/activity" {
		http.NotFound(w, r)
		return
	}
	t.mu.Lock()
	report := map[string]any{"lastActivity": t.lastActivity.Format(time.RFC3339), "busy": t.busy}
	t.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(report)
}

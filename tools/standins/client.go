package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"
)

// runGet is the client tests run inside pods: `standin get [-method M] [-password P] URL`
// prints `status <code>` and the body (at most 64 KiB); exit 0 on any HTTP
// answer, 3 when no connection could be made (refused, timed out).
func runGet(args []string) error {
	fs := flag.NewFlagSet("get", flag.ContinueOnError)
	password := fs.String("password", "", "HTTP Basic password (user tinycode)")
	method := fs.String("method", http.MethodGet, "HTTP method")
	timeout := fs.Duration("timeout", 3*time.Second, "whole request timeout")
	// NetworkPolicy controllers admit a new pod's address a moment after it
	// starts: retrying for a while tells "not yet" from "never".
	retryFor := fs.Duration("retry-for", 0, "keep trying this long until an HTTP answer comes")
	// HTTPS_PROXY and HTTP_PROXY are honoured unless -direct: a program
	// that ignores them is what an egress limit must stop too.
	direct := fs.Bool("direct", false, "connect directly, ignoring HTTPS_PROXY and HTTP_PROXY")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: standin get [-method M] [-password P] [-timeout D] [-retry-for D] [-direct] URL")
	}
	deadline := time.Now().Add(*retryFor)
	var resp *http.Response
	for {
		req, err := http.NewRequest(*method, fs.Arg(0), nil)
		if err != nil {
			return err
		}
		if *password != "" {
			req.SetBasicAuth("tinycode", *password)
		}
		transport := http.DefaultTransport.(*http.Transport).Clone()
		if *direct {
			transport.Proxy = nil
		}
		resp, err = (&http.Client{Timeout: *timeout, Transport: transport}).Do(req)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			fmt.Printf("unreachable %v\n", err)
			os.Exit(3)
		}
		time.Sleep(500 * time.Millisecond)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	fmt.Printf("status %d\n%s", resp.StatusCode, body)
	return nil
}

// stRdonly is ST_RDONLY of statfs(2)'s f_flags.
const stRdonly = 0x1

// runSelf reports the process's identity and privileges, read from the
// kernel, so a test can assert on what the runtime really granted.
func runSelf() error {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return err
	}
	fields := map[string]string{}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	rootWritable := true
	if f, err := os.CreateTemp("/", ".standin-probe-"); err != nil {
		rootWritable = false
		if !errors.Is(err, syscall.EROFS) && !errors.Is(err, os.ErrPermission) {
			return fmt.Errorf("probing /: %w", err)
		}
	} else {
		f.Close()
		os.Remove(f.Name())
	}
	// Mounted read-only, whoever asks (not only "this user may not write").
	var fsStat syscall.Statfs_t
	if err := syscall.Statfs("/", &fsStat); err != nil {
		return fmt.Errorf("statfs /: %w", err)
	}
	out := map[string]any{
		"rootReadOnly": fsStat.Flags&stRdonly != 0,
		"uid":          os.Getuid(),
		"gid":          os.Getgid(),
		"groups":       fields["Groups"],
		"capEff":       fields["CapEff"],
		"capPrm":       fields["CapPrm"],
		"capBnd":       fields["CapBnd"],
		"noNewPrivs":   fields["NoNewPrivs"],
		"seccomp":      fields["Seccomp"],
		"rootWritable": rootWritable,
		"envNames":     envNames(),
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

// envNames: the names of the environment's variables, never their values.
func envNames() []string {
	var names []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		names = append(names, name)
	}
	return names
}

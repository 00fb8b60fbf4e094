package main

import (
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
)

// runPause holds a pod's namespaces, as the pause image does, until the
// runtime stops it.
func runPause() error {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	<-ch
	return nil
}

// runServe answers every request with text: a stand-in for a host the
// tests must not be able to reach from an instance (169.254.169.254).
func runServe(addr, text string) error {
	return serve(addr, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, text)
	}))
}

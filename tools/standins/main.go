// Command standin is one small binary behind every stand-in image of the local
// node: it stands in for images this machine cannot pull (the tinycode
// container, the pause image) and gives tests a client to run inside pods.
//
//	standin tinycode     the tinycode container's contract (CONTAINER.md)
//	standin pause        the pod sandbox: sleep until SIGTERM
//	standin get URL      a client: GET URL, print the status code and body
//	standin serve ADDR TEXT
//	                     answer every request on ADDR with TEXT (a host in
//	                     the node's network: the metadata stand-in)
//	standin self         print what this process may do (uid, capabilities,
//	                     whether / is writable) as JSON, for `kubectl exec`
//	standin provider ADDR
//	                     a model server that needs the API key in
//	                     $PROVIDER_KEY (provider.go)
//	standin find-text NEEDLE
//	                     where this container can read NEEDLE: files,
//	                     process environments and command lines
//	standin put-file PATH CONTENT, standin cat PATH
//	                     write and read a file, for `kubectl exec` (the image
//	                     has no shell)
//	local-path-helper    (by that name) the volume provisioner's helper
//	ollama serve|list|pull
//	                     (by that name) the Ollama stand-in (ollama.go)
//
// They are stand-ins, named so in docs/development.md: none of them is the
// product.
package main

import (
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	// Called by the local-path provisioner under this name (see volume.go).
	if filepath.Base(os.Args[0]) == "local-path-helper" {
		if err := runVolumeHelper(os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "local-path-helper:", err)
			os.Exit(1)
		}
		return
	}
	if filepath.Base(os.Args[0]) == "ollama" {
		if err := runOllama(os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "ollama:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: standin tinycode|pause|serve ADDR TEXT|get URL|provider ADDR|find-text NEEDLE|self|put-file PATH CONTENT|rm PATH|cat PATH")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "tinycode":
		err = runTinycode()
	case "pause":
		err = runPause()
	case "serve":
		if len(os.Args) != 4 {
			err = fmt.Errorf("usage: standin serve ADDR TEXT")
		} else {
			err = runServe(os.Args[2], os.Args[3])
		}
	case "get":
		err = runGet(os.Args[2:])
	case "provider":
		if len(os.Args) != 3 {
			err = fmt.Errorf("usage: standin provider ADDR")
		} else {
			err = runProvider(os.Args[2])
		}
	case "find-text":
		if len(os.Args) != 3 {
			err = fmt.Errorf("usage: standin find-text NEEDLE")
		} else {
			err = runFindText(os.Args[2])
		}
	case "self":
		err = runSelf()
	case "put-file":
		if len(os.Args) != 4 {
			err = fmt.Errorf("usage: standin put-file PATH CONTENT")
		} else {
			err = os.WriteFile(os.Args[2], []byte(os.Args[3]), 0o664)
		}
	case "rm":
		if len(os.Args) != 3 {
			err = fmt.Errorf("usage: standin rm PATH")
		} else {
			err = os.Remove(os.Args[2])
		}
	case "cat":
		var data []byte
		if len(os.Args) != 3 {
			err = fmt.Errorf("usage: standin cat PATH")
		} else if data, err = os.ReadFile(os.Args[2]); err == nil {
			_, err = os.Stdout.Write(data)
		}
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "standin:", err)
		os.Exit(1)
	}
}
